"""The end of a stopped run, for every loop: requeue the job when Slurm's time-limit
warning asked for it, wait for Slurm after a SIGTERM, exit Exit.STOPPED ("run me
again"). The toolkit's loop (node/worker.py) and a session (runtime/session.py) end
alike."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from typing import Any, NoReturn

from jeanzay_kit import report
from jeanzay_kit.config.runtime_settings import RuntimeSettings
from jeanzay_kit.distributed.ranks import RankInfo
from jeanzay_kit.ending.codes import Exit


def after_stop(
    info: RankInfo,
    stopped_by: str,
    steps: int,
    *,
    requeue_signal: str = "USR1",
    requeue: bool = True,
    term_wait_seconds: float = 300.0,
    task_requeues: bool = False,
    runner=None,  # noqa: ANN001
    sleep=time.sleep,  # noqa: ANN001
) -> NoReturn:
    """Every rank, once step-`steps` is saved after `stopped_by` (SIGUSR1...): rank 0
    requeues the job when the time-limit signal asked for it, every rank waits for Slurm
    after a SIGTERM under srun, then exits Exit.STOPPED. The toolkit's loop and a
    session (runtime/session.py) end alike."""

    # The time-limit warning (preemption.signal, USR1 by default) asks for a requeue.
    # SIGTERM comes from scancel, or from a preemption Slurm requeues by itself.
    wants_requeue = (
        requeue
        and stopped_by == f"SIG{requeue_signal}"
        and requeue_signal != "TERM"
        and info.requeue_id is not None
    )
    # SIGTERM in a Slurm job: a preemption (or scancel) that Slurm itself finishes.
    waits_for_slurm = stopped_by == "SIGTERM" and info.launcher == "srun"
    if wants_requeue:
        ask_from_every_rank(info)
    if info.rank == 0:
        if wants_requeue:
            _requeue(info, steps, runner)
        elif not waits_for_slurm:
            # Under a script task in a job, the task requeues the job once this exits 3.
            then = (
                "the job's task requeues the job: it resumes from there"
                if task_requeues
                else "run the same command again to resume"
            )
            print(f"stopped by {stopped_by} after saving step-{steps}; {then}", flush=True)
    if waits_for_slurm:
        # Preemption sends SIGTERM, waits GraceTime, then kills and requeues the job. A job
        # that ends by itself first is marked FAILED and never requeued, so every task
        # stays until Slurm ends it (scancel ends it after KillWait the same way).
        if info.rank == 0:
            print(
                f"SIGTERM: step-{steps} is complete; waiting up to "
                f"{term_wait_seconds:g} s for Slurm to end the job (a preempted "
                "job is requeued and resumes from it)",
                flush=True,
            )
        sleep(term_wait_seconds)
    raise SystemExit(Exit.STOPPED)


def after_stop_as_set(
    settings: RuntimeSettings,
    info: RankInfo,
    env: Mapping[str, str],
    stopped_by: str,
    steps: int,
    *,
    runner=None,  # noqa: ANN001
    sleep=time.sleep,  # noqa: ANN001
) -> NoReturn:
    """after_stop as a run's settings say (preemption.requeue, .signal,
    .term_wait_seconds); a script task of the toolkit is requeued by its wrapper, not by
    the session inside it. runner, sleep: stand-ins in unit tests."""
    after_stop(
        info,
        stopped_by,
        steps,
        requeue_signal=settings.requeue_signal,
        requeue=settings.requeue and not under_script_task(env),
        term_wait_seconds=settings.term_wait_seconds,
        task_requeues=settings.requeue and under_script_task(env) and info.job_id is not None,
        runner=runner,
        sleep=sleep,
    )


def _requeue(info: RankInfo, steps: int, runner) -> None:  # noqa: ANN001
    """Rank 0: requeue the job (scontrol; in a container, ask the batch shell)."""
    from jeanzay_kit.errors import SlurmCommandError

    try:
        requeue_job(str(info.requeue_id), info.requeue_file, runner)
    except SlurmCommandError as err:
        report.error(
            report.TRAIN,
            f"could not requeue job {info.requeue_id}: {err}. The checkpoint "
            f"step-{steps} is complete: resubmit the job to resume.",
        )
        raise SystemExit(1) from err
    done = "requeued" if info.requeue_file is None else "asked the batch shell to requeue"
    print(f"{done} job {info.requeue_id}; it resumes from step-{steps}", flush=True)


def ask_from_every_rank(info: RankInfo) -> None:
    """In a container (info.requeue_file set) a rank other than 0 asks the batch shell
    for the requeue too: srun's --kill-on-bad-exit may end rank 0 before it writes, once
    another rank has exited. A failed write is rank 0's to report."""
    from jeanzay_kit.errors import SlurmCommandError

    if info.rank == 0 or info.requeue_file is None or info.requeue_id is None:
        return
    with contextlib.suppress(SlurmCommandError):
        requeue_job(str(info.requeue_id), info.requeue_file)


def requeue_job(job_id: str, request_file: str | None = None, runner: Any = None) -> None:
    """The one path to the next attempt, whatever kind of task asks it (the toolkit's
    loop, a session, a script task, a Hydra app, a tune trial, the health gate, the
    restart after a failed step): `scontrol requeue`, or inside a container the batch
    shell's request file (slurm/container.py). SlurmCommandError when it cannot."""
    from jeanzay_kit.slurm.commands import request_requeue

    request_requeue(job_id, request_file, runner)


def under_script_task(env: Mapping[str, str]) -> bool:
    """True when the toolkit started this process as a script task (`job.entry`): its
    wrapper turns exit 3 into a requeue, so the session must not requeue by itself."""
    return bool(env.get("JZK_RUN_DIR"))
