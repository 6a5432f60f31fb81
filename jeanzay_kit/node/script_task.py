"""Your own command on every task (job.entry a script): started with torchrun's variables.

Two ways in:

* on a Slurm task (or a torchrun worker) the rendered script runs
  `python -m jeanzay_kit.node.script_task --run-dir=DIR -- python script.py ARGS`: it reads
  the launcher's variables once, adds torchrun's contract (distributed/script_env.py)
  and runs the command as its child (`slurm_task`: signals reach it, exit 3 becomes a
  requeue mark);
* on this machine (`jzk train job.entry=script.py`, node/entry.py) `run_here` starts
  `resources.gpus_per_node` processes of the command, as torchrun would, passes on the
  stop signals it receives, and stops the others when one fails.

The contract a script may rely on is in docs/slurm.md ("Your own script"): exit
Exit.STOPPED (3) after saving its own checkpoint to be requeued and started again in the
same JZK_RUN_DIR.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jeanzay_kit.config.schema import SCRIPT_OUTPUTS
from jeanzay_kit.config.spec import JobSpec
from jeanzay_kit.distributed.ranks import RankInfo, array_id, rank_info_from_env
from jeanzay_kit.distributed.script_env import (
    launcher_env,
    script_argv,
    script_env,
)
from jeanzay_kit.ending.codes import Exit
from jeanzay_kit.ending.ending_rules import died_at_exit, forgiven_at_exit
from jeanzay_kit.ending.endings import (
    record_completed,
    record_unretried_end,
    recorded_outcome,
    rerun_line,
)
from jeanzay_kit.ending.preemption import StopRequest, signal_name
from jeanzay_kit.errors import JzkError
from jeanzay_kit.node.restart_job import REQUEUE_WAIT_S, after_task_failure, sweep_point_limit
from jeanzay_kit.node.script_local_watch import LocalWatch, end_hung
from jeanzay_kit.node.script_port import agreed_port
from jeanzay_kit.rundir.run_directory import RunDir
from jeanzay_kit.script.entry import hydra_job, script_command
from jeanzay_kit.script.script_files import (
    check_resume,
    claim_run_dir,
    earlier_run_line,
    record_attempt,
    script_writes,
    wrote_since,
)
from jeanzay_kit.script.script_rules import ScriptCommand, requeue_note

if TYPE_CHECKING:
    from jeanzay_kit.node.script_watch import Ended, Watch

# A command that stopped to be run again: exit 3, or killed by the time-limit warning
# (SIGUSR1) it does not handle (it goes on from its newest own checkpoint).
STOPPED = (Exit.STOPPED, -signal.SIGUSR1)


def begin_attempt(
    command: ScriptCommand, run_dir: RunDir, start: float, rank: int = 0
) -> list[str]:
    """The arguments of this attempt: job.args, plus job.resume_args when an earlier
    attempt (files older than `start`, the attempt's start) left the script's files,
    plus, for a Hydra app, its output directory in the run directory
    (script/hydra_app_rules.py)."""
    from jeanzay_kit.script import hydra_app_rules as hydra

    claim_run_dir(run_dir, command)
    app = hydra_job(command, Path.cwd())
    resuming = script_writes(run_dir, start, app)[0]
    if rank == 0 and (line := rerun_line(run_dir, command.resume_args)):
        print(f"jzk: {line}", flush=True)
    if resuming and command.resume_args:
        check_resume(run_dir, command.resume_args)  # every rank: none starts the script
    if resuming and command.resume_args and rank == 0:
        print(
            f"jzk: {run_dir} holds the script's files of an earlier attempt: running it "
            f"with job.resume_args {' '.join(command.resume_args)}",
            flush=True,
        )
    tail = command.argv_tail(resuming)
    if app is None:
        return tail
    output_dir = str(Path.cwd() / run_dir.script_cwd)  # an absolute run_dir stays itself
    if rank == 0:
        print(hydra.start_line(command.entry, command.args, output_dir), flush=True)

    def is_run_dir(value: str) -> bool:
        # A relative hydra.run.dir is relative to the script's working directory, whose
        # entries show the project's (it may not be made yet: read it from the project).
        bases = (output_dir, os.getcwd())
        return any(
            os.path.realpath(os.path.join(b, value)) == os.path.realpath(run_dir.root)
            for b in bases
        )

    return [*tail, *hydra.app_args(command.args, output_dir, is_run_dir)]


def stop_note(
    command: ScriptCommand,
    run_dir: RunDir,
    start: float,
    requeued: bool = True,
    cwd: Path | None = None,
) -> str:
    """What the next attempt will do, after this one stopped to be run again."""
    from jeanzay_kit.script.hydra_app_rules import stop_hint

    app = hydra_job(command, Path.cwd())
    # Relative arguments name paths in the script's own working directory.
    script_cwd = run_dir.script_cwd
    wrote = wrote_since(run_dir, start, command.args, cwd or script_cwd, app)
    hint = None if app is None else stop_hint(str(script_cwd), command.args)
    return requeue_note(wrote, command.resume_args, str(run_dir), requeued, hint)


def attempt_start(env: Mapping[str, str]) -> float:
    """When this attempt started: the batch script's JZK_STEP_START (one value for every
    task of the step, so all tasks decide alike whether they resume), else now."""
    value = env.get("JZK_STEP_START", "")
    return float(value) if value.isdigit() else time.time()


def task_env(env: Mapping[str, str], run_dir: RunDir, settings: str = "") -> dict[str, str]:
    """The task's environment as its launcher's process (a Slurm task, a torchrun
    worker: distributed/script_env.py launcher_env) plus torchrun's variables derived
    from the launcher's, and the job's runtime settings (JSON,
    config/runtime_settings.py) for a session."""
    info = rank_info_from_env(env)
    run_dir.root.mkdir(parents=True, exist_ok=True)
    seen = launcher_env(env, info, info.job_id or str(os.getpid()))
    return {**seen, **script_env(info, str(run_dir.root.resolve()), settings)}


def own_cwd(
    run_dir: RunDir, env: Mapping[str, str], script: ScriptCommand, *tops: str, say: bool = True
) -> tuple[Path, dict[str, str]]:
    """The script's working directory, <run_dir>/cwd showing the project but for its
    output places (node/script_cwd.py), and what its environment adds: JZK_PROJECT_DIR.
    What it does not show is said in one line (`say`: on one task of the job)."""
    from jeanzay_kit.node.script_cwd import prepare_script_cwd, start_line, toolkit_tops

    project = Path.cwd()
    always = toolkit_tops(project, str(run_dir), *tops)
    cwd, plan = prepare_script_cwd(
        run_dir,
        project,
        env.get("JZK_CODE_DIR"),
        always=always,
        outputs=script.outputs,
        args=script.args,
        resume_args=script.resume_args,
    )
    line = start_line(cwd, plan)
    if say and line:
        print(line, file=sys.stderr, flush=True)
    return cwd, {"JZK_PROJECT_DIR": str(project.resolve())}


def anchored(command: Sequence[str], project: Path) -> list[str]:
    """The command with a relative script path made the project's absolute one: the
    script runs in <run_dir>/cwd, but its tracebacks and `__file__` name the project's
    file, and its own folder stays first on sys.path."""
    command = list(command)
    if len(command) > 1 and not command[1].startswith("-") and not os.path.isabs(command[1]):
        path = project / command[1]
        if path.is_file():
            command[1] = str(path.resolve())
    return command


def job_settings(spec: JobSpec) -> str:
    """The job's runtime settings as a script task passes them on (config/runtime_settings.py)."""
    from jeanzay_kit.config.runtime_settings import from_spec, to_env

    return to_env(from_spec(spec))


def frozen(command: Sequence[str], env: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
    """The command and environment with the project's code as it was at submission
    (JZK_CODE_DIR, project/snapshot.py): the snapshot's copy of a relative script path,
    and the snapshot first on PYTHONPATH (`-m package.module`, the script's imports).
    The arguments stay as the user wrote them: a relative one resolves in the script's
    working directory, whose links lead to the snapshot's code and the project's data
    (node/script_cwd_rules.py), on a node as here."""
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


def slurm_task(
    command: Sequence[str],
    env: Mapping[str, str],
    run_dir: str,
    *,
    resume_args: Sequence[str] = (),
    may_change: Sequence[str] = (),
    outputs: Sequence[str] = SCRIPT_OUTPUTS,
    stall_seconds: float = 0.0,
    heartbeat_seconds: float = 2.0,
    after_signal_seconds: float = 0.0,
    settings: str = "",
) -> int:
    """The rendered scripts' way: run `command` as this Slurm task's child and end as it
    ended, except that its "requeue me" (exit 3) is written down as RunDir.requeue_mark in the
    run directory and the task exits 0. srun's --kill-on-bad-exit would otherwise
    terminate the ranks still saving their checkpoint as soon as the first one exits 3.
    The child is watched (node/script_watch.py): each stop signal reaches it once, and
    a hung script (stall_seconds, 0: not watched) ends the task with Exit.HUNG."""
    from jeanzay_kit.rundir.lease import acquire_for

    script = ScriptCommand.from_argv(command, resume_args, may_change, outputs)
    start, rank = attempt_start(env), rank_info_from_env(env).rank
    # Task 0 holds the run directory for the job (lease.py): a second job in it
    # is refused before the script starts.
    folder = RunDir.of(run_dir)  # the path from the batch script's command line
    lease = acquire_for(folder, env, f"script {script.entry}") if rank == 0 else None
    try:
        watching = (stall_seconds, heartbeat_seconds, after_signal_seconds)
        return _run_slurm_script(
            command, env, folder, script, start, watching=watching, settings=settings
        )
    finally:
        if lease is not None:
            lease.release()


def _run_slurm_script(
    command: Sequence[str],
    env: Mapping[str, str],
    run_dir: RunDir,
    script: ScriptCommand,
    start: float,
    *,
    watching: tuple[float, ...],
    settings: str,
) -> int:
    from jeanzay_kit.node.script_watch import after_the_work

    head = command[: len(command) - len(script.args)]  # python and the entry
    info = rank_info_from_env(env)
    watch, ended = watched_attempt(
        lambda args: [*head, *args], script, env, run_dir, start, watching,
        settings=settings, provenance=True,
    )  # fmt: skip
    code = ended.code
    # Died at exit, after its program ended, while every other rank's command ended
    # well or after the stop signal: no restart is spent (ending_rules.forgiven_at_exit).
    # Said and recorded, and the task ends 0 (srun's --kill-on-bad-exit would end the
    # others mid-exit, and the restart step would requeue a finished run) or as a stop.
    forgiven = after_the_work(watch, info.world_size, ended)
    if forgiven is not None:
        print(f"jzk: {forgiven.note}: not a failure, no restart spent", file=sys.stderr, flush=True)
        if not forgiven.stopped:
            record_completed(run_dir, forgiven.note, job_id=_job_id(env))
            return 0
        code = Exit.STOPPED
    if code == 0 and info.rank == 0:
        record_completed(run_dir, "the command exited 0", job_id=_job_id(env))
    if code in STOPPED:
        # The signal it died of, for the requeue's message (node/restart_job.py).
        died = f" {signal_name(-code)}" if code < 0 else ""
        run_dir.requeue_mark.write_text(f"{os.getpid()}{died}\n")
        if info.rank == 0:
            print(f"jzk: {stop_note(script, run_dir, start)}", file=sys.stderr, flush=True)
        return 0
    return 128 - code if code < 0 else code  # killed by signal N: 128 + N, as shells say


def watched_attempt(
    argv_of: Callable[[list[str]], list[str]],
    script: ScriptCommand,
    env: Mapping[str, str],
    run_dir: RunDir,
    start: float,
    watching: tuple[float, ...],
    *,
    settings: str,
    provenance: bool = False,
) -> tuple[Watch, Ended]:
    """One attempt of the script as this Slurm task's child (a rendered script's task,
    a sweep's): torchrun's variables and an agreed port, its own working directory, the
    run directory claimed and the resume checked (begin_attempt: argv_of gets the
    script's arguments for this attempt), its start recorded by task 0, then watched
    (node/script_watch.py; watching: JobSpec.script_watch, empty: not watched).
    provenance: task 0 records the code this start runs (a rendered script's task; a
    sweep's has node/entry.py record it). Returns the Watch and how the command ended."""
    from jeanzay_kit.node.script_watch import Watch, supervise
    from jeanzay_kit.project.provenance import record_start_provenance

    info = rank_info_from_env(env)
    port = agreed_port(env, info, run_dir)
    cwd, extra = own_cwd(run_dir, env, script, say=info.rank == 0)
    argv = argv_of(begin_attempt(script, run_dir, start, info.rank))
    if info.rank == 0:  # `jzk status` counts the starts of a script, a sweep point's too
        record_attempt(run_dir, start, env.get("SLURM_JOB_ID"), array_id(env))
        if provenance:
            record_start_provenance(run_dir, env)
    full_env = {**task_env(env, run_dir, settings), "MASTER_PORT": str(port), **extra}
    command, full = frozen(argv, full_env)
    token = f"{env.get('SLURM_JOB_ID', '')}-{int(start)}"
    watch = Watch(run_dir, info.rank, token, start, *watching)
    return watch, supervise(anchored(command, Path.cwd()), full, watch, cwd=cwd)


def _job_id(env: Mapping[str, str]) -> str | None:
    return array_id(env) or env.get("SLURM_JOB_ID")


def run_task(
    python: str,
    script: ScriptCommand,
    env: Mapping[str, str],
    run_dir: RunDir,
    *,
    watching: tuple[float, ...] = (),
    runner: Any = None,
    sleep: Callable[[float], None] = time.sleep,
    settings: str = "",
    max_restarts: int = 0,
) -> int:
    """Run the script as a child of this task (a sweep's task, which must return to
    submitit, or `srun jzk train` by hand) and return the exit code the task ends with.
    It is watched as a rendered script's task watches it (watching: JobSpec.script_watch;
    empty, Watch's defaults: not watched); a hang ends it with Exit.HUNG, its stacks
    dumped, instead of holding the allocation to its limit. The command's "run me again"
    (exit 3, or death by SIGUSR1) requeues the job: task 0 runs `scontrol requeue`
    (runner: the Slurm command runner, a stand-in in tests); so does a hang or a crash
    after progress, within max_restarts (preemption.max_restarts)."""
    info, start = rank_info_from_env(env), attempt_start(env)
    # This task goes on after its command (the requeue, then submitit), unlike a rendered
    # script's: the stop signals supervise holds in the mask go back to its handlers.
    kept = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    try:
        _, ended = watched_attempt(
            lambda args: script_argv(python, script.entry, args),
            script, env, run_dir, start, watching, settings=settings,
        )  # fmt: skip
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, kept)
    code = ended.code
    if code == 0:
        if info.rank == 0:
            record_completed(run_dir, "the command exited 0", job_id=_job_id(env))
        return 0
    if code not in STOPPED:
        status = 128 - code if code < 0 else code  # killed by signal N: 128 + N, as shells say
        limit = sweep_point_limit(env, max_restarts)
        if info.rank == 0 and limit is None:  # `srun jzk train` by hand: recorded, not retried
            record_unretried_end(run_dir, code, max(-code, 0), start, job_id=_job_id(env))
        return after_task_failure(
            info, status, run_dir, start, env, limit, runner=runner, sleep=sleep, script=True
        )
    if info.rank == 0:
        print(f"jzk: {stop_note(script, run_dir, start)}", file=sys.stderr, flush=True)
    return requeue_stopped(info, runner, sleep)


def requeue_stopped(
    info: RankInfo, runner: Any = None, sleep: Callable[[float], None] = time.sleep
) -> int:
    """After the command stopped to be run again: task 0 requeues the job (without it,
    the command said so and the job ends); every task ends with Exit.STOPPED."""
    from jeanzay_kit import report
    from jeanzay_kit.ending.requeue import ask_from_every_rank, requeue_job
    from jeanzay_kit.errors import SlurmCommandError

    ask_from_every_rank(info)
    if info.rank != 0:
        if info.requeue_id is not None:
            # Rank 0 is running `scontrol requeue`, which ends this job: exiting first
            # with 3 would make srun's --kill-on-bad-exit end rank 0 mid-requeue.
            sleep(REQUEUE_WAIT_S)
        return Exit.STOPPED
    if info.requeue_id is None:
        print("jzk: the command stopped to be run again (exit 3): run it again", flush=True)
        return Exit.STOPPED
    try:
        requeue_job(info.requeue_id, info.requeue_file, runner)
    except SlurmCommandError as err:
        report.error("jzk", f"could not requeue job {info.requeue_id}: {err}. HINT: resubmit it")
        return 1
    print(f"jzk: the command stopped to be run again: requeued job {info.requeue_id}", flush=True)
    return Exit.STOPPED


def run_here(
    spec: JobSpec,
    run_dir: RunDir,
    env: Mapping[str, str],
    python: str,
    stop: StopRequest,
) -> int:
    """`resources.gpus_per_node` processes of the command on this machine; the exit code
    the run ends with (0, Exit.STOPPED when stopped by a signal or asking to be run
    again, Exit.HUNG when the watch found them hung, else 1), recorded."""
    script = script_command(spec)
    start = time.time()
    # A new run of a script whose other arguments left a run with files beside it: said.
    if earlier := earlier_run_line(run_dir, spec.job.name, script):
        print(earlier, file=sys.stderr, flush=True)
    # Another command's run directory is refused before anything is written in it.
    args = begin_attempt(script, run_dir, start)
    argv = script_argv(python, script.entry, args)
    with recorded_outcome(run_dir) as outcome:
        outcome.code = _run_here(
            spec, run_dir, env, script, start=start, argv=argv, stop=stop, ending=outcome
        )
    record_unretried_end(run_dir, outcome.code, outcome.signal, start)
    return outcome.code


def _run_here(
    spec: JobSpec,
    run_dir: RunDir,
    env: Mapping[str, str],
    script: ScriptCommand,
    *,
    start: float,
    argv: list[str],
    stop: StopRequest,
    ending: Any,
) -> int:
    """The processes of one local run, watched; the code it ends with (ending: its
    `signal` is set to the signal a process died of)."""
    from jeanzay_kit.node.local import local_start_mark
    from jeanzay_kit.node.local_ranks import free_port, local_rank_infos

    world = spec.layout.world_size
    command = anchored(argv, Path.cwd())
    record_attempt(run_dir, start, None)
    infos = local_rank_infos(world, free_port())
    cwd, extra = own_cwd(run_dir, env, script, spec.job.log_dir)
    local_start_mark(run_dir)
    # Each process's share of this machine's cores, as the rendered scripts export it on
    # Slurm and torchrun does (OMP_NUM_THREADS unset: 1): with all of them each, two
    # processes on two cores trained 2x slower (docs/your-own-loop.md). The user's own wins.
    threads = {"OMP_NUM_THREADS": str(spec.loader.cpus_per_process or 1)}
    procs = _start_processes(command, infos, {**threads, **env, **extra}, cwd, run_dir, spec)
    print(f"jzk: {world} process(es) of {shlex.join(command)}, run dir {run_dir}", flush=True)
    pumps = _pump_output(procs, run_dir)
    errs = pumps[1::2]  # each process's stderr pump
    failed, sent = _watch_processes(procs, stop, pumps, LocalWatch.of(spec, run_dir, start))
    for pump in pumps:
        pump.join(timeout=10)
    if failed == HUNG:  # said and dumped (node/script_local_watch.py)
        return Exit.HUNG
    codes = [p.returncode for p in procs]
    at_exit = _died_at_exit(codes, errs, sent)
    if failed is None:  # every process may end in the same poll (each exits 4 on a hang)
        failed = _after_the_work(codes, at_exit, sent)
    died = _note_signal([0 if r in at_exit else c for r, c in enumerate(codes)], failed, ending)
    if failed is not None:
        return _say_failed(failed, command)
    if any(c in STOPPED for c in codes) or sent:
        how = (
            signal_name(sent)
            or (died and f"killed by {signal_name(died)}, which it does not handle")
            or f"exit {Exit.STOPPED}"
        )
        print(
            f"jzk train: stopped ({how}); run the same command to "
            f"go on: {stop_note(script, run_dir, start, requeued=False, cwd=cwd)}",
            flush=True,
        )
        return Exit.STOPPED
    return 0


def _say_failed(failed: tuple[int, int | None], command: Sequence[str]) -> int:
    """Which process failed and how, said; the run's exit code (1)."""
    rank, code = failed
    code = code if code is not None else 0  # failed holds an ended process's code
    how = f"killed by {signal_name(-code)}" if code < 0 else f"exit code {code}"
    print(
        f"jzk train: process {rank} of {shlex.join(command)} ended ({how}); the others "
        "were stopped",
        file=sys.stderr,
        flush=True,
    )
    return 1


def _note_signal(
    codes: list[int | None], failed: tuple[int, int | None] | None, ending: Any
) -> int:
    """The signal a process died of, noted on `ending` for the run's outcome.json (`jzk
    status`): the failed process's (not the others' stop), else the first one's; 0: none."""
    died = next((-c for c in codes if c is not None and c < 0), 0)
    if failed is not None:
        code = failed[1] or 0
        died = -code if code < 0 else 0
    if ending is not None:
        ending.signal = died
    return died


def _start_processes(
    command: list[str],
    infos: list[RankInfo],
    env: Mapping[str, str],
    cwd: Path,
    run_dir: RunDir,
    spec: JobSpec,
) -> list[subprocess.Popen]:
    """One process of the command per rank, each as torchrun would start it (its
    variables, TORCHELASTIC_* included: distributed/script_env.py launcher_env); first
    a warning when the script starts no process group (script/reach.py)."""
    from jeanzay_kit.script.reach import single_process_warning

    if said := single_process_warning(spec.job.entry, Path.cwd(), len(infos)):
        print(f"jzk: warning: {said}", file=sys.stderr, flush=True)
    run_id = str(os.getpid())  # this launcher's: TORCHELASTIC_RUN_ID of its processes
    # A process group of their own: a Ctrl-C in the terminal reaches this launcher
    # alone, which passes it on once (in the terminal's group they would get it twice).
    # Their output comes through pipes, whole lines at a time (runtime/rank_log.py).
    return [
        subprocess.Popen(
            command,
            # Unbuffered: a Python script's prints reach the terminal as they come, as
            # they did when it wrote to it directly (a pipe would buffer 8 KB).
            env={
                "PYTHONUNBUFFERED": "1",
                # Python's report of how a process died (ending_rules.died_at_exit reads
                # it), as the Slurm wrapper sets it (node/script_watch.py).
                "PYTHONFAULTHANDLER": "1",
                **launcher_env(env, info, run_id),
                **script_env(info, str(run_dir.root.resolve()), job_settings(spec)),
            },
            cwd=cwd,
            process_group=0,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for info in infos
    ]


def _pump_output(procs: list[subprocess.Popen], run_dir: RunDir) -> list[threading.Thread]:
    """A thread per pipe: each process's lines to this launcher's stdout/stderr and,
    labelled with its rank, to <run_dir>/train.log."""
    from jeanzay_kit.rundir.rank_lines import label
    from jeanzay_kit.runtime.rank_log import Pump, open_log

    fd, lock = open_log(run_dir), threading.Lock()
    pumps: list[threading.Thread] = []
    for rank, proc in enumerate(procs):
        assert proc.stdout is not None and proc.stderr is not None
        pumps.append(Pump(proc.stdout, sys.stdout.buffer, fd, label(rank), lock))
        pumps.append(Pump(proc.stderr, sys.stderr.buffer, fd, label(rank), lock))
    for pump in pumps:
        pump.start()
    return pumps


# _watch_processes's failure when the watch found the processes hung and ended them.
HUNG = (-1, Exit.HUNG)


def _watch_processes(
    procs: list[subprocess.Popen], stop: StopRequest, pumps: Sequence[Any], watch: LocalWatch
) -> tuple[tuple[int, int | None] | None, int]:
    """Until every process ended: pass each new stop signal on once, stop the others
    when one fails (one that died at exit, after its program ended, is no failure yet:
    the others finish), and end them all when they are hung (HUNG). Returns (rank, code)
    of the first failure (None: none seen while they ran) and the signal sent (0: none).
    pumps: each process's stdout and stderr pumps, in order."""
    received = sent = 0  # the newest stop signal this launcher got, and passed on
    failed: tuple[int, int | None] | None = None
    errs = pumps[1::2]
    while any(p.poll() is None for p in procs):
        if stop.signum and stop.signum != received:
            received = stop.signum
            watch.seen.saw(received, time.time())
        if received != sent and watch.can_pass(received, procs, pumps):
            sent = received  # each new signal, once, to every process at the same moment
            for p in procs:
                if p.poll() is None:
                    p.send_signal(sent)
        for rank, p in enumerate(procs):
            code = p.poll()
            if failed is None and not _stopped_or_done(code, sent):
                errs[rank].join(timeout=2.0)  # its whole report (a grandchild may hold the pipe)
                if _died_at_exit([code], [errs[rank]], sent):
                    continue  # the others finish: _after_the_work decides
                failed = (rank, code)
                _stop_others(procs)
        if failed is None and (hang := watch.hang(procs, pumps)) is not None:
            end_hung(procs, errs, watch, hang)
            return HUNG, sent
        time.sleep(0.05)
    return failed, sent


def _died_at_exit(codes: Sequence[int | None], errs: Sequence[Any], sent: int) -> set[int]:
    """The processes killed by SIGABRT after their program had ended (faulthandler's
    report in their stderr: ending_rules.died_at_exit; pytorch/pytorch#190489)."""
    tails = [e.tail.decode("utf-8", "replace") for e in errs]
    return {i for i, (c, t) in enumerate(zip(codes, tails, strict=True)) if died_at_exit(c, t)}


def _after_the_work(
    codes: list[int | None], at_exit: set[int], sent: int
) -> tuple[int, int | None] | None:
    """The first failure among the ended processes, or None. One that died at exit is no
    failure when the stop signal was passed on or each other ended 0 or likewise
    (ending_rules.forgiven_at_exit): said, no failure counted. A single process that
    aborts is still a crash."""
    peers = {r: (c, r in at_exit) for r, c in enumerate(codes)}
    for rank, code in enumerate(codes):
        if rank in at_exit:
            forgiven = forgiven_at_exit(rank, code or 0, True, peers, len(codes), sent != 0)
            if forgiven is None:
                return rank, code
            print(f"jzk train: {forgiven.note}: not a failure", file=sys.stderr, flush=True)
        elif not _stopped_or_done(code, sent):
            return rank, code
    return None


def _stopped_or_done(code: int | None, sent: int) -> bool:
    """Still running, done, asking to be run again, or ended by the stop signal it was
    sent (a script that handles no SIGTERM dies of it: that is the stop, not a crash)."""
    return code is None or code == 0 or code in STOPPED or (sent != 0 and code == -sent)


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
    parser.add_argument("--resume-arg", action="append", default=[], help="job.resume_args")
    parser.add_argument("--may-change", action="append", default=[], help="job.args_may_change")
    parser.add_argument(
        "--outputs",
        type=json.loads,
        default=None,
        help="job.script_outputs as a JSON list (absent: the default)",
    )
    parser.add_argument("--stall-seconds", type=float, default=0.0, help="watchdog.stall_seconds")
    parser.add_argument("--heartbeat-seconds", type=float, default=2.0)
    parser.add_argument(
        "--after-signal-seconds", type=float, default=0.0, help="preemption.lead_seconds / 2"
    )
    parser.add_argument(
        "--settings",
        default="",
        help="the job's runtime settings, JSON (config/runtime_settings.py)",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if len(command) < 2:
        parser.error("no command (python ENTRY ARGS...) after --")
    # The environment is read here, once.
    try:
        return slurm_task(
            command,
            dict(os.environ),
            args.run_dir,
            resume_args=args.resume_arg,
            may_change=args.may_change,
            outputs=SCRIPT_OUTPUTS if args.outputs is None else args.outputs,
            stall_seconds=args.stall_seconds,
            heartbeat_seconds=args.heartbeat_seconds,
            after_signal_seconds=args.after_signal_seconds,
            settings=args.settings,
        )
    except JzkError as err:
        print(f"jzk: {err}", file=sys.stderr, flush=True)
        return 2


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.exit(main())
