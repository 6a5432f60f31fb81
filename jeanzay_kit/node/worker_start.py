"""What a training process of the toolkit's loop does around its session's start
(node/worker.py): its line, rank 0's start-of-run check before any collective, the flight
recorder, the allocation's end, and how a failure is named."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from jeanzay_kit import report
from jeanzay_kit.config.spec import JobSpec
from jeanzay_kit.distributed.ranks import RankInfo
from jeanzay_kit.ending.preemption import StopRequest
from jeanzay_kit.errors import JzkError
from jeanzay_kit.rundir.run_directory import RunDir
from jeanzay_kit.runtime.run import Ending

if TYPE_CHECKING:
    import torch

    from jeanzay_kit.train.loop import TrainResult
    from jeanzay_kit.train.parts import Parts


def log_and_listen(run_dir: RunDir, info: RankInfo, stop: StopRequest) -> None:
    """This rank's whole lines, labelled, in <run_dir>/train.log; in a Slurm job, the
    note of a signal its batch shell alone received (ending/signal_rules.py)."""
    from jeanzay_kit.runtime import rank_log

    rank_log.install(run_dir, info.rank)
    if info.requeue_id is not None:
        stop.watch_note(run_dir.stop_note)


def before_join(
    spec: JobSpec, info: RankInfo, run_dir: RunDir, device: torch.device, threads: int
) -> list[Parts]:
    """Before the process group: this task's line, the start-of-run check (rank 0: the
    parts it tried, which its training uses), the flight recorder."""
    import socket

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
    from jeanzay_kit.runtime.startup import clock

    clock().mark("check")  # the start-up's part (runtime/startup.py)
    return checked


def _check_contracts_once(spec: JobSpec, device: torch.device, threads: int) -> Parts:
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


def allocation_end_of(job_id: str) -> float | None:
    """When the job's allocation ends, from squeue (Slurm older than 23.02 does not set
    SLURM_JOB_END_TIME); None when unknown: progress lines show no time left."""
    from jeanzay_kit.errors import SlurmCommandError
    from jeanzay_kit.runtime.startup import clock
    from jeanzay_kit.slurm.commands import job_end_time

    try:
        return job_end_time(job_id)
    except (SlurmCommandError, OSError):
        return None  # training goes on
    finally:
        clock().mark("squeue")  # the start-up's part (runtime/startup.py)


def ending_of(spec: JobSpec) -> Ending:
    """How a run of the toolkit's loop ends (runtime/run.py): its result's objectives and
    directions (auto resolved with the metrics' own higher_is_better), its errors said
    as `jzk train`'s, a dead loader worker named as such."""
    from jeanzay_kit.train.directions import objective_directions

    return Ending(
        spec.tune.objectives,
        objective_directions(spec),
        said_as=report.TRAIN,
        explain=_failure_explainer(spec),
    )


def _failure_explainer(spec: JobSpec) -> Callable[[BaseException], BaseException]:
    """How the run names a failure: a loader worker's death, which reaches a rank from
    next() or from torch's SIGCHLD handler anywhere in a step, as the loader's
    (train/loader.py)."""

    def explain(err: BaseException) -> BaseException:
        from jeanzay_kit.errors import is_loader_death
        from jeanzay_kit.train.loader import describe_loader, loader_death

        if not is_loader_death(err):
            return err
        return loader_death(err, describe_loader(spec, spec.loader.num_workers))

    return explain


def say_done(run_dir: RunDir, result: TrainResult, job_id: str | None = None) -> None:
    """Rank 0, after a completed run: its end recorded (ending/endings.py
    record_completed), and the last line. job_id: the manifest's form ("123", an array
    task's "123_4")."""
    from jeanzay_kit.ending.endings import record_completed

    record_completed(run_dir, f"{result.steps} steps", step=result.steps, job_id=job_id)
    loss = f"{result.final_loss:.4f}" if result.final_loss is not None else "n/a"
    print(
        f"done: {result.steps} steps, final loss {loss}, model digest {result.digest}, "
        f"run dir {run_dir}",
        flush=True,
    )
