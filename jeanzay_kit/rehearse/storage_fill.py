"""The storage_full fault: the filesystem of a run's checkpoints made full for real, by a
file that takes its free space but a little, removed once a save has met it. The
rehearsal fills only a small filesystem (schedule.FILL_LIMIT): the file is written from
this process, so on a cluster it fills the shared filesystem the job sees too."""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

FILLER = ".jzk-rehearsal-fill"
# Left free: the run's small appends (metrics, heartbeats) still fit for a while, a
# checkpoint (a shard of the model's parameters and optimizer state) does not.
LEAVE_BYTES = 64 << 10
_CHUNK = 8 << 20


@contextmanager
def filled(folder: Path) -> Iterator[int]:
    """`folder`'s filesystem full for the life of the block; yields the bytes taken."""
    filler = folder / FILLER
    taken = 0
    try:
        with filler.open("wb") as out:
            want = max(shutil.disk_usage(folder).free - LEAVE_BYTES, 0)
            try:
                os.posix_fallocate(out.fileno(), 0, want)
                taken = want
            except OSError as err:  # a filesystem without fallocate: written, then
                if err.errno not in (errno.EOPNOTSUPP, errno.ENOSPC, errno.EINVAL):
                    raise
                taken = _write_until_full(out.fileno(), want)
        yield taken
    finally:
        filler.unlink(missing_ok=True)


def _write_until_full(fd: int, want: int) -> int:
    zeros, taken = bytes(_CHUNK), 0
    while taken < want:
        try:
            taken += os.write(fd, zeros[: min(_CHUNK, want - taken)])
        except OSError as err:
            if err.errno in (errno.ENOSPC, errno.EDQUOT):
                break
            raise
    return taken
