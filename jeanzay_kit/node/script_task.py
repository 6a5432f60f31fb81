"""Your own command on every task (job.entry a script): started with torchrun's variables.

Two ways in:

* on a Slurm task (or a torchrun worker) the rendered script runs
  `python -m jeanzay_kit.node.script_task --run-dir=DIR -- python script.py ARGS`: it reads
  the launcher's variables once, adds torchrun's contract (distributed/script_env.py)
  and runs the command as its child (`slurm_task`: signals reach it, exit 3 becomes a
  requeue mark);
* on this machine (`jzk train job.entry=script.py`, node/entry.py) `launch_local` starts
  `resources.gpus_per_node` processes of the command, as torchrun would, passes on the
  stop signals it receives, and stops the others when one fails.

The contract a script may rely on is in docs/slurm.md ("Your own script"): exit
EXIT_PREEMPTED (3) after saving its own checkpoint to be requeued and started again in the
same JZK_RUN_DIR.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from jeanzay_kit.config.spec import JobSpec
from jeanzay_kit.distributed.ranks import RankInfo, rank_info_from_env
from jeanzay_kit.distributed.script_env import (
    REQUEUE_MARK,
    entry_problem,
    script_argv,
    script_env,
)
from jeanzay_kit.errors import JzkError
from jeanzay_kit.train.preemption import EXIT_PREEMPTED, StopRequest, signal_name

# A command that stopped to be run again: exit 3, or killed by the time-limit warning
# (SIGUSR1) it does not handle (it goes on from its newest own checkpoint).
STOPPED = (EXIT_PREEMPTED, -signal.SIGUSR1)


def check_entry(entry: str, base: Path) -> None:
    """JzkError naming job.entry when it is neither a file (relative to `base`) nor an
    importable module."""
    try:
        words = shlex.split(entry)
    except ValueError as err:  # an unclosed quote
        raise JzkError(f"job.entry={entry!r} cannot be read as a command: {err}") from None
    is_file = bool(words) and (base / words[0]).is_file()
    module_found = False
    if len(words) == 2 and words[0] == "-m":
        # The project's root is importable on the tasks (project/import_path.py).
        sys.path.insert(0, str(base))
        try:
            module_found = importlib.util.find_spec(words[1]) is not None
        except (ImportError, ValueError):
            module_found = False
        finally:
            sys.path.remove(str(base))
    problem = entry_problem(entry, is_file, module_found)
    if problem:
        raise JzkError(problem)


def task_env(env: Mapping[str, str], run_dir: str) -> dict[str, str]:
    """The task's environment plus torchrun's variables derived from the launcher's."""
    info = rank_info_from_env(env)
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    return {**env, **script_env(info, str(Path(run_dir).resolve()))}


def frozen(command: Sequence[str], env: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
    """The command and environment with the project's code as it was at submission
    (JZK_CODE_DIR, project/snapshot.py): the snapshot's copy of a relative script path,
    and the snapshot first on PYTHONPATH (`-m package.module`, the script's imports)."""
    code = env.get("JZK_CODE_DIR")
    command, env = list(command), dict(env)
    if not code:
        return command, env
    env["PYTHONPATH"] = os.pathsep.join(p for p in (code, env.get("PYTHONPATH")) if p)
    if len(command) > 1 and not command[1].startswith("-") and not os.path.isabs(command[1]):
        copy = Path(code) / command[1]
        if copy.is_file():
            command[1] = str(copy)
    return command, env


def slurm_task(command: Sequence[str], env: Mapping[str, str], run_dir: str) -> int:
    """The rendered scripts' way: run `command` as this Slurm task's child and end as it
    ended, except that its "requeue me" (exit 3) is written down as REQUEUE_MARK in the
    run directory and the task exits 0. srun's --kill-on-bad-exit would otherwise
    terminate the ranks still saving their checkpoint as soon as the first one exits 3.
    Slurm's signals reach the command (it is in the task's process group); they are
    passed on as well, in case the site's process tracking reaches only the task."""
    command, full = frozen(command, task_env(env, run_dir))
    child = subprocess.Popen(command, env=full)

    def pass_on(signum: int, _frame: object) -> None:
        if child.poll() is None:
            child.send_signal(signum)

    for sig in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, pass_on)
    code = child.wait()
    if code in STOPPED:
        (Path(run_dir) / REQUEUE_MARK).write_text(f"{os.getpid()}\n")
        return 0
    return 128 - code if code < 0 else code  # killed by signal N: 128 + N, as shells say


def run_task(
    command: Sequence[str], env: Mapping[str, str], run_dir: str, runner: Any = None
) -> int:
    """Run `command` as a child of this task (a sweep's task, which must return to
    submitit, or `srun jzk train` by hand) and return the exit code the task ends with.
    The command's "run me again" (exit 3, or death by SIGUSR1) requeues the job: task 0
    runs `scontrol requeue` (runner: the Slurm command runner, a stand-in in tests)."""
    command, full = frozen(command, task_env(env, run_dir))
    code = subprocess.run(command, env=full, check=False).returncode
    if code not in STOPPED:
        return 128 - code if code < 0 else code
    return requeue_stopped(rank_info_from_env(env), runner)


def requeue_stopped(info: RankInfo, runner: Any = None) -> int:
    """After the command stopped to be run again: task 0 requeues the job (without it,
    the command said so and the job ends); every task ends with EXIT_PREEMPTED."""
    from jeanzay_kit import report
    from jeanzay_kit.errors import SlurmCommandError
    from jeanzay_kit.slurm.commands import requeue

    if info.rank != 0:
        return EXIT_PREEMPTED
    if info.requeue_id is None:
        print("jzk: the command stopped to be run again (exit 3): run it again", flush=True)
        return EXIT_PREEMPTED
    try:
        requeue(info.requeue_id, runner)
    except SlurmCommandError as err:
        report.error("jzk", f"could not requeue job {info.requeue_id}: {err}. HINT: resubmit it")
        return 1
    print(f"jzk: the command stopped to be run again: requeued job {info.requeue_id}", flush=True)
    return EXIT_PREEMPTED


def launch_local(
    spec: JobSpec, run_dir: Path, env: Mapping[str, str], python: str, stop: StopRequest
) -> int:
    """`resources.gpus_per_node` processes of the command on this machine; the exit code
    the run ends with (0, EXIT_PREEMPTED when stopped by a signal or asking to be run
    again, else 1)."""
    from jeanzay_kit.node.local_ranks import free_port, local_rank_infos

    world = spec.layout.world_size
    command = script_argv(python, spec.job.entry, spec.job.args)
    run_dir.mkdir(parents=True, exist_ok=True)
    infos = local_rank_infos(world, free_port())
    procs = [
        subprocess.Popen(command, env={**env, **script_env(info, str(run_dir.resolve()))})
        for info in infos
    ]
    print(f"jzk: {world} process(es) of {' '.join(command)}, run dir {run_dir}", flush=True)
    sent = 0
    failed: tuple[int, int] | None = None
    while any(p.poll() is None for p in procs):
        if stop.signum and stop.signum != sent:  # pass each new signal on, once
            sent = stop.signum
            for p in procs:
                if p.poll() is None:
                    p.send_signal(sent)
        for rank, p in enumerate(procs):
            code = p.poll()
            if failed is None and code not in (None, 0, *STOPPED):
                failed = (rank, code)
                _stop_others(procs)
        time.sleep(0.05)
    codes = [p.returncode for p in procs]
    if failed is None:  # every process may end in the same poll (each exits 4 on a hang)
        failed = next(((r, c) for r, c in enumerate(codes) if c not in (0, *STOPPED)), None)
    if failed is not None:
        rank, code = failed
        how = f"killed by {signal_name(-code)}" if code < 0 else f"exit code {code}"
        print(
            f"jzk train: process {rank} of {' '.join(command)} ended ({how}); the others "
            "were stopped",
            file=sys.stderr,
            flush=True,
        )
        return 1
    if any(c in STOPPED for c in codes) or sent:
        print(
            f"jzk train: stopped ({signal_name(sent) or 'exit 3'}): run the same command to "
            "go on from the script's own checkpoint in JZK_RUN_DIR",
            flush=True,
        )
        return EXIT_PREEMPTED
    return 0


def _stop_others(procs: list[subprocess.Popen]) -> None:
    """SIGTERM, then SIGKILL after the local launcher's grace (node/local_ranks.py)."""
    from jeanzay_kit.node.local_ranks import GRACE_S

    for p in procs:
        if p.poll() is None:
            p.terminate()
    deadline = time.monotonic() + GRACE_S
    while time.monotonic() < deadline and any(p.poll() is None for p in procs):
        time.sleep(0.05)
    for p in procs:
        if p.poll() is None:
            p.kill()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jeanzay_kit.node.script_task")
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command after --")
    # The environment is read here, once.
    try:
        return slurm_task(command, dict(os.environ), args.run_dir)
    except JzkError as err:
        print(f"jzk: {err}", file=sys.stderr, flush=True)
        return 2


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.exit(main())
