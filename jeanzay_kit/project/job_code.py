"""The project's code frozen for a job (job.snapshot), for every way a job is written:
`jzk render`/`jzk submit` (cli/common.py) and a step inside an allocation
(node/allocation.py)."""

from __future__ import annotations

import sys
from pathlib import Path

from jeanzay_kit.config.spec import JobSpec
from jeanzay_kit.errors import JzkError
from jeanzay_kit.project.places import Limits, SnapshotPlan
from jeanzay_kit.project.snapshot import SnapshotRules, count_snapshot, take_snapshot


def snapshot_rules(spec: JobSpec) -> SnapshotRules:
    """What a submission of this job freezes (project/places.py), from its config."""
    job = spec.job
    return SnapshotRules(
        log_dir=job.log_dir,
        include=tuple(job.snapshot_include),
        run_dir=spec.checkpoint.run_dir,
        outputs=tuple(job.script_outputs),
        args=tuple(job.args) if job.runs_script else (),
        resume_args=tuple(job.resume_args) if job.runs_script else (),
        limits=Limits(job.snapshot_max_file_bytes, job.snapshot_max_folder_files),
        toolkit_dirs=(spec.tune.dir,) if spec.tune.dir else (),
    )


def snapshot_plan(spec: JobSpec, workdir: Path) -> tuple[SnapshotPlan, str] | None:
    """What a submission would freeze of the project and how it was chosen, counted
    without copying; None for a job run without a snapshot."""
    if not spec.job.snapshot_for(spec.cluster.is_slurm) or not workdir.is_dir():
        return None
    return count_snapshot(workdir, snapshot_rules(spec))


def snapshot_footprint(spec: JobSpec, workdir: Path) -> tuple[int, int]:
    """The files and bytes of snapshot_plan: the storage check's share of the code. At
    most: code frozen already is shared, not written again."""
    planned = snapshot_plan(spec, workdir)
    if planned is None:
        return 0, 0
    return planned[0].frozen_part.files, planned[0].frozen_part.bytes


def snapshot_code(spec: JobSpec, workdir: Path) -> str | None:
    """Freeze the project's code for the job (job.snapshot): its path relative to the
    job's working directory, or None (switched off, or a workdir on another machine)."""
    if not spec.job.snapshot_for(spec.cluster.is_slurm) or not workdir.is_dir():
        return None
    try:
        snap = take_snapshot(workdir, snapshot_rules(spec))
    except OSError as err:
        raise unwritable_log_dir(spec, err) from err
    print(snap.summary(), file=sys.stderr)
    # Relative to the job's working directory when inside it (the project can move),
    # else absolute (job.log_dir on $SCRATCH).
    try:
        return str(snap.path.relative_to(workdir.resolve()))
    except ValueError:
        return str(snap.path)


def unwritable_log_dir(spec: JobSpec, err: OSError) -> JzkError:
    return JzkError(
        f"job.log_dir={spec.job.log_dir} cannot be written here ({err.strerror or err}: "
        f"{err.filename}): it holds the job's logs and the snapshot of its code. HINT: set "
        "job.log_dir to a folder you can write, relative to the project or absolute (on "
        "Jean Zay: under $WORK or $SCRATCH)"
    )
