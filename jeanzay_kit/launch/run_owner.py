"""Before `jzk submit` queues a job: does a live job (or a local run) already own its run
directory? Edge (reads the run directory, asks squeue).

The jobs considered are those `jzk submit` recorded in the run directory's manifest and
the one named by its lease (lease.py): a job submitted by hand with `sbatch
job.sbatch` shows up there once it runs. A job queued behind them with
`job.dependency=afterany:<id>` may be submitted; its start takes the lease over.
"""

from __future__ import annotations

import re

from jeanzay_kit.errors import JzkError
from jeanzay_kit.launch.manifest import read_manifest
from jeanzay_kit.rundir.lease import holder
from jeanzay_kit.rundir.lease_rules import busy_message
from jeanzay_kit.rundir.run_directory import RunDir
from jeanzay_kit.slurm.commands import CommandRunner, job_alive

# Resubmissions append to the manifest: the newest few are the ones that may still live.
_NEWEST = 5


def dependency_ids(dependency: str | None) -> set[str]:
    """The job ids a job.dependency waits for ('afterany:12:13,afterok:14' -> 12, 13, 14)."""
    return set(re.findall(r":(\d+(?:_\d+)?)", dependency or ""))


def check_no_live_owner(
    run_dir: RunDir, dependency: str | None, runner: CommandRunner | None = None
) -> None:
    """JzkError naming the live job (or local process) that owns run_dir, with the ways
    out, unless this job is queued behind it (job.dependency)."""
    import time

    record, held = holder(run_dir)
    if held and record is not None and not record.job_id:
        raise JzkError(busy_message(str(run_dir), record, time.time()))
    ids: list[str] = []
    manifest = run_dir.manifest
    if manifest.exists():
        ids = [str(r["job_id"]) for r in read_manifest(manifest)][-_NEWEST:]
    if record is not None and record.job_id:
        ids.append(record.job_id)
    waits_for = dependency_ids(dependency)
    for job_id in dict.fromkeys(ids):
        if job_id not in waits_for and job_alive(job_id, runner):
            raise JzkError(
                f"job.run_dir={run_dir} belongs to Slurm job {job_id}, which is still "
                "queued or running: a second job there would write the same checkpoints. "
                f"HINT: queue this one behind it with job.dependency=afterany:{job_id} "
                f"(it resumes where that one ends), or `scancel {job_id}` first, or give "
                "this run a directory of its own (job.run_dir=...)"
            )
