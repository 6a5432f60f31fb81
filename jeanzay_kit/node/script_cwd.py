"""A script's own working directory inside its run directory. Edge (makes folders and
symbolic links); which entries are linked is `shadow_entries`, pure.

A script that saves to a relative path (`torch.save(..., "snapshot.pt")`, `out/ckpt.pt`)
writes into its working directory. Run in the project folder, two experiments of the
same script would share that file and resume each other. So each script task runs in
`<run_dir>/cwd/` (SCRIPT_CWD), where every top-level entry of the project is a symbolic
link (the idea of Snakemake's "shadow" rules): relative reads (`data/`, a config file,
the script itself) find the project's files, relative writes of new files land in the
run's own folder. The project's own checkpoint-looking files (a `snapshot.pt` left by a
run outside the toolkit, a folder of them) are not linked, so no run resumes from them.
The project's root is also given as JZK_PROJECT_DIR. docs/run-directories.md.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from jeanzay_kit import run_layout as layout
from jeanzay_kit.node.script_watch_rules import CHECKPOINT_SUFFIXES

SCRIPT_CWD = layout.SCRIPT_CWD
# A folder is scanned this deep for checkpoints before it is linked (cheap on $WORK).
_SCAN_DEPTH = 2
_SCAN_LIMIT = 2000


def is_checkpoint_file(name: str) -> bool:
    """A file a script would resume from (weights, pickles), never code or configs."""
    return name.lower().endswith(CHECKPOINT_SUFFIXES)


def shadow_entries(
    names: Iterable[str], holds_checkpoints: Sequence[str], always: Sequence[str]
) -> list[str]:
    """Which top-level names of the project the script's folder links to: all but the
    checkpoint files and the folders that hold checkpoints (`holds_checkpoints`), except
    the toolkit's own folders (`always`: the log folder, the run directories' parent),
    which a script's arguments may name relatively."""
    keep = []
    for name in sorted(names):
        if name in always or not is_checkpoint_file(name) and name not in holds_checkpoints:
            keep.append(name)
    return keep


def _holds_checkpoints(folder: Path) -> bool:
    seen = 0
    for root, dirs, files in os.walk(folder):
        depth = len(Path(root).relative_to(folder).parts)
        if any(is_checkpoint_file(f) for f in files):
            return True
        seen += len(files) + len(dirs)
        if depth >= _SCAN_DEPTH or seen > _SCAN_LIMIT:
            dirs.clear()
    return False


def prepare_script_cwd(
    run_dir: Path, project: Path, code_dir: str | None, always: Sequence[str] = ()
) -> Path:
    """<run_dir>/cwd with the project's entries linked (the code snapshot's copy where
    there is one, `code_dir`); the script's own files there are left as they are."""
    cwd = run_dir / SCRIPT_CWD
    cwd.mkdir(parents=True, exist_ok=True)
    project = project.resolve()
    try:
        entries = {p.name: p for p in project.iterdir()}
    except OSError:
        return cwd
    # The run directory lives under the project (outputs/...): its top folder is linked
    # like the others (a symbolic link to a parent is harmless: nothing here walks it).
    folders = [n for n, p in entries.items() if p.is_dir() and not p.is_symlink()]
    holding = [n for n in folders if n not in always and _holds_checkpoints(entries[n])]
    code = Path(code_dir).resolve() if code_dir else None
    for name in shadow_entries(entries, holding, always):
        target = code / name if code is not None and (code / name).exists() else entries[name]
        _link(cwd / name, target)
    return cwd


def _link(path: Path, target: Path) -> None:
    """A symbolic link at `path` to `target`, replacing an older link (a requeue after
    the code moved) but never a file or folder the script made there."""
    if path.is_symlink():
        if os.readlink(path) == str(target):
            return
        tmp = path.with_name(f".{path.name}.{os.getpid()}.link")
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(target)
        os.replace(tmp, path)
    elif not path.exists():
        # Another task of the job may make it at the same moment.
        with contextlib.suppress(FileExistsError):
            path.symlink_to(target)


def toolkit_tops(project: Path, *paths: str) -> list[str]:
    """The top-level names under `project` of the toolkit's own folders (the run
    directory's parent, the log folder): always linked."""
    tops: list[str] = []
    for value in paths:
        path = Path(value)
        if not path.is_absolute():
            tops.extend(path.parts[:1])
            continue
        try:
            tops.append(path.resolve().relative_to(project.resolve()).parts[0])
        except (ValueError, IndexError):
            continue
    return tops
