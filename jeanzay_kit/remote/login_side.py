"""What the laptop asks of the login node, run there by `jzk remote hello|receive|pack`
over ssh (remote/transport.py). Edge: files, the environment of the login node.

- hello: one JSON line: the toolkit's version and build there, the Slurm commands
  present, the work folder as expanded there, and whether a code key was received.
- receive: the code archive on stdin, unpacked into the project's folder.
- pack: a run directory's files as a .tar.gz on stdout (`jzk pull`), its checkpoints
  only when asked.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import sys
import tarfile
from pathlib import Path

from jeanzay_kit.errors import JzkError
from jeanzay_kit.remote.code_archive import ARCHIVES, received_key, unpack
from jeanzay_kit.rundir.run_directory import RunDir
from jeanzay_kit.version import __version__

SLURM_COMMANDS = ("sbatch", "squeue", "sacct", "scancel")


def build_id() -> str:
    """A digest of the toolkit's own files as installed here: equal on both ends when the
    login node runs the laptop's build (versions alone miss a change in a checkout)."""
    package = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*")):
        if path.suffix in (".py", ".yaml") and "__pycache__" not in path.parts:
            digest.update(path.relative_to(package).as_posix().encode() + b"\0")
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:16]


def work_folder() -> Path:
    """$JZK_REMOTE, set by the command line the laptop sent (ssh_rules.remote_line)."""
    return Path(os.environ.get("JZK_REMOTE") or Path.home() / "jzk")


def hello(project: str | None, key: str | None) -> dict[str, object]:
    work = work_folder()
    return {
        "version": __version__,
        "build": build_id(),
        "python": sys.executable,
        "workdir": str(work),
        "slurm_missing": [c for c in SLURM_COMMANDS if shutil.which(c) is None],
        "has_code": bool(project and key and received_key(work / "projects" / project) == key),
    }


def receive(project: str, key: str) -> int:
    work = work_folder()
    folder = work / "projects" / project
    count = unpack(folder, key, sys.stdin.buffer, work / ARCHIVES)
    print(json.dumps({"files": count, "project": str(folder)}))
    return 0


def pack_run(run_dir: RunDir, checkpoints: bool) -> int:
    """The run directory's regular files (links left: a script's cwd links to the project)
    as a .tar.gz on stdout; its checkpoints folder only with `checkpoints`."""
    run = run_dir
    if not run_dir.root.is_dir():
        raise JzkError(f"{run_dir} is not a run directory on this machine")
    skip = None if checkpoints else run.checkpoints.resolve()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for path in sorted(run_dir.root.rglob("*")):
            if path.is_symlink() or not path.is_file():
                continue
            if skip is not None and skip in path.resolve().parents:
                continue
            tar.add(path, arcname=path.relative_to(run_dir.root).as_posix(), recursive=False)
    sys.stdout.buffer.write(buf.getvalue())
    sys.stdout.buffer.flush()
    return 0
