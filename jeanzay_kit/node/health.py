"""The health gate of a Slurm job (watchdog.health_gate). Edge: probes and Slurm commands.

The rendered script (slurm/sbatch.py health_gate_lines), before the training step:

    srun --ntasks-per-node=1 ... python -m jeanzay_kit.node.health probe ... \\
        | python -m jeanzay_kit.node.health gate ...

`probe` runs once on every node and prints one JSON line: the node's problems (its GPUs
visible, a small kernel on each, their memory free; the run directory and the scratch
folders writable). `gate` reads those lines in the batch shell, decides
(node/health_rules.py) and acts: exit 0 to train; a node that failed is recorded in
endings.jsonl (class unhealthy_node), left out of the job (ExcNodeList) and the job is
requeued, before any training and without spending a restart (exit 3); every node of a
multi-node job failing the same check ends the job with its fix (exit 2).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from jeanzay_kit.ending.codes import Exit
from jeanzay_kit.node.health_rules import (
    END,
    GPU_CHECK_SECONDS,
    TRAIN,
    GateDecision,
    GpuCheck,
    NodeHealth,
    checks_of,
    decide_gate,
    gpu_problems,
    node_health_of,
    scratch_folders,
)
from jeanzay_kit.rundir.run_directory import RunDir

GATE = "jzk: health gate"


def write_error(folder: Path, node: str, create: bool) -> str:
    """Why a file cannot be written (and fsynced) in `folder`; "" when it can."""
    probe = folder / f".jzk-health-{node}-{os.getpid()}"
    try:
        if create:
            folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, b"ok\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        probe.unlink()
    except OSError as err:
        return err.strerror or str(err)
    return ""


def folder_problems(run_dir: RunDir, env: Mapping[str, str], node: str) -> list[str]:
    """The run directory (made if missing, as the training would) and the scratch
    folders (which must exist) take a write on this node."""
    problems = []
    error = write_error(run_dir.root, node, create=True)
    if error:
        problems.append(f"run_dir: {run_dir} cannot be written on {node}: {error}")
    for name, path in scratch_folders(env):
        error = write_error(Path(path), node, create=False)
        if error:
            problems.append(f"{name}: {path} cannot be written on {node}: {error}")
    return problems


def gpu_checks() -> list[GpuCheck]:
    """Every visible GPU: a matmul whose sum is known, then its free memory."""
    import torch

    if not torch.cuda.is_available():
        return []
    checks = []
    side = 128  # ones @ ones: each entry `side`, the sum side**3, exact in float32
    for index in range(torch.cuda.device_count()):
        try:
            ones = torch.ones(side, side, device=f"cuda:{index}")
            total = float((ones @ ones).sum().item())
            free, whole = torch.cuda.mem_get_info(index)
            wrong = "" if total == side**3 else f"a matmul summed to {total:g}, not {side**3}"
            checks.append(GpuCheck(index, free, whole, wrong))
        except RuntimeError as err:  # torch's CUDA errors (AcceleratorError, OOM) are these
            checks.append(GpuCheck(index, 0, 0, (str(err).splitlines() or [repr(err)])[0]))
    return checks


def timed_gpu_problems(expected: int) -> list[str]:
    """gpu_problems within GPU_CHECK_SECONDS: a check still running then is a problem
    (a GPU that hangs the driver), not a wait for ever. torch is imported before the
    clock starts: a cold import from a parallel filesystem takes seconds to tens of seconds
    on a healthy node, and is not the GPU's time."""
    import torch  # noqa: F401 - imported here, timed apart from the GPU checks

    found: list[str] = []

    def run() -> None:
        try:
            found.extend(gpu_problems(expected, gpu_checks()))
        except Exception as err:  # any failure of the check is the node's answer
            found.append(f"gpus: the check failed: {type(err).__name__}: {err}")
            return
        found.append("")  # done

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(GPU_CHECK_SECONDS)
    if worker.is_alive():
        return [
            f"gpus: the check did not end in {GPU_CHECK_SECONDS:g} s (a GPU or its driver hangs)"
        ]
    return [p for p in found if p]


def probe(run_dir: RunDir, gpus: int, device: str, env: Mapping[str, str]) -> NodeHealth:
    started = time.monotonic()
    node = env.get("SLURMD_NODENAME") or socket.gethostname()
    problems = folder_problems(run_dir, env, node)
    notes = []
    if device == "cpu" or gpus == 0:
        notes.append(f"GPU checks skipped: cluster.device={device}")
    else:
        problems += timed_gpu_problems(gpus)
    return NodeHealth(node, tuple(problems), tuple(notes), time.monotonic() - started)


def read_answers(text: str) -> list[NodeHealth]:
    answers = []
    for line in text.splitlines():
        with contextlib.suppress(ValueError):
            found = node_health_of(json.loads(line))
            if found is not None:
                answers.append(found)
    return answers


def act(run_dir: RunDir, decision: GateDecision, env: Mapping[str, str], runner: Any = None) -> int:
    """Record each failed node's end, then requeue without them (or end the job); the
    batch script's exit code."""
    from jeanzay_kit.distributed.ranks import array_id
    from jeanzay_kit.ending.ending_rules import UNHEALTHY, Verdict
    from jeanzay_kit.ending.endings import record_ending
    from jeanzay_kit.ending.requeue import requeue_job
    from jeanzay_kit.errors import SlurmCommandError
    from jeanzay_kit.node.restart_job import leave_out

    job = array_id(env) or env.get("SLURM_JOB_ID")
    retried = decision.action != END and job is not None
    for node, problems in sorted(decision.bad.items()):
        verdict = Verdict(UNHEALTHY, "; ".join(problems)[:240], step=None, node=node)
        with contextlib.suppress(OSError):  # the run directory may be what failed
            record_ending(run_dir, verdict, job_id=job, nodes=[node], retried=retried)
    if decision.action == END:
        say(f"{decision.line} (no training started; history in {run_dir.endings})")
        return Exit.REFUSED
    if job is None:
        say(f"{decision.line}; not a Slurm job: nothing to requeue")
        return 1
    try:
        requeue_job(job, env.get("JZK_REQUEUE_FILE") or None, runner)
    except SlurmCommandError as err:
        say(f"{decision.line}; could not requeue job {job}: {err}")
        return 1
    left_out = leave_out(run_dir, job, runner, env)
    say(f"{decision.line}; requeued job {job} before any training (no restart spent){left_out}")
    return Exit.STOPPED


def say(line: str) -> None:
    print(f"{GATE}: {line}", file=sys.stderr, flush=True)


def earlier_checks(run_dir: RunDir, env: Mapping[str, str]) -> list[set[str]]:
    """What each node this job left out before failed (its unhealthy_node endings)."""
    from jeanzay_kit.distributed.ranks import array_id
    from jeanzay_kit.ending.ending_rules import UNHEALTHY
    from jeanzay_kit.ending.endings import read_endings

    job = array_id(env) or env.get("SLURM_JOB_ID")
    if job is None:
        return []
    return [
        checks_of(str(e.get("evidence", "")))
        for e in read_endings(run_dir)
        if e.get("kind") == UNHEALTHY and e.get("job_id") == job
    ]


# Set by SIGTERM: Slurm is ending the job (scancel, a preemption, the time limit), or our
# own requeue below is. Noted, not fatal: the line saying what was done must be printed.
ENDING = threading.Event()


def gate(run_dir: RunDir, answers_text: str, env: Mapping[str, str], runner: Any = None) -> int:
    from jeanzay_kit.slurm_syntax.hostlist import expand_hostlist

    nodelist = env.get("SLURM_JOB_NODELIST", "")
    nodes = expand_hostlist(nodelist) if nodelist else []
    answers = read_answers(answers_text)
    decision = decide_gate(
        answers, nodes or [a.node for a in answers], earlier_checks(run_dir, env)
    )
    if decision.action == TRAIN:
        say(decision.line)
        return 0
    if job_ending(env, runner):
        # The probes were ended with the job: their missing answers blame no node. A
        # requeue now would bring a cancelled job back (Slurm requeues finished jobs too).
        say("the job is ending (scancel, a preemption or its time limit) while its nodes "
            "were checked: no node blamed, nothing requeued")  # fmt: skip
        return 128 + signal.SIGTERM
    return act(run_dir, decision, env, runner)


def job_ending(env: Mapping[str, str], runner: Any = None) -> bool:
    """SIGTERM reached the gate, or Slurm no longer has the job running (it marks a job
    cancelled before it signals its steps; squeue not showing it at all: gone)."""
    from jeanzay_kit.distributed.ranks import array_id
    from jeanzay_kit.errors import SlurmCommandError
    from jeanzay_kit.slurm.commands import job_states

    job = array_id(env) or env.get("SLURM_JOB_ID")
    if ENDING.is_set() or job is None:
        return ENDING.is_set()
    try:
        states = job_states(job, runner)
    except SlurmCommandError:
        return False  # not known: the gate acts as it would have
    return not any(state in ("RUNNING", "CONFIGURING") for state in states)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jeanzay_kit.node.health")
    parser.add_argument("action", choices=("probe", "gate"))
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--expect-gpus", type=int, default=0, help="GPUs per node Slurm gave")
    parser.add_argument("--device", default="cuda", help="cluster.device")
    args = parser.parse_args(argv)
    env = dict(os.environ)  # the environment is read here, once
    if args.action == "probe":
        answer = probe(RunDir.of(args.run_dir), args.expect_gpus, args.device, env)
        print(json.dumps(answer.record()), flush=True)
        os._exit(0)  # not waiting for a GPU check's thread that hangs
    # Our own `scontrol requeue` sends SIGTERM to the batch step, this process included:
    # it must not cut the line that says what was done. Slurm's, before it: a job ending.
    signal.signal(signal.SIGTERM, lambda signum, frame: ENDING.set())
    return gate(RunDir.of(args.run_dir), sys.stdin.read(), env)


if __name__ == "__main__":
    sys.exit(main())
