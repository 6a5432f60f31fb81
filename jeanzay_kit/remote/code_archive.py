"""The project's code as one archive, both ends: packed on the laptop from what a
submission freezes (project/snapshot.py plan_of: code only, never data or outputs),
keyed by its content's hash, sent once, unpacked once on the login node. One file on
the wire and one unpacking: the cluster counts inodes, ssh round trips cost time.

On the login node the project's folder is `$JZK_REMOTE/projects/<name>`; a received
project keeps the list of its files (RECEIVED), which its own snapshots then freeze
exactly (project/snapshot.py), and which the next reception uses to remove the files
the laptop no longer has. Outputs and logs there are never touched.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import tarfile
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from jeanzay_kit.errors import JzkError
from jeanzay_kit.project.snapshot import RECEIVED

ARCHIVES = "code-archives"  # under $JZK_REMOTE: one .tar.gz per key, kept for replays


@dataclass(frozen=True)
class CodeArchive:
    key: str  # sha256 of the names and contents, 16 hex (as logs/code/<hash>)
    data: bytes  # the .tar.gz
    files: int
    bytes: int  # of the files, unpacked


def code_key(root: Path, names: Sequence[str]) -> str:
    digest = hashlib.sha256()
    for name in sorted(names):
        digest.update(name.encode() + b"\0" + hashlib.sha256((root / name).read_bytes()).digest())
    return digest.hexdigest()[:16]


def pack(root: Path, names: Sequence[str]) -> CodeArchive:
    """The files `names` (relative to root) as a gzip'ed tar, reproducible: no owner, no
    times (the gzip header's too), sorted, so the same code is the same key and bytes."""
    buf = io.BytesIO()
    total = 0
    with (
        gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=6, mtime=0) as gz,
        tarfile.open(fileobj=gz, mode="w") as tar,
    ):
        for name in sorted(names):
            data = (root / name).read_bytes()
            total += len(data)
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o755 if os.access(root / name, os.X_OK) else 0o644
            tar.addfile(info, io.BytesIO(data))
    return CodeArchive(code_key(root, names), buf.getvalue(), len(names), total)


def project_name(root: Path) -> str:
    """The project's folder on the login node: its name here and a short hash of where it
    is here, so two projects of the same name on one laptop never share one."""
    digest = hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:6]
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in root.resolve().name)
    return f"{safe or 'project'}-{digest}"


def received_key(project: Path) -> str | None:
    try:
        return str(json.loads((project / RECEIVED).read_text())["key"])
    except (OSError, ValueError, KeyError):
        return None


def unpack(project: Path, key: str, stream: BinaryIO, archives: Path) -> int:
    """On the login node: store the archive (written aside, then renamed), then bring the
    project's code to it. Returns the number of files. A lost connection leaves at most a
    temporary file: the next reception starts over."""
    archives.mkdir(parents=True, exist_ok=True)
    path = archives / f"{key}.tar.gz"
    tmp = archives / f".{key}.{os.getpid()}.tmp"
    try:
        with tmp.open("wb") as out:
            shutil.copyfileobj(stream, out)
        names = _safe_names(tmp, key)
        os.replace(tmp, path)
    except OSError as err:
        raise JzkError(
            f"the code could not be stored in {archives} ({err.strerror or err}). HINT: a "
            "full quota there? `idr_quota_user` on Jean Zay, or set cluster.remote.workdir"
        ) from None
    finally:
        tmp.unlink(missing_ok=True)
    _sync(project, names, path, key)
    return len(names)


def _safe_names(path: Path, key: str) -> list[str]:
    """The archive's file names, once every byte has been read (gzip's checksum checked)
    and its content hashes to `key`: a damaged archive is never unpacked or recorded."""
    digests: dict[str, bytes] = {}
    try:
        with tarfile.open(path, "r:gz") as tar:
            for m in tar:
                if not m.isfile() or m.name.startswith("/") or ".." in Path(m.name).parts:
                    raise JzkError(
                        f"the code archive holds {m.name!r}, not a project file: refused"
                    )
                data = tar.extractfile(m)
                digests[m.name] = hashlib.sha256(data.read() if data else b"").digest()
    except (tarfile.TarError, EOFError, zlib.error, OSError) as err:
        raise JzkError(f"the code archive arrived broken ({err}): send it again") from None
    digest = hashlib.sha256()
    for name in sorted(digests):
        digest.update(name.encode() + b"\0" + digests[name])
    if digest.hexdigest()[:16] != key:
        raise JzkError(f"the code archive arrived broken (its content is not {key}): send it again")
    return sorted(digests)


def _sync(project: Path, names: list[str], archive: Path, key: str) -> None:
    """Unpack over the project's folder; remove what the previous code had and this has
    not; the file list last (a reception cut short is redone, never half-used)."""
    project.mkdir(parents=True, exist_ok=True)
    try:
        before = json.loads((project / RECEIVED).read_text()).get("files", [])
    except (OSError, ValueError):
        before = []
    (project / RECEIVED).unlink(missing_ok=True)
    with tarfile.open(archive, "r:gz") as tar:
        # Names checked above (_safe_names); the filter where this Python has it (3.11.4+).
        safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        tar.extractall(project, **safe)  # type: ignore[arg-type]
    for gone in set(before) - set(names):
        (project / gone).unlink(missing_ok=True)
    tmp = project / f"{RECEIVED}.tmp"
    tmp.write_text(json.dumps({"key": key, "files": sorted(names)}))
    os.replace(tmp, project / RECEIVED)
