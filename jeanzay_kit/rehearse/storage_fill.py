"""The storage_full fault: the filesystem of a run's checkpoints made full for real, by a
file that takes its free space but a little, removed once a save has met it. The
rehearsal fills only a small filesystem (schedule.FILL_LIMIT): the file is written from
this process, so on a cluster it fills the shared filesystem the job sees too."""

from __future__ import annotations

import errno
import os
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

FILLER = ".jzk-rehearsal-fill"
# Left free: the run's small appends (metrics, heartbeats) still fit for a while, a
# checkpoint (a shard of the model's parameters and optimizer state) does not.
LEAVE_BYTES = 64 << 10
_CHUNK = 8 << 20
_FULL = (errno.ENOSPC, errno.EDQUOT)


def free_bytes(folder: Path) -> int:
    """What a process of this user may still write there: root may write the blocks the
    filesystem reserves for it too (ext4's 5 %), and the run is this user's."""
    st = os.statvfs(folder)
    return (st.f_bfree if os.geteuid() == 0 else st.f_bavail) * st.f_frsize


@contextmanager
def filled(folder: Path) -> Iterator[Callable[[], None]]:
    """`folder`'s filesystem full for the life of the block, the file removed at its end
    (SIGTERM and SIGHUP too: a login shell closed must not leave it full). Yields
    `top_up`, which takes again what was freed since (a save's retention removing an
    older checkpoint)."""
    filler = folder / FILLER
    previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}

    def leave(signum: int, _frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)  # through the finally below

    for signum in previous:
        signal.signal(signum, leave)
    try:
        with filler.open("wb") as out:

            def top_up() -> None:
                _take(out.fileno(), folder)

            top_up()
            yield top_up
    finally:
        filler.unlink(missing_ok=True)
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _take(fd: int, folder: Path) -> None:
    """Extend the file at `fd` over the free space but LEAVE_BYTES."""
    want = free_bytes(folder) - LEAVE_BYTES
    if want <= 0:
        return
    size = os.fstat(fd).st_size
    try:
        os.posix_fallocate(fd, size, want)
    except OSError as err:  # no fallocate there, or the run wrote in between: written
        if err.errno not in (errno.EOPNOTSUPP, errno.EINVAL, *_FULL):
            raise
        _write_until_full(fd, size, max(free_bytes(folder) - LEAVE_BYTES, 0))


def _write_until_full(fd: int, at: int, want: int) -> None:
    # Random bytes: zeros would be stored in next to no space where a filesystem
    # compresses (ZFS, btrfs).
    chunk, written = os.urandom(_CHUNK), 0
    os.lseek(fd, at, os.SEEK_SET)
    while written < want:
        try:
            written += os.write(fd, chunk[: min(_CHUNK, want - written)])
        except OSError as err:
            if err.errno in _FULL:
                return
            raise
