"""cluster=local: start the worker processes on this machine, as srun would on a node.

One process per visible GPU (NCCL), or `resources.gpus_per_node` CPU processes (gloo).
torch.multiprocessing watches them: when one fails, the others are terminated and its
traceback is shown, so a failure never leaves the rest blocked in a collective.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from pathlib import Path

import torch.multiprocessing as mp

from jeanzay_kit import report
from jeanzay_kit.config.spec import JobSpec
from jeanzay_kit.distributed.ranks import RankInfo
from jeanzay_kit.node.local_ranks import GRACE_S, free_port, local_rank_infos
from jeanzay_kit.node.restarts import RESTARTS_FILE, read_restarts, record_restart
from jeanzay_kit.runtime.heartbeat import EXIT_HUNG, HEARTBEAT_DIR, read_beats
from jeanzay_kit.runtime.preemption import EXIT_PREEMPTED, StopRequest
from jeanzay_kit.runtime.stall import made_progress

FORWARDED = (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM, signal.SIGINT)


def _worker(
    index: int,
    spec: JobSpec,
    infos: list[RankInfo],
    run_dir: Path,
    threads: int,
    visible: str | None,
) -> None:
    from jeanzay_kit.node.worker import run_worker

    run_worker(spec, infos[index], run_dir, visible, threads)


def _send(context: mp.ProcessContext, signals: set[int]) -> None:
    for proc in context.processes:
        for signum in signals:
            if proc.is_alive() and proc.pid:
                os.kill(proc.pid, signum)


def describe_rank(index: int, pid: int, run_dir: Path, since: float) -> str:
    """`rank N (pid P on HOST) at step S (phase)`, the step from the rank's heartbeat of
    this attempt (`since`), or `before its first step` when it wrote none."""
    beats = read_beats(run_dir / HEARTBEAT_DIR)
    beat = next((b for b in beats if b.rank == index and b.wall_time >= since), None)
    step = f"at step {beat.step} ({beat.phase})" if beat is not None else "before its first step"
    return f"rank {index} (pid {pid} on {socket.gethostname()}) {step}"


def how_it_ended(err: mp.ProcessExitedException) -> str:
    return f"killed by {err.signal_name}" if err.signal_name else f"exit code {err.exit_code}"


def launch_local(
    spec: JobSpec,
    run_dir: Path,
    cpu_count: int = 1,
    visible_devices: str | None = None,
    stop: StopRequest | None = None,
) -> int:
    """Run the workers; after a hang or a crash, run them again from the newest complete
    checkpoint while preemption.max_restarts allows (node/restarts.py)."""
    while True:
        since = time.time()
        code = _launch_once(spec, run_dir, cpu_count, visible_devices, stop, since)
        if code not in (1, EXIT_HUNG) or (stop is not None and stop.signum):
            return code
        reason = "hang" if code == EXIT_HUNG else "crash"
        if not made_progress(read_beats(run_dir / HEARTBEAT_DIR), since):
            print(
                f"{report.TRAIN}: the run failed ({reason}) before completing any step of this "
                "attempt: not restarted, since it would fail the same way (no restart of "
                f"preemption.max_restarts={spec.preemption.max_restarts} spent). HINT: read "
                "the error above, fix its cause, then run the same command again: it "
                "resumes from the newest complete checkpoint",
                file=sys.stderr,
                flush=True,
            )
            return code
        done = len(read_restarts(run_dir))
        limit = spec.preemption.max_restarts
        if done >= limit:
            print(
                f"{report.TRAIN}: the run failed ({reason}) and has used its {limit} restart(s) "
                f"(preemption.max_restarts={limit}, history in {run_dir / RESTARTS_FILE}); "
                "giving up. HINT: read the error above (and any hang-<step>/ folder), fix "
                "the cause, then run the same command again: it resumes from the newest "
                f"complete checkpoint (delete {RESTARTS_FILE} to reset the budget)",
                file=sys.stderr,
                flush=True,
            )
            return code
        count = record_restart(run_dir, reason)
        print(
            f"{report.TRAIN}: restarting after a {reason} ({count}/{limit}), from the newest "
            "complete checkpoint",
            file=sys.stderr,
            flush=True,
        )


def _launch_once(
    spec: JobSpec,
    run_dir: Path,
    cpu_count: int,
    visible_devices: str | None,
    stop: StopRequest | None,
    since: float,
) -> int:
    world = spec.layout.world_size
    infos = local_rank_infos(world, free_port())
    # Share the cores: N CPU workers each with all cores would fight over them.
    threads = max(1, cpu_count // world)
    if world == 1:
        from jeanzay_kit.node.worker import run_worker

        run_worker(spec, infos[0], run_dir, visible_devices, threads, stop=stop)
        return 0
    # Workers start with these signals ignored (an ignored disposition survives exec), so
    # one arriving while a worker imports torch cannot kill it; each worker installs its
    # own handler first thing. Signals are re-sent until the workers are done, so one
    # that arrived too early is delivered once they listen.
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in FORWARDED}
    context = mp.start_processes(
        _worker,
        args=(spec, infos, run_dir, threads, visible_devices),
        nprocs=world,
        join=False,
        start_method="spawn",
    )
    # A signal noted before the workers existed is delivered to them too.
    pending: set[int] = {stop.signum} if stop is not None and stop.signum else set()

    def forward(signum: int, _frame: object) -> None:
        pending.add(signum)
        _send(context, pending)

    for sig in FORWARDED:
        signal.signal(sig, forward)
    try:
        while not context.join(timeout=0.5, grace_period=GRACE_S):
            _send(context, pending)
    except mp.ProcessRaisedException as err:
        # The rank printed its own traceback (worker.py): name it, do not repeat it.
        print(
            f"{report.TRAIN}: {describe_rank(err.error_index, err.error_pid, run_dir, since)} "
            "failed (its traceback is above); the others were stopped.",
            file=sys.stderr,
        )
        return 1
    except mp.ProcessExitedException as err:
        if err.exit_code == EXIT_PREEMPTED:
            return EXIT_PREEMPTED  # every worker saved; the checkpoint is sealed
        if err.exit_code == 2:
            return 2  # a refusal, already explained by rank 0
        if err.exit_code == EXIT_HUNG:
            return EXIT_HUNG  # the watchdog named the rank and dumped the stacks
        print(
            f"{report.TRAIN}: {describe_rank(err.error_index, err.error_pid, run_dir, since)} "
            f"ended: {how_it_ended(err)}; the others were stopped.",
            file=sys.stderr,
        )
        return 1
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0
