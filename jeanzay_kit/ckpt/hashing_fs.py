"""A DCP filesystem that checksums every file while writing it.

The manifest needs the checksum of every file. Reading 400 MB back to hash it cost as
much as writing it (bench/bench_checkpoint.py); hashing the bytes on their way to disk
costs only the CPU, in the writer threads of ckpt/raw_storage.py (the hashes release the
GIL on large buffers).
"""

from __future__ import annotations

import errno
import fcntl
import io
import mmap
import os
import threading
import warnings
from collections.abc import Generator
from contextlib import contextmanager
from pathlib import Path

import torch
from torch.distributed.checkpoint.filesystem import FileSystem

from jeanzay_kit.ckpt.checksum import DEFAULT_ALGORITHM, checksum_text, new_hasher
from jeanzay_kit.ckpt.layout import FileRecord

# Every 16 MB written, ask the kernel to start writing those pages to disk: the final
# fsync then has little left to wait for. POSIX_FADV_DONTNEED starts writeback of the
# range's dirty pages on Linux (mm/fadvise.c; it drops only pages already clean, so it is
# a writeback hint here, not a cache limit); what it gains is measured in
# docs/performance.md ("Writeback started while writing"). Where posix_fadvise does not
# exist (macOS) the writes just wait for the fsync.
WRITEBACK_EVERY = 16 << 20
# O_DIRECT (Linux): the tensors' bytes reach the disk without the page cache, in buffers
# of DIRECT_CHUNK, aligned as the device's blocks require (4096 covers 512 and 4K drives).
O_DIRECT = getattr(os, "O_DIRECT", 0)
DIRECT_CHUNK = 16 << 20
DIRECT_BLOCK = 4096
DIRECT_WRITES = True  # False: always the page cache (bench/bench_checkpoint_parts.py's other side)


class _HashingStream(io.RawIOBase):
    """Forwards writes to the file and feeds them to the checksum; no reads."""

    def __init__(self, raw: io.BufferedWriter):
        super().__init__()
        self.raw = raw
        self.hasher = new_hasher(DEFAULT_ALGORITHM)
        self.size = 0
        self._written_back = 0  # bytes handed to the kernel's writeback so far

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:  # noqa: ANN001 - bytes-like
        view = memoryview(data).cast("B")
        for start in range(0, len(view), WRITEBACK_EVERY):
            piece = view[start : start + WRITEBACK_EVERY]
            self.hasher.update(piece)
            self.raw.write(piece)
            self.size += len(piece)
            if self.size - self._written_back >= WRITEBACK_EVERY:
                self._start_writeback()
        return len(view)

    def _start_writeback(self) -> None:
        if not hasattr(os, "posix_fadvise"):
            return
        self.raw.flush()
        os.posix_fadvise(
            self.raw.fileno(),
            self._written_back,
            self.size - self._written_back,
            os.POSIX_FADV_DONTNEED,
        )
        self._written_back = self.size

    def tell(self) -> int:
        return self.raw.tell()

    def flush(self) -> None:
        self.raw.flush()

    def fileno(self) -> int:
        return self.raw.fileno()

    def seekable(self) -> bool:
        return False  # a seek would make the running hash wrong


class _DirectStream(io.RawIOBase):
    """Writes through O_DIRECT, as `dd oflag=direct` does: each byte goes from the tensor
    into a page-aligned buffer (a copy that releases the GIL, so writer threads copy in
    parallel), is hashed there, and the buffer goes to the disk without the page cache.
    The last partial block is written with O_DIRECT cleared, then the file is fsynced
    (its size and the tail). What it gains over the page cache: docs/performance.md,
    "Checkpoint costs"."""

    def __init__(self, fd: int):
        super().__init__()
        self.fd = fd
        self.hasher = new_hasher(DEFAULT_ALGORITHM)
        self.size = 0
        self._buf = mmap.mmap(-1, DIRECT_CHUNK)  # page-aligned, as O_DIRECT requires
        self._staged = torch.frombuffer(self._buf, dtype=torch.uint8)
        self._fill = 0

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:  # noqa: ANN001 - bytes-like
        view = memoryview(data).cast("B")
        with warnings.catch_warnings():  # a read-only buffer: it is only read here
            warnings.simplefilter("ignore", UserWarning)
            source = torch.frombuffer(view, dtype=torch.uint8) if len(view) else None
        pos = 0
        while source is not None and pos < len(view):
            n = min(DIRECT_CHUNK - self._fill, len(view) - pos)
            self._staged[self._fill : self._fill + n].copy_(source[pos : pos + n])
            self.hasher.update(view[pos : pos + n])
            self._fill += n
            pos += n
            if self._fill == DIRECT_CHUNK:
                self._flush_aligned()
        self.size += len(view)
        return len(view)

    def _flush_aligned(self) -> None:
        whole = self._fill - self._fill % DIRECT_BLOCK
        _write_all(self.fd, memoryview(self._buf)[:whole])
        rest = self._fill - whole
        if rest:
            self._buf[:rest] = self._buf[whole : self._fill]
        self._fill = rest

    def finish(self) -> None:
        """The aligned part, then the tail through the page cache, then fsync."""
        self._flush_aligned()
        if self._fill:
            fcntl.fcntl(self.fd, fcntl.F_SETFL, fcntl.fcntl(self.fd, fcntl.F_GETFL) & ~O_DIRECT)
            _write_all(self.fd, memoryview(self._buf)[: self._fill])
        os.fsync(self.fd)

    def tell(self) -> int:
        return self.size

    def flush(self) -> None:
        pass  # whole blocks go out as they fill; the rest at finish()

    def fileno(self) -> int:
        return self.fd

    def seekable(self) -> bool:
        return False

    def close(self) -> None:
        if not self.closed:
            del self._staged  # the tensor's view of the buffer, before the buffer goes
            self._buf.close()
            os.close(self.fd)
        super().close()


def _write_all(fd: int, view: memoryview) -> None:
    while view:
        view = view[os.write(fd, view) :]


def _open_direct(path: str | os.PathLike) -> int | None:
    """A file opened for O_DIRECT writes, or None where the filesystem or the system has
    none (tmpfs, macOS): the page cache is used there."""
    if not O_DIRECT or not DIRECT_WRITES:
        return None
    try:
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | O_DIRECT, 0o644)
    except OSError as err:
        if err.errno == errno.EINVAL:
            return None
        raise


class HashingFileSystem(FileSystem):
    def __init__(self) -> None:
        super().__init__()
        self.records: dict[str, FileRecord] = {}
        self._lock = threading.Lock()

    @contextmanager
    def create_stream(self, path: str | os.PathLike, mode: str) -> Generator[io.IOBase, None, None]:
        if mode != "wb":
            with super().create_stream(path, mode) as reading:
                yield reading
            return
        fd = _open_direct(path)
        written: _HashingStream | _DirectStream
        if fd is not None:
            written = _DirectStream(fd)
            try:
                yield written
                written.finish()
            finally:
                written.close()
        else:
            with Path(path).open("wb") as raw:
                written = _HashingStream(raw)
                yield written
                raw.flush()
        with self._lock:
            self.records[str(path)] = FileRecord(
                written.size, checksum_text(DEFAULT_ALGORITHM, written.hasher)
            )

    def rename(self, path: str | os.PathLike, new_path: str | os.PathLike) -> None:
        super().rename(path, new_path)
        with self._lock:
            if str(path) in self.records:
                self.records[str(new_path)] = self.records.pop(str(path))
