"""One training process of the toolkit's loop: start its run (rank 0 checks the
user's parts first), train, and end as every loop ends (runtime/run.py): requeue or exit
after a signal, result.json after a completed run, the failure said once.

node/entry.py calls `run_worker` in a task launched by srun or torchrun; node/local.py calls it
in each local worker process. It receives values (spec, RankInfo, run directory), never
reads the environment itself but to hand it to the run.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from jeanzay_kit.config.spec import JobSpec
from jeanzay_kit.distributed.ranks import RankInfo
from jeanzay_kit.ending.preemption import StopRequest
from jeanzay_kit.rundir.run_directory import RunDir
from jeanzay_kit.runtime import startup

if TYPE_CHECKING:
    from jeanzay_kit.train.parts import Parts


def run_worker(
    spec: JobSpec,
    info: RankInfo,
    run_dir: RunDir,
    *,
    visible_devices: str | None,
    threads: int,
    stop: StopRequest | None = None,
    allocation_end: float | None = None,
    launched_at: float | None = None,
    on_hang: Callable[[int], None] = os._exit,
) -> None:
    """One training process: join the group, train, leave the group. allocation_end:
    when the Slurm allocation ends (SLURM_JOB_END_TIME), else rank 0 asks squeue.
    launched_at: when the command that started this worker here started (node/local.py),
    where Slurm does not say when the job started. on_hang: what the watchdog ends a
    hung rank with (runtime/run.py Run.on_hang)."""
    clock = startup.begin(os.environ.get("SLURM_JOB_START_TIME") or launched_at)
    import torch  # after the clock: its import is in the start-up

    # First thing: from here on a signal is noted, not fatal, even during start-up.
    stop = stop or StopRequest()
    from jeanzay_kit.node import worker_start as at_start

    at_start.log_and_listen(run_dir, info, stop)
    from jeanzay_kit.runtime.run import Run
    from jeanzay_kit.train.loop import train

    clock.imported(run_dir, info.rank)
    if threads > 0:
        torch.set_num_threads(threads)
    # The runtime every loop uses (runtime/run.py; a user's loop meets it as a Session):
    # the device, the group and its mesh, heartbeats, the watchdog, metrics, the end.
    run = Run.from_spec(
        spec, info, run_dir, stop=stop, visible_devices=visible_devices, env=os.environ,
        ending=at_start.ending_of(spec),
    )  # fmt: skip
    run.on_hang = on_hang
    checked: list[Parts] = []  # rank 0's parts, tried by the check, which training uses
    try:
        run.start(
            lambda device: checked.extend(
                at_start.before_join(spec, info, run_dir, device, threads)
            )
        )
        clock.mark("rendezvous")
        if info.rank == 0 and allocation_end is None and info.job_id:
            allocation_end = at_start.allocation_end_of(info.job_id)
        result = train(spec, run, allocation_end, checked[0] if checked else None)
    except BaseException as caught:
        # Said before the launcher tears the others down (a spawn wrapper may hand a
        # traceback to the parent without printing it: seen with NCCL's init on an H100).
        run.fail(caught)
    if result.stopped_by:
        run.requeue_and_exit(result.steps)  # the last save is sealed: exit 3
    run.end(None)  # leave together; rank 0 writes result.json
    if info.rank == 0:
        at_start.say_done(run_dir, result, info.array_job_id or info.job_id)
