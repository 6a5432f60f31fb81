"""One training process: join the process group, train, leave it, and after a signal,
requeue (rank 0) and exit.

node/entry.py calls `run_worker` in a task launched by srun or torchrun; node/local.py calls it
in each local worker process. It receives values (spec, RankInfo, run directory), never
reads the environment itself.
"""

from __future__ import annotations

import os
import socket
import sys
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from jeanzay_kit import report
from jeanzay_kit.config.spec import JobSpec
from jeanzay_kit.distributed.ranks import RankInfo
from jeanzay_kit.errors import JzkError, PeerFailed
from jeanzay_kit.runtime.preemption import StopRequest

if TYPE_CHECKING:
    import torch

    from jeanzay_kit.train.parts import Parts


def run_worker(
    spec: JobSpec,
    info: RankInfo,
    run_dir: Path,
    *,
    visible_devices: str | None,
    threads: int,
    stop: StopRequest | None = None,
    allocation_end: float | None = None,
) -> None:
    """One training process: join the group, train, leave the group.

    allocation_end: when the Slurm allocation ends (SLURM_JOB_END_TIME where Slurm sets
    it); rank 0 asks squeue once when it is unknown."""
    import torch

    # First thing: from here on a signal is noted, not fatal, even during start-up.
    stop = stop or StopRequest()
    from jeanzay_kit.runtime import rank_log

    rank_log.install(run_dir, info.rank)  # whole lines, labelled, in <run_dir>/train.log
    if info.requeue_id is not None:  # a Slurm job: its batch shell may note a signal
        from jeanzay_kit.distributed.script_env import STOP_NOTE_FILE

        stop.watch_note(run_dir / STOP_NOTE_FILE)

    from jeanzay_kit.runtime.session import Session
    from jeanzay_kit.train.loop import train

    if threads > 0:
        torch.set_num_threads(threads)
    # The runtime every loop uses (runtime/session.py): the device, the group with the
    # job's device mesh, heartbeats and the watchdog, and leaving the group at the end.
    session = Session.from_spec(
        spec, info, run_dir, stop=stop, visible_devices=visible_devices, env=os.environ
    )
    # Start-up failures are said like any other: a spawn wrapper may hand an escaping
    # traceback to the parent without printing it (seen on an H100 under torch's, where
    # NCCL's init failed in rank 1 and nothing was shown).
    checked: list[Parts] = []  # rank 0's parts, tried by the check, which training uses
    try:
        session.start(
            before_join=lambda device: checked.extend(
                _before_join(spec, info, run_dir, device, threads)
            )
        )
    except BaseException as caught:
        _leave(caught, spec, info)
    assert session.ctx is not None  # from_spec: the group has the job's mesh
    failed = True  # until train() returns
    try:
        if info.rank == 0 and allocation_end is None and info.job_id:
            allocation_end = _allocation_end(info.job_id)
        result = train(spec, session, allocation_end, checked[0] if checked else None)
        failed = False
    except BaseException as caught:
        _leave(caught, spec, info)
    finally:
        session.close(failed=failed)  # after a success the ranks leave the group together
    _finish(spec, info, run_dir, result, stop)


def _finish(spec: JobSpec, info: RankInfo, run_dir: Path, result: Any, stop: StopRequest) -> None:
    """After the group is left: requeue and exit after a signal, else say it is done."""
    # From here a late signal must not kill the finished task (seen on the local cluster: a
    # time-limit SIGUSR1 during exit turned a finished array task FAILED; in CI, the local
    # launcher's re-sent SIGUSR1 killed workers exiting after their save).
    stop.ignore_from_now()
    if result.stopped_by:
        stop_after_signal(spec, info, result)
    if info.rank == 0:
        from jeanzay_kit.node.restarts import clear_restarts

        clear_restarts(run_dir)  # the run finished: its restart budget starts afresh
        _write_result(spec, run_dir)
        loss = f"{result.final_loss:.4f}" if result.final_loss is not None else "n/a"
        print(
            f"done: {result.steps} steps, final loss {loss}, model digest {result.digest}, "
            f"run dir {run_dir}",
            flush=True,
        )


def _write_result(spec: JobSpec, run_dir: Path) -> None:
    """<run_dir>/result.json: what a search reads, as every loop writes it."""
    from jeanzay_kit.runtime.run_result import write_end_result
    from jeanzay_kit.train.components import objective_directions

    write_end_result(run_dir, spec.tune.objectives, objective_directions(spec))


def _before_join(
    spec: JobSpec, info: RankInfo, run_dir: Path, device: torch.device, threads: int
) -> list[Parts]:
    """Before the process group: this task's line, the start-of-run check (rank 0: the
    parts it tried), the flight recorder."""
    # One line per task: where it sits in the job (the Slurm tests read it back). One
    # write: with PYTHONUNBUFFERED print() writes the text and its newline apart, and the
    # lines of the processes sharing a task's output interleave ("...host n2jzk: rank 3").
    sys.stdout.write(
        f"jzk: rank {info.rank}/{info.world_size} local_rank {info.local_rank}/"
        f"{info.local_world_size} node {info.node_rank}/{info.num_nodes} master "
        f"{info.master_addr}:{info.master_port} launcher {info.launcher} "
        f"host {socket.gethostname()}\n"
    )
    sys.stdout.flush()
    checked = [_check_contracts_once(spec, device, threads)] if info.rank == 0 else []
    if spec.watchdog.stall_seconds > 0:
        from jeanzay_kit.runtime.heartbeat import enable_flight_recorder

        # Read when the process group starts: the watchdog dumps it next to the stacks.
        enable_flight_recorder(run_dir, os.environ)
    return checked


def _leave(caught: BaseException, spec: JobSpec, info: RankInfo) -> NoReturn:
    """Say why this rank stops, once, and leave the group without waiting for peers that
    may be stuck in a collective."""
    from jeanzay_kit.distributed.process_group import shutdown

    if isinstance(caught, (SystemExit, KeyboardInterrupt)):
        raise caught  # already said (a refused check exits 2), or the user's own ^C
    # A loader worker's death reaches this rank from next() or from torch's SIGCHLD
    # handler, anywhere in a step: it is named as the loader's (train/loader.py).
    err = _as_loader_death(caught, spec)
    if isinstance(err, JzkError) and not isinstance(err, PeerFailed):
        # A refusal every rank meets alike (e.g. a changed config): rank 0 says it once,
        # exit 2. A failure of one rank's own (rank_local) is said by that rank.
        if info.rank == 0 or err.rank_local:
            prefix = f"rank {info.rank}: " if err.rank_local else ""
            report.error(report.TRAIN, f"{prefix}{err}")
        shutdown(clean=False)
        raise SystemExit(err.exit_code) from None
    # Show which rank failed before the launcher tears the others down.
    _report_failure(err, info)
    shutdown(clean=False)
    raise caught


def _report_failure(err: BaseException, info: RankInfo) -> None:
    """Show which rank failed before the launcher tears the others down. A rank that only
    lost its peer says so in one line: the launcher names the rank that died."""
    if is_peer_failure(err):
        first = str(err).strip().splitlines()[0][:300] if str(err).strip() else ""
        print(f"rank {info.rank} stopped: a peer left the job ({first})", file=sys.stderr)
    else:
        print(f"rank {info.rank} failed:\n{traceback.format_exc()}", file=sys.stderr, flush=True)


def _as_loader_death(err: BaseException, spec: JobSpec) -> BaseException:
    from jeanzay_kit.errors import is_loader_death
    from jeanzay_kit.train.loader import describe_loader, loader_death

    if not is_loader_death(err):
        return err
    return loader_death(err, describe_loader(spec, spec.loader.num_workers))


def _check_contracts_once(spec: JobSpec, device, threads: int) -> Parts:  # noqa: ANN001
    """The dataset, model and loss tried on one micro-batch, on rank 0 before any
    collective (train/check.py): a contract break is one line and exit 2, not a traceback
    per rank, and never retried. Returns them, as built, for training."""
    from jeanzay_kit.train.check import check_and_keep
    from jeanzay_kit.train.components import resolve_precision

    precision = resolve_precision(spec.train.precision, device)
    cpus = threads if threads > 0 else spec.omp_num_threads
    try:
        found, parts = check_and_keep(spec, device, precision, cpus)
    except JzkError as err:
        report.error(report.TRAIN, err)
        raise SystemExit(err.exit_code) from None
    print(found.summary(), flush=True)
    return parts
    if device.type == "cuda":
        import torch

        torch.cuda.empty_cache()  # the check's model copy is gone; give its memory back


# What a collective raises on a rank whose peer died (gloo, NCCL, the TCP store): the
# follow-on of another rank's failure, not a failure of its own.
_PEER_GONE = (
    "Connection closed by peer",
    "Connection reset by peer",
    "remote worker crashing",
    "Broken pipe",
    "NCCL communicator was aborted",
    "Socket Timeout",
)


def is_peer_failure(err: BaseException) -> bool:
    if isinstance(err, PeerFailed):
        return True
    text = f"{type(err).__name__}: {err}"
    return any(marker in text for marker in _PEER_GONE)


def _allocation_end(job_id: str) -> float | None:
    from jeanzay_kit.errors import SlurmCommandError
    from jeanzay_kit.slurm.commands import job_end_time

    try:
        return job_end_time(job_id)
    except (SlurmCommandError, OSError):
        return None  # progress lines then show no time left; training goes on


def stop_after_signal(spec: JobSpec, info: RankInfo, result, runner=None, sleep=time.sleep) -> None:
    """After the checkpoint of a signalled run is sealed: requeue (rank 0) and exit.

    runner: the Slurm command runner, sleep: time.sleep (stand-ins in unit tests)."""
    from jeanzay_kit.runtime.requeue import after_stop

    after_stop(
        info,
        result.stopped_by,
        result.steps,
        requeue_signal=spec.preemption.signal,
        requeue=spec.preemption.requeue,
        term_wait_seconds=spec.preemption.term_wait_seconds,
        runner=runner,
        sleep=sleep,
    )
