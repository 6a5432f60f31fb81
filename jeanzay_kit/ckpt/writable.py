"""Is the run directory writable? Asked before any worker or job step starts, so a
read-only filesystem, a folder of someone else's or a full quota is one message at once
instead of a worker's traceback (or a job that burns its allocation to find out).

`unwritable_message` is pure (errno -> what to say); `check_writable` is the edge that
tries for real: create the folders, write and fsync a small file (durable_io), remove it. As root,
permission bits do not stop a write, so asking os.access would lie; trying does not.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

from jeanzay_kit.durable_io import write_synced
from jeanzay_kit.errors import RunDirError

PROBE = ".jzk-write-test"
FIX = (
    "set job.run_dir to a directory you can write (on Jean Zay: under $WORK or $SCRATCH; "
    "`idr_quota_user` shows your quotas)"
)


def unwritable_message(
    key: str, path: str, code: int | None, detail: str, free_bytes: int | None, uid: int
) -> str:
    """What to tell the user when `path` (the value of config key `key`) cannot be written."""
    if code == errno.EROFS:
        reason = "is on a read-only filesystem"
    elif code in (errno.EACCES, errno.EPERM):
        reason = f"is not writable by this user (uid {uid})"
    elif code in (errno.ENOSPC, errno.EDQUOT):
        free = f"{free_bytes} bytes free" if free_bytes is not None else "no space"
        reason = f"is on a full filesystem or quota ({free})"
        return f"{key}={path} {reason}: {detail}. HINT: free space there, or {FIX}"
    elif code == errno.ENOTDIR:
        reason = "has a file where a folder should be"
    else:
        reason = "cannot be written"
    return f"{key}={path} {reason}: {detail}. HINT: {FIX}"


def check_writable(path: Path, key: str = "job.run_dir") -> None:
    """Create `path` (and its parents) and write a small file in it; raise RunDirError
    naming the key, the path, why, and the fix."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / PROBE
        write_synced(probe, b"jeanzay_kit write test\n")  # a full disk shows at the fsync
        probe.unlink()
    except OSError as err:
        free = _free_bytes(path)
        raise RunDirError(
            unwritable_message(
                key, str(path), err.errno, err.strerror or str(err), free, os.getuid()
            )
        ) from err


def _free_bytes(path: Path) -> int | None:
    for candidate in (path, *path.parents):
        if candidate.exists():
            try:
                return shutil.disk_usage(candidate).free
            except OSError:
                return None
    return None
