"""Freeze the project's code at submission: `<log_dir>/code/<hash>/`, content-addressed.

Edge (files, git). The files are the project's git-tracked and untracked-but-not-ignored
ones (project/git.py), or `job.snapshot_include`'s globs when the project is no git
repository. The folder is named by a hash of every path and content, so the points of a
sweep, and a resubmission of unchanged code, share one copy; it is written aside and
renamed into place, so a half-written snapshot is never used. The job exports
JZK_CODE_DIR=<snapshot> and every task imports the user's code from there
(project/import_path.py): an edit made while the job waits, or between a preemption and
the requeue, changes nothing. Anchors: submitit's RsyncSnapshot, lingua's copy_code.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from jeanzay_kit.errors import JzkError
from jeanzay_kit.project import git
from jeanzay_kit.project.provenance import PROVENANCE_DIR, write_submit_provenance

SNAPSHOTS = "code"
# Folders never copied from a project that is no git repository.
_SKIP_DIRS = {"outputs", "multirun", "logs", "__pycache__", "node_modules"}
# A snapshot is code, not data: past this, the project is refused with a hint.
MAX_BYTES = 200 * 1024 * 1024


@dataclass(frozen=True)
class Snapshot:
    path: Path  # <workdir>/<log_dir>/code/<hash>
    files: int
    bytes: int
    source: str  # "git" or "snapshot_include"


def snapshot_files(root: Path, include: Sequence[str], log_dir: str) -> tuple[list[str], str]:
    """The files to copy (relative to root), and how they were chosen."""
    if git.is_repository(root):
        return git.project_files(root), "git"
    skip = _SKIP_DIRS | {Path(log_dir).parts[0] if log_dir else "logs"}
    # A virtual environment in the project (venv/, env/: pyvenv.cfg marks one) is not
    # the project's code: its site-packages would fill the snapshot.
    skip |= {d.name for d in root.iterdir() if d.is_dir() and (d / "pyvenv.cfg").exists()}
    found: set[str] = set()
    for pattern in include:
        for path in root.glob(pattern):
            rel = path.relative_to(root)
            if path.is_file() and not any(
                part.startswith(".") or part in skip for part in rel.parts[:-1]
            ):
                found.add(rel.as_posix())
    return sorted(found), "snapshot_include"


def take_snapshot(root: Path, log_dir: str, include: Sequence[str]) -> Snapshot:
    """Copy the project's code under root/log_dir/code/<hash> (once per content)."""
    root = root.resolve()
    names, source = snapshot_files(root, include, log_dir)
    digest = hashlib.sha256()
    total = 0
    for name in names:
        data = (root / name).read_bytes()
        total += len(data)
        if total > MAX_BYTES:
            raise JzkError(
                f"job.snapshot: the project's files under {root} pass "
                f"{MAX_BYTES // 2**20} MiB ({name} and before): a snapshot is for code. "
                "HINT: git-ignore data and outputs (or narrow job.snapshot_include), or set "
                "job.snapshot=false to run the live tree"
            )
        digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    base = root / log_dir / SNAPSHOTS
    dest = base / digest.hexdigest()[:16]
    if not dest.is_dir():
        tmp = base / f".tmp-{dest.name}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        for name in names:
            target = tmp / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / name, target)
        tmp.mkdir(parents=True, exist_ok=True)  # an empty project still gets its folder
        write_submit_provenance(tmp / PROVENANCE_DIR, root, dest)
        try:
            os.replace(tmp, dest)
        except OSError:  # another submission made the same snapshot first
            shutil.rmtree(tmp, ignore_errors=True)
    return Snapshot(dest, len(names), total, source)
