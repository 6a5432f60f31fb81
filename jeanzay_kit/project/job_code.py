"""The project's code frozen for a job (job.snapshot), for every way a job is written:
`jzk render`/`jzk submit` (cli/common.py) and a step inside an allocation
(node/allocation.py)."""

from __future__ import annotations

import sys
from pathlib import Path

from jeanzay_kit.config.spec import JobSpec
from jeanzay_kit.errors import JzkError
from jeanzay_kit.project.snapshot import take_snapshot


def snapshot_code(spec: JobSpec, workdir: Path) -> str | None:
    """Freeze the project's code for the job (job.snapshot): its path relative to the
    job's working directory, or None (switched off, or a workdir on another machine)."""
    if not spec.job.snapshot_for(spec.cluster.is_slurm) or not workdir.is_dir():
        return None
    try:
        snap = take_snapshot(
            workdir, spec.job.log_dir, spec.job.snapshot_include, spec.checkpoint.run_dir
        )
    except OSError as err:
        raise unwritable_log_dir(spec, err) from err
    print(
        f"code: {snap.files} file(s) of {workdir} ({snap.source}, {snap.bytes / 2**20:.1f} "
        f"MiB) frozen in {snap.path}",
        file=sys.stderr,
    )
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
