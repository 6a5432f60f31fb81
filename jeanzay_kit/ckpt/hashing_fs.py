"""A DCP filesystem that checksums every file while writing it.

The manifest needs the checksum of every file. Reading 400 MB back to hash it cost as
much as writing it (bench/bench_checkpoint.py); hashing the bytes on their way to disk
costs only the CPU, in the writer threads of ckpt/raw_storage.py (the hashes release the
GIL on large buffers).
"""

from __future__ import annotations

import io
import os
import threading
from collections.abc import Generator
from contextlib import contextmanager
from pathlib import Path

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


class HashingFileSystem(FileSystem):
    def __init__(self) -> None:
        super().__init__()
        self.records: dict[str, FileRecord] = {}
        self._lock = threading.Lock()

    @contextmanager
    def create_stream(self, path: str | os.PathLike, mode: str) -> Generator[io.IOBase, None, None]:
        if mode != "wb":
            with super().create_stream(path, mode) as stream:
                yield stream
            return
        with Path(path).open("wb") as raw:
            stream = _HashingStream(raw)
            yield stream
            raw.flush()
        with self._lock:
            self.records[str(path)] = FileRecord(
                stream.size, checksum_text(DEFAULT_ALGORITHM, stream.hasher)
            )

    def rename(self, path: str | os.PathLike, new_path: str | os.PathLike) -> None:
        super().rename(path, new_path)
        with self._lock:
            if str(path) in self.records:
                self.records[str(new_path)] = self.records.pop(str(path))
