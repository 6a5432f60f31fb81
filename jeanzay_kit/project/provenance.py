"""What code a run ran: `<run_dir>/provenance/`. Edge (files, git, package metadata).

- `source.json`: the git commit and branch, whether the tree had uncommitted changes,
  the untracked files, the snapshot folder the job imported from, the toolkit's and
  Python's versions, when and where it was recorded;
- `uncommitted.diff`: every change the commit does not hold, untracked files included,
  so `git apply` on a checkout of the commit gives the code that ran (never silently
  dropped: an archive of the commit alone would lose it);
- `packages.txt`: the environment's packages in `pip freeze`'s `name==version` form
  (read from the installed distributions' metadata: no pip process per run).

A submission records it inside the snapshot (`<snapshot>/.jzk-provenance/`) at the moment
the code is frozen; every run start copies it into its run directory (or, for a run of
the live tree such as cluster=local, records the tree as it is then). `history.jsonl`
keeps one line per start, so a run resumed with other code says so.
"""

from __future__ import annotations

import json
import platform
import shutil
import socket
import sys
import time
from collections.abc import Callable, Collection, Mapping
from importlib import metadata
from pathlib import Path

from jeanzay_kit.config.schema import SCRIPT_OUTPUTS, SNAPSHOT_MAX_FILE_BYTES
from jeanzay_kit.distributed.ranks import array_id
from jeanzay_kit.durable_io import write_durably
from jeanzay_kit.project import git
from jeanzay_kit.project.places import is_code_name, output_place
from jeanzay_kit.rundir.run_directory import RunDir
from jeanzay_kit.slurm.offline_env import CACHE_FOLDERS, OFFLINE_SWITCHES
from jeanzay_kit.version import __version__

PROVENANCE_DIR = ".jzk-provenance"  # inside a snapshot
FILES = ("source.json", "uncommitted.diff", "packages.txt")


def packages_freeze() -> str:
    lines = {
        f"{dist.metadata['Name']}=={dist.version}"
        for dist in metadata.distributions()
        if dist.metadata["Name"]
    }
    return "\n".join(sorted(lines, key=str.lower)) + "\n"


def code_changes(root: Path, frozen: Collection[str] | None = None) -> Callable[[str], bool]:
    """Which changed files the diff records: code, never outputs or data. With a
    snapshot, the files it froze; else (a run of the live tree) a source or
    configuration file outside the default output places, no larger than the default
    limit (project/places.py). A deleted file counts when its name is code's."""

    def keep(name: str) -> bool:
        path = root / name
        if not path.is_file():
            return is_code_name(name)
        if frozen is not None:
            return name in frozen
        return (
            is_code_name(name)
            and output_place(name, SCRIPT_OUTPUTS) is None
            and path.stat().st_size <= SNAPSHOT_MAX_FILE_BYTES
        )

    return keep


def write_submit_provenance(
    folder: Path,
    root: Path,
    code_dir: Path | None,
    frozen: Collection[str] | None = None,
    max_diff: int | None = None,
) -> None:
    """Record the project at root as it is now into folder (the three FILES).
    frozen: the files a snapshot froze, the only ones whose changes are recorded (None:
    the live tree's code, code_changes); max_diff: the diff is cut past this many bytes,
    with a note."""
    folder.mkdir(parents=True, exist_ok=True)
    repo = git.is_repository(root)
    keep = code_changes(root, frozen)
    diff = git.uncommitted_diff(root, keep) if repo else b""
    cut = max_diff is not None and len(diff) > max_diff
    if cut:
        note = (
            f"\n# jeanzay_kit: the diff was cut at {max_diff} of {len(diff)} bytes: the "
            "uncommitted changes are too big to record whole (data or outputs not "
            "git-ignored?). The snapshot folder itself holds the files that ran.\n"
        )
        diff = diff[:max_diff] + note.encode()
    source = {
        "project": str(root),
        "git_commit": git.head_commit(root) if repo else None,
        "git_branch": git.branch(root) if repo else None,
        "uncommitted_changes": bool(diff),
        "uncommitted_diff_cut": cut,
        "untracked_files": git.untracked_files(root, keep) if repo else [],
        "code_dir": str(code_dir) if code_dir else None,
        "jeanzay_kit": __version__,
        "python": platform.python_version(),
        "executable": sys.executable,
        "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host": socket.gethostname(),
    }
    if not repo:
        source["note"] = "not a git repository: the snapshot holds job.snapshot_include's files"
    (folder / "source.json").write_text(json.dumps(source, indent=1) + "\n")
    (folder / "uncommitted.diff").write_bytes(diff)
    (folder / "packages.txt").write_text(packages_freeze())


def record_start_provenance(run_dir: RunDir, env: Mapping[str, str]) -> None:
    """record_run_provenance for a start on a node, from its working directory: a record
    that cannot be written is said, never a reason to stop training."""
    try:
        record_run_provenance(run_dir, env, Path.cwd())
    except OSError as err:
        print(f"jzk: warning: provenance not recorded: {err}", file=sys.stderr, flush=True)


def record_run_provenance(run_dir: RunDir, env: Mapping[str, str], cwd: Path) -> Path:
    """At a run's start (once per start, by one process): copy the snapshot's record,
    or record the live tree the run imports from; append a line to history.jsonl."""
    from jeanzay_kit.project.import_path import CODE_DIR_VAR, project_code_dir

    out = run_dir.provenance
    out.mkdir(parents=True, exist_ok=True)
    code = project_code_dir(env, cwd)
    frozen = code / PROVENANCE_DIR if env.get(CODE_DIR_VAR) else None
    if frozen is not None and frozen.is_dir():
        for name in FILES:
            if (frozen / name).exists():
                shutil.copyfile(frozen / name, out / name)
    else:
        write_submit_provenance(out, cwd, None)
    source = json.loads((out / "source.json").read_text())
    line = {
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host": socket.gethostname(),
        "job_id": env.get("SLURM_JOB_ID"),
        # An array task's id as sacct and the manifests name it (jzk status of a run
        # directory that no manifest lists: another launcher's, plain sbatch).
        "array_id": array_id(env),
        "code_dir": str(code),
        "git_commit": source.get("git_commit"),
        "uncommitted_changes": source.get("uncommitted_changes"),
        # What the libraries that download were told (docs/offline.md): their caches
        # and offline switches, as the job exported them.
        "libraries": {k: env[k] for k in (*OFFLINE_SWITCHES, *CACHE_FOLDERS) if k in env},
    }
    history = out / "history.jsonl"
    old = history.read_bytes() if history.exists() else b""
    write_durably(history, old + (json.dumps(line) + "\n").encode())
    return out
