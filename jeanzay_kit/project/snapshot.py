"""Freeze the project's code at submission: `<log_dir>/code/<hash>/`, content-addressed.

Edge (files, git). The candidates are the project's git-tracked and untracked-but-not-
ignored files (project/git.py), or `job.snapshot_include`'s globs when the project is no
git repository; of them, only code is frozen (project/places.py): output places (the
script's, the toolkit's) are never copied, and data (large, numerous or not source
files) is reached in place, through the same links as in a local run. The folder is
named by a hash of every path and content, so the points of a sweep, and a resubmission
of unchanged code, share one copy; it is written aside and renamed into place, so a
half-written snapshot is never used. The job exports
JZK_CODE_DIR=<snapshot> and every task imports the user's code from there
(project/import_path.py): an edit made while the job waits, or between a preemption and
the requeue, changes nothing. Anchors: submitit's RsyncSnapshot, lingua's copy_code.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from jeanzay_kit.config.schema import (
    SCRIPT_OUTPUTS,
    SNAPSHOT_MAX_FILE_BYTES,
    SNAPSHOT_MAX_FOLDER_FILES,
)
from jeanzay_kit.errors import JzkError
from jeanzay_kit.project import git
from jeanzay_kit.project.places import (
    Limits,
    SnapshotPlan,
    command_paths,
    config_paths,
    output_place,
    plan_snapshot,
    resume_paths,
)
from jeanzay_kit.project.provenance import PROVENANCE_DIR, write_submit_provenance
from jeanzay_kit.rundir.run_directory import is_run_or_sweep

SNAPSHOTS = "code"
# A project received from a laptop (remote/code_archive.py) lists its code files here:
# its snapshots freeze exactly them, as chosen on the laptop.
RECEIVED = ".jzk-received.json"
# The toolkit's and Hydra's own output folders: never code, whatever .gitignore says.
OUTPUT_DIRS = ("outputs", "multirun")
# Folders never copied from a project that is no git repository.
_SKIP_DIRS = {*OUTPUT_DIRS, "logs", "__pycache__", "node_modules"}
# A snapshot is code, not data: past this (files and provenance together), the project
# is refused with a hint.
MAX_BYTES = 200 * 1024 * 1024
# The uncommitted diff recorded with a snapshot is cut past this, with a note.
MAX_DIFF_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class SnapshotRules:
    """What a submission freezes, from the job's config (project/job_code.py from_spec)."""

    log_dir: str
    include: Sequence[str]
    run_dir: str | None = None
    outputs: Sequence[str] = SCRIPT_OUTPUTS  # job.script_outputs
    args: Sequence[str] = ()  # job.args: their output options name output places
    resume_args: Sequence[str] = ()  # what a run resumes from is its own: an output place
    limits: Limits = Limits(SNAPSHOT_MAX_FILE_BYTES, SNAPSHOT_MAX_FOLDER_FILES)
    toolkit_dirs: Sequence[str] = ()  # more folders the toolkit writes (tune.dir)

    def named_places(self) -> list[str]:
        """The output places the command names: its output options' and job.resume_args'
        paths (job.script_outputs' globs aside)."""
        return [*command_paths(self.args)[0], *resume_paths(self.resume_args)]


@dataclass(frozen=True)
class Snapshot:
    path: Path  # <log_dir>/code/<hash> (under the project when log_dir is relative)
    files: int
    bytes: int  # files and provenance
    source: str  # "git" or "snapshot_include"
    plan: SnapshotPlan = field(default_factory=SnapshotPlan)

    def summary(self) -> str:
        """One line: what was frozen, what is reached in place, what never frozen."""
        return f"code: {self.plan.summary(str(self.path))}"


def excluded_folders(
    root: Path, log_dir: str, run_dir: str | None, more: Sequence[str] = ()
) -> list[str]:
    """The project's folders that hold what the toolkit writes, relative to root: the
    log folder (and the snapshots in it), the run directories' folder, Hydra's output
    folders, `more` (tune.dir). Relative or absolute paths, only those inside root count."""
    out = set(OUTPUT_DIRS)
    # The run directories' folder: outputs/ of outputs/jzk-1234, or the run directory
    # itself when it has no parent (job.run_dir=ckpt).
    run_folder = None
    if run_dir:
        parent = Path(run_dir).parent
        run_folder = str(parent) if parent.parts else run_dir
    for folder in (log_dir, run_folder, *more):
        if not folder or folder == ".":
            continue
        path = Path(folder) if Path(folder).is_absolute() else root / folder
        try:
            rel = path.resolve().relative_to(root)
        except ValueError:  # elsewhere ($SCRATCH): nothing of the project to leave out
            continue
        if rel.parts:
            out.add(rel.as_posix())
    return sorted(out)


def _inside(name: str, folders: Sequence[str]) -> bool:
    return any(name == f or name.startswith(f + "/") for f in folders)


# The second line of every script `jzk render` writes (slurm/sbatch.py header_lines).
_RENDERED_MARK = b"# Rendered by jeanzay_kit"


def toolkit_output(root: Path, name: str, run_dirs: dict[str, bool]) -> bool:
    """Whether `name` (relative to root) is something the toolkit wrote: a rendered
    sbatch script (in any `-o` folder), or a file inside a run directory. Such files
    change at every render or run: in a snapshot they would make each one new."""
    if name.endswith(".sbatch"):
        try:
            with (root / name).open("rb") as f:
                if _RENDERED_MARK in f.read(400):
                    return True
        except OSError:
            pass
    parts = name.split("/")[:-1]
    for depth in range(1, len(parts) + 1):
        folder = "/".join(parts[:depth])
        if folder not in run_dirs:
            # a run directory or a sweep's, wherever job.run_dir put it
            run_dirs[folder] = is_run_or_sweep(root / folder)
        if run_dirs[folder]:
            return True
    return False


def snapshot_files(
    root: Path, include: Sequence[str], log_dir: str, exclude: Sequence[str] = ()
) -> tuple[list[str], str]:
    """The files to copy (relative to root), and how they were chosen: never the
    toolkit's own outputs (excluded folders, rendered scripts, run directories)."""
    names, source = _candidate_files(root, include, log_dir, exclude)
    seen: dict[str, bool] = {}
    return [n for n in names if not toolkit_output(root, n, seen)], source


def _candidate_files(
    root: Path, include: Sequence[str], log_dir: str, exclude: Sequence[str]
) -> tuple[list[str], str]:
    exclude = [*exclude, *([log_dir] if log_dir and not Path(log_dir).is_absolute() else [])]
    received = _received_files(root)
    if received is not None:
        return [n for n in received if not _inside(n, exclude)], "laptop"
    if git.is_repository(root):
        return [n for n in git.project_files(root) if not _inside(n, exclude)], "git"
    skip = _SKIP_DIRS | {Path(log_dir).parts[0] if log_dir else "logs"}
    # A virtual environment in the project (venv/, env/: pyvenv.cfg marks one) is not
    # the project's code: its site-packages would fill the snapshot.
    skip |= {d.name for d in root.iterdir() if d.is_dir() and (d / "pyvenv.cfg").exists()}
    found: set[str] = set()
    for pattern in include:
        for path in root.glob(pattern):
            rel = path.relative_to(root)
            if (
                path.is_file()
                and not any(part.startswith(".") or part in skip for part in rel.parts[:-1])
                and not _inside(rel.as_posix(), exclude)
            ):
                found.add(rel.as_posix())
    return sorted(found), "snapshot_include"


def _received_files(root: Path) -> list[str] | None:
    import json

    try:
        files = json.loads((root / RECEIVED).read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return sorted(str(f) for f in files if (root / str(f)).is_file())


def _too_big(root: Path, what: str) -> JzkError:
    return JzkError(
        f"job.snapshot: the project's code under {root} passes {MAX_BYTES // 2**20} MiB "
        f"({what}): a snapshot is for code. HINT: lower job.snapshot_max_file_bytes (larger "
        "files are reached in place), git-ignore what is not code (or narrow "
        "job.snapshot_include), or set job.snapshot=false to run the live tree"
    )


def plan_of(root: Path, rules: SnapshotRules) -> tuple[SnapshotPlan, str]:
    """What a snapshot of `root` freezes and leaves (project/places.py), and how the
    candidates were chosen ("git" or "snapshot_include"), without copying anything."""
    exclude = excluded_folders(root, rules.log_dir, rules.run_dir, rules.toolkit_dirs)
    names, source = snapshot_files(root, rules.include, rules.log_dir, exclude)
    sized = []
    for name in names:
        try:
            sized.append((name, (root / name).stat().st_size))
        except OSError:  # gone since git listed it
            continue
    plan = plan_snapshot(
        sized,
        rules.outputs,
        rules.named_places(),
        config_paths(rules.args),
        rules.limits,
    )
    return plan, source


def count_snapshot(root: Path, rules: SnapshotRules) -> tuple[SnapshotPlan, str]:
    """What a snapshot of `root` would hold, and how it is chosen (`jzk validate`: inodes
    count on Jean Zay's $WORK), without copying anything."""
    return plan_of(root.resolve(), rules)


def take_snapshot(root: Path, rules: SnapshotRules) -> Snapshot:
    """Copy the project's code under <log_dir>/code/<hash> (once per content). The
    toolkit's own folders, output places and data (project/places.py) are never part of it."""
    root = root.resolve()
    plan, source = plan_of(root, rules)
    names = plan.frozen
    digest = hashlib.sha256()
    total = 0
    for name in names:
        data = (root / name).read_bytes()
        total += len(data)
        if total > MAX_BYTES:
            raise _too_big(root, f"{name} and before")
        digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    log_dir = rules.log_dir
    base = (Path(log_dir) if Path(log_dir).is_absolute() else root / log_dir) / SNAPSHOTS
    dest = base / digest.hexdigest()[:16]
    if dest.is_dir():  # this code was frozen already: every render of it shares the folder
        return Snapshot(dest, len(names), total + _size(dest / PROVENANCE_DIR), source, plan)
    tmp = base / f".tmp-{dest.name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        for name in names:
            target = tmp / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / name, target)
        tmp.mkdir(parents=True, exist_ok=True)  # an empty project still gets its folder
        _link_data(tmp, root, names, rules, excluded_folders(root, log_dir, rules.run_dir))
        write_submit_provenance(
            tmp / PROVENANCE_DIR, root, dest, frozen=set(names), max_diff=MAX_DIFF_BYTES
        )
        total += _size(tmp / PROVENANCE_DIR)
        if total > MAX_BYTES:
            raise _too_big(root, "with its provenance record")
        try:
            os.replace(tmp, dest)
        except OSError:  # another submission made the same snapshot first
            shutil.rmtree(tmp, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return Snapshot(dest, len(names), total, source, plan)


def _link_data(tmp: Path, root: Path, names: Sequence[str], rules: SnapshotRules,
               excluded: Sequence[str]) -> None:  # fmt: skip
    """Beside the frozen code, a link to each project entry it does not hold in the
    folders it holds code of (not output places, not the toolkit's folders): a package
    that reads a file next to its module (`Path(__file__).parent / "vocab.bpe"`, a
    compiled extension) finds it from the snapshot too, in place. A data folder with no
    code in it is one link, whatever it holds."""
    outputs = rules.named_places()
    folders = {""} | {"/".join(n.split("/")[:i]) for n in names for i in range(1, n.count("/") + 1)}
    for folder in sorted(folders):
        try:
            entries = sorted((root / folder).iterdir()) if folder else sorted(root.iterdir())
        except OSError:
            continue
        for entry in entries:
            rel = f"{folder}/{entry.name}" if folder else entry.name
            target = tmp / rel
            if target.exists() or target.is_symlink() or rel in folders or entry.name == ".git":
                continue
            is_dir = entry.is_dir()
            if _inside(rel, excluded) or output_place(rel, rules.outputs, outputs, is_dir):
                continue
            # A folder holding the toolkit's (the log folder, the snapshots themselves) or
            # an output place below: never linked whole.
            if any(_inside(place, [rel]) for place in [*excluded, *outputs]):
                continue
            if is_dir and is_run_or_sweep(entry):
                continue
            target.symlink_to(entry)


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())
