"""cluster=local: start the worker processes on this machine, as srun would on a node.

One process per visible GPU (NCCL), or `resources.gpus_per_node` CPU processes (gloo),
watched here: when one fails, the others are terminated (its traceback is shown by the
rank itself, node/worker.py), so a failure never leaves the rest blocked in a
collective. This process never imports torch. GPU workers are spawned and import it at
once, in parallel (about 0.7 s sooner to the first step than after it, bench/'s
ttfs_vs_bare); CPU workers are forked from a fork server that imported it once for all
of them (worker_context).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import socket
import sys
import time
from multiprocessing import forkserver, resource_tracker
from multiprocessing.connection import wait
from multiprocessing.context import ForkServerContext, SpawnContext
from multiprocessing.process import BaseProcess

from jeanzay_kit import report
from jeanzay_kit.config.spec import JobSpec
from jeanzay_kit.distributed.ranks import RankInfo
from jeanzay_kit.ending.codes import Exit, stop_signals
from jeanzay_kit.ending.endings import restart_local_attempt
from jeanzay_kit.ending.preemption import StopRequest
from jeanzay_kit.node.local_ranks import GRACE_S, free_port, local_rank_infos
from jeanzay_kit.rundir.run_directory import RunDir

# What every worker imports before its first step (torch's optimizers import
# torch._dynamo when the first one is built): the fork server of CPU workers imports
# them once, not once per worker.
WORKER_IMPORTS = ("torch", "torch._dynamo", "jeanzay_kit.train.loop", "jeanzay_kit.runtime.session")
FORWARDED = stop_signals()
# What a worker ends with when an exception escaped run_worker (which printed it, naming
# the rank): Python's own code for an uncaught exception.


def _worker(
    index: int,
    spec: JobSpec,
    infos: list[RankInfo],
    run_dir: RunDir,
    threads: int,
    visible: str | None,
    *,
    launched: float,
) -> None:
    from jeanzay_kit.node.worker import run_worker

    # Started with the stop signals blocked (_start): ignored until run_worker installs
    # its handler, so that one pending now or arriving meanwhile cannot kill the rank
    # (the launcher re-sends it until the rank is done).
    for sig in FORWARDED:
        signal.signal(sig, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)
    try:
        run_worker(
            spec,
            infos[index],
            run_dir,
            visible_devices=visible,
            threads=threads,
            launched_at=launched,
        )
    except SystemExit:
        raise  # its code is the answer (3: stopped after a save, 2: refused, 4: hung)
    except BaseException:
        # Already said by the rank (node/worker.py _leave): not a second traceback from
        # multiprocessing's own handler.
        sys.stderr.flush()
        os._exit(Exit.RAISED)


def worker_context(cpu_only: bool) -> ForkServerContext | SpawnContext:
    """How the workers start. CPU workers are forked from multiprocessing's fork server,
    which imports WORKER_IMPORTS once for the run: each spawned worker paid them itself
    (about 2.5 s of CPU each, half of it torch._dynamo, which torch's optimizers import
    when one is built), so 4 workers on 2 cores spent 5 s of start-up importing the same
    modules. GPU workers are spawned, each a fresh interpreter, as before: a worker that
    uses CUDA cannot be forked from a process that has asked the CUDA driver anything,
    and that none of these imports does could only be checked on a GPU machine, which
    this was not measured on; spawn costs them little (one worker per GPU, on a node
    with cores to spare, imports in parallel). `cpu_only`: cluster.device=cpu, or no
    NVIDIA driver on this machine (node/entry.py)."""
    # Linux only: on macOS, forking a process that has loaded torch's libraries (the
    # Objective-C runtime, Accelerate) is not safe, which is why Python spawns there.
    if cpu_only and sys.platform == "linux":
        context = multiprocessing.get_context("forkserver")
        # The server starts in _start, with the stop signals blocked: it and every
        # worker forked from it keep them waiting until the worker ignores them, then
        # installs its own handler (_worker, node/worker.py).
        context.set_forkserver_preload(list(WORKER_IMPORTS))
        return context
    return multiprocessing.get_context("spawn")


def _start(procs: list[BaseProcess], context: ForkServerContext | SpawnContext) -> None:
    """Start the workers with the stop signals blocked, a mask that survives fork and
    exec and that they keep until they ignore them (_worker). One arriving meanwhile is
    not lost: the launcher's handler (`forward`, installed before) takes it once the mask
    is restored (the lease's thread blocks every signal: rundir/lease.py); in a worker
    it waits, and signals are re-sent until the workers are done, so that
    one that came too early is delivered once they listen. (Ignoring them here instead,
    as this did, dropped a signal that came in the window: seen, a time-limit warning 1 s
    into a start under load never stopped the run.)"""
    # multiprocessing's resource tracker, started by the first start below, unblocks
    # SIGINT and SIGTERM in this thread after starting itself (Python 3.11,
    # resource_tracker.ensure_running): started first, it leaves our mask alone.
    resource_tracker.ensure_running()
    before = signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
    try:
        if isinstance(context, ForkServerContext):
            # The workers are forked by the server: it is the one to start with them
            # blocked.
            forkserver.ensure_running()
        else:
            for proc in procs:
                proc.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
    if isinstance(context, ForkServerContext):
        # The server imports WORKER_IMPORTS before it forks the first worker: seconds
        # in which this process's own handlers note a signal (StopRequest), not drop it.
        for proc in procs:
            proc.start()


def _send(procs: list[BaseProcess], signals: set[int]) -> None:
    for proc in procs:
        for signum in signals:
            if proc.is_alive() and proc.pid:
                # It may end between the check and the kill (seen: ProcessLookupError).
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signum)


def describe_rank(index: int, pid: int, run_dir: RunDir, since: float) -> str:
    """`rank N (pid P on HOST) at step S (phase)`, the step from the rank's heartbeat of
    this attempt (`since`), or `before its first step` when it wrote none."""
    beats = run_dir.beats()
    beat = next((b for b in beats if b.rank == index and b.wall_time >= since), None)
    step = f"at step {beat.step} ({beat.phase})" if beat is not None else "before its first step"
    return f"rank {index} (pid {pid} on {socket.gethostname()}) {step}"


def how_it_ended(code: int) -> str:
    """A worker's exit code as words: `killed by SIGKILL`, `exit code 7`."""
    if code < 0:
        return f"killed by {signal.Signals(-code).name}"
    return f"exit code {code}"


def _first_failure(procs: list[BaseProcess], pending: set[int]) -> int | None:
    """Wait for the workers; the index of the one that failed first (the others are
    then terminated), or None when all ended with 0. Signals in `pending` are re-sent to
    live workers at each look (one that arrived before a worker listened is delivered
    once it does)."""
    while True:
        _send(procs, pending)
        ended = [(i, p.exitcode) for i, p in enumerate(procs) if p.exitcode not in (None, 0)]
        if ended:
            _terminate(procs)
            return _cause(ended)
        running = [p.sentinel for p in procs if p.exitcode is None]
        if not running:
            return None
        wait(running, timeout=0.5)


def _cause(ended: list[tuple[int, int]]) -> int:
    """Of the workers seen ended at one look, the one that caused it: a rank whose peer
    was killed raises (Exit.RAISED) right after, often before the launcher looks, so a
    rank that ended otherwise (killed by a signal, an exit code of its own) comes first,
    then the lowest rank."""
    return min(ended, key=lambda e: (e[1] == Exit.RAISED, e[0]))[0]


def _terminate(procs: list[BaseProcess]) -> None:
    """SIGTERM, then SIGKILL after GRACE_S, as torch's launcher and srun do."""
    for proc in procs:
        if proc.is_alive():
            proc.terminate()
    deadline = time.monotonic() + GRACE_S
    for proc in procs:
        proc.join(max(0.0, deadline - time.monotonic()))
        if proc.is_alive():
            proc.kill()
            proc.join()


def launch_local(
    spec: JobSpec,
    run_dir: RunDir,
    cpu_count: int = 1,
    visible_devices: str | None = None,
    stop: StopRequest | None = None,
    cpu_only: bool = False,
) -> int:
    """Run the workers; after a hang or a crash, run them again from the newest complete
    checkpoint while preemption.max_restarts allows (ending/endings.py) and a restart can
    help (ending/endings.py: a failure that repeats ends the run at once). Every end of an
    attempt is classified into <run_dir>/endings.jsonl."""
    from jeanzay_kit.runtime.startup import process_start_time

    # The first attempt's start-up counts from this command's start (composing the
    # config, the fork server's imports), as a Slurm job's from the job's start.
    launched = process_start_time()
    while True:
        since = time.time()
        local_start_mark(run_dir)
        code, died = _launch_once(
            spec, run_dir, cpu_count, visible_devices, stop, since,
            cpu_only=cpu_only, launched=launched or since,
        )  # fmt: skip
        launched = None
        stopping = stop is not None and bool(stop.signum)
        limit = spec.preemption.max_restarts
        if not restart_local_attempt(run_dir, code, since, died, stopping=stopping, limit=limit):
            return code


def local_start_mark(run_dir: RunDir) -> None:
    """`jzk: start N of the run on HOST at TIME` in train.log, as a Slurm job's log has
    for each start of the job (slurm/sbatch.py START_MARK)."""
    from jeanzay_kit.runtime.rank_log import mark_start
    from jeanzay_kit.slurm.sbatch import START_MARK

    when = time.strftime("%Y-%m-%dT%H:%M:%S")
    mark_start(run_dir, f"{START_MARK}{{n}} of the run on {socket.gethostname()} at {when}")


def _launch_once(
    spec: JobSpec,
    run_dir: RunDir,
    cpu_count: int,
    visible_devices: str | None,
    stop: StopRequest | None,
    since: float,
    *,
    cpu_only: bool,
    launched: float,
) -> tuple[int, str | None]:
    """The attempt's exit code, and the signal its first failed worker died of (None:
    none), for the attempt's ending (ending/endings.py)."""
    world = spec.layout.world_size
    infos = local_rank_infos(world, free_port())
    # Share the cores: N CPU workers each with all cores would fight over them.
    threads = max(1, cpu_count // world)
    if world == 1:
        from jeanzay_kit.node.worker import run_worker

        run_worker(
            spec, infos[0], run_dir, visible_devices=visible_devices, threads=threads, stop=stop
        )
        return 0, None
    context = worker_context(cpu_only)
    procs: list[BaseProcess] = [
        context.Process(
            target=_worker,
            args=(index, spec, infos, run_dir, threads, visible_devices),
            kwargs={"launched": launched},
            name=f"jzk-rank-{index}",
        )
        for index in range(world)
    ]
    pending: set[int] = set()

    def forward(signum: int, _frame: object) -> None:
        pending.add(signum)
        _send(procs, pending)
        if stop is not None:
            stop.note(signum)  # a failed attempt after it is not restarted

    # Ours before the workers start: a signal arriving while they start is forwarded
    # once _start restores the mask, and one noted before (by `stop`, even between these
    # lines) is delivered to them too.
    previous = {sig: signal.signal(sig, forward) for sig in FORWARDED}
    if stop is not None and stop.signum:
        pending.add(stop.signum)
    try:
        _start(procs, context)
        failed = _first_failure(procs, pending)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if failed is None:
        return 0, None
    code = procs[failed].exitcode or 0
    died = signal.Signals(-code).name if code < 0 else None
    return _failure_code(failed, procs[failed], run_dir, since), died


def _failure_code(index: int, proc: BaseProcess, run_dir: RunDir, since: float) -> int:
    """What the run ends with when worker `index` ended first with a non-zero code, said
    in one line where the worker has not said it."""
    code, pid = proc.exitcode or 0, proc.pid or 0
    if code in (Exit.STOPPED, Exit.REFUSED, Exit.HUNG):
        # 3: every worker saved, the checkpoint is sealed; 2: a refusal rank 0 explained;
        # 4: the watchdog named the rank and dumped the stacks.
        return code
    rank = describe_rank(index, pid, run_dir, since)
    if code == Exit.RAISED:
        print(
            f"{report.TRAIN}: {rank} failed (its traceback is above); the others were stopped.",
            file=sys.stderr,
        )
    else:
        print(
            f"{report.TRAIN}: {rank} ended: {how_it_ended(code)}; the others were stopped.",
            file=sys.stderr,
        )
    return 1
