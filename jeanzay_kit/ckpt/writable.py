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
from jeanzay_kit.rundir.run_directory import write_probe

FIX = (
    "set job.run_dir to a directory you can write (on Jean Zay: under $WORK or $SCRATCH; "
    "`idr_quota_user` shows your quotas)"
)


def _fix(key: str) -> str:
    """FIX, for the setting `key` names (tune.dir, jzk report --out)."""
    return f"set {key} to" + FIX.removeprefix("set job.run_dir to")


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
        return f"{key}={path} {reason}: {detail}. HINT: free space there, or {_fix(key)}"
    elif code == errno.ENOTDIR:
        reason = "has a file where a folder should be"
    else:
        reason = "cannot be written"
    return f"{key}={path} {reason}: {detail}. HINT: {_fix(key)}"


# A save's files vanished or were replaced while it ran: what another writer of the same
# folder, or a cleanup job removing it, does; never a matter of space.
_CHANGED_UNDER_US = (errno.ENOENT, errno.EEXIST, errno.ENOTEMPTY, errno.ESTALE, errno.ENOTDIR)


def save_failure_hint(code: int | None, run_dir: str) -> str:
    """The way out of a checkpoint write that failed with errno `code` (None: another
    rank failed, its own error says why). Only space and quota errors talk of space."""
    again = "then run the same command: it resumes from the newest complete checkpoint"
    if code in (errno.ENOSPC, errno.EDQUOT):
        return (
            "free space or raise the quota (Jean Zay: idr_quota_user), lower "
            f"checkpoint.keep_last, or move job.run_dir; {again}"
        )
    if code in _CHANGED_UNDER_US:
        return (
            f"files of this save in {run_dir} were removed or replaced while it was "
            "written: another process writes this run directory, or something deleted "
            f"it. `jzk status {run_dir}` names the run that holds it; give each run its "
            f"own job.run_dir; {again}"
        )
    if code in (errno.EROFS, errno.EACCES, errno.EPERM):
        return f"the filesystem refused the write ({errno.errorcode[code]}): {FIX}; {again}"
    if code is None:
        return f"the failing rank's error above says why; {again}"
    name = errno.errorcode.get(code, str(code))
    return f"the filesystem failed ({name}): check its state (`df`, dmesg on the node); {again}"


def check_writable(path: Path, key: str = "job.run_dir") -> None:
    """Create `path` (and its parents) and write a small file in it; raise RunDirError
    naming the key, the path, why, and the fix."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = write_probe(path)
        write_synced(probe, b"jeanzay_kit write test\n")  # a full disk shows at the fsync
        # Gone already: another process checking this folder at once (two tasks of a
        # study or an array) removed it. The write went through: no refusal.
        probe.unlink(missing_ok=True)
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
