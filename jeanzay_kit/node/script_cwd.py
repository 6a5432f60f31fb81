"""A script's own working directory inside its run directory. Edge (lists the project's
folders, makes folders and symbolic links); what is shown is node/script_cwd_rules.py.

A script that saves to a relative path (`torch.save(..., "snapshot.pt")`, `out/ckpt.pt`)
writes into its working directory. Run in the project folder, two experiments of the
same script would share that file and resume each other. So each script task runs in
`<run_dir>/cwd/` (SCRIPT_CWD), which shows the project through symbolic links (the idea
of Snakemake's "shadow" rules) but for its output places, which are the run's own. The
project's root is also given as JZK_PROJECT_DIR. docs/run-directories.md.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from jeanzay_kit.node.script_cwd_rules import Shadow, shadow_plan
from jeanzay_kit.project.places import command_paths, resume_paths
from jeanzay_kit.rundir.run_directory import RunDir


def _lister(project: Path, copies_only: bool = False) -> Callable[[str], dict[str, bool]]:
    """The project's folders, listed on demand: only the way to an output place is.
    copies_only: a snapshot's, without its links to the project's data (shown from the
    project directly, never walked)."""

    def children(rel: str) -> dict[str, bool]:
        folder = project / rel if rel else project
        try:
            return {
                p.name: p.is_dir() for p in folder.iterdir() if not (copies_only and p.is_symlink())
            }
        except OSError:  # not a folder, gone, unreadable: nothing to show below
            return {}

    return children


def output_places(
    project: Path, patterns: Sequence[str], args: Sequence[str], resume_args: Sequence[str] = ()
) -> list[str]:
    """The project-relative output places: job.script_outputs' globs as they match in the
    project now (a trailing "/" matches folders only), the paths the command's output
    options name and those job.resume_args name (project/places.py)."""
    found: list[str] = []
    for pattern in patterns:
        folders_only = pattern.endswith("/")  # `out*/`: folders, not an outline.txt
        with contextlib.suppress(ValueError, OSError):  # a pattern glob cannot take
            found += [
                p.relative_to(project).as_posix()
                for p in project.glob(pattern.rstrip("/"))
                if p.is_dir() or not folders_only
            ]
    return found + command_paths(args)[0] + resume_paths(resume_args)


def prepare_script_cwd(
    run_dir: RunDir,
    project: Path,
    code_dir: str | None,
    *,
    always: Sequence[str] = (),
    outputs: Sequence[str] = (),
    args: Sequence[str] = (),
    resume_args: Sequence[str] = (),
) -> tuple[Path, Shadow]:
    """<run_dir>/cwd showing the project (its code from the snapshot's copy where there is
    one, `code_dir`: node/script_cwd_rules.py shadow_plan) but for its output places
    (`outputs`: job.script_outputs; `args`: the command's arguments; `resume_args`:
    job.resume_args); the script's own files there are left as they are. Returns the
    folder and its plan (what it hides, for the start line)."""
    cwd = run_dir.script_cwd
    cwd.mkdir(parents=True, exist_ok=True)
    project = project.resolve()
    # The run directory lives under the project (outputs/...): its top folder is linked
    # like the toolkit's others (a link to a parent is harmless: nothing here walks it).
    code = Path(code_dir).resolve() if code_dir else None
    plan = shadow_plan(
        _lister(project),
        output_places(project, outputs, args, resume_args),
        command_paths(args)[1],
        always,
        _lister(code, copies_only=True) if code is not None else None,
    )
    for rel in plan.mirrored + plan.own:
        _folder(cwd / rel)
    for base, names in ((project, plan.links), (code, plan.code_links)):
        for rel in names:
            assert base is not None  # code_links only with a snapshot
            (cwd / rel).parent.mkdir(parents=True, exist_ok=True)
            _link(cwd / rel, base / rel)
    return cwd, plan


def _folder(path: Path) -> None:
    """A real folder at `path`: a link left there by an earlier rule (the whole folder
    was linked) is replaced; the script's own folder is kept as it is."""
    if path.is_symlink():
        path.unlink(missing_ok=True)
    with contextlib.suppress(FileExistsError):  # another task of the job made it
        path.mkdir(parents=True, exist_ok=True)


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


def start_line(cwd: Path, plan: Shadow) -> str | None:
    """What the script does not see of the project, in one line (None: it sees all)."""
    if not plan.hidden:
        return None
    return (
        f"jzk: the script runs in {cwd}, which shows the project but for its output "
        f"places, the run's own: {plan.summary()} (job.script_outputs and the command's "
        "output options). HINT: to read one of them, name it in job.args or read "
        "$JZK_PROJECT_DIR/<path>; job.script_outputs='[]' shows every file"
    )


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
