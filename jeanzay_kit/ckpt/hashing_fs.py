"""A DCP filesystem that checksums every file while writing it.

The manifest needs the checksum of every file. Reading 400 MB back to hash it cost as
much as writing it (bench/bench_checkpoint.py); hashing the bytes on their way to disk
costs only the CPU, in DCP's writer threads (the hashes release the GIL on large buffers).
"""

from __future__ import annotations

import io
import os
import threading
from collections.abc import Generator
from contextlib import contextmanager
from pathlib import Path

from torch.distributed.checkpoint import FileSystemWriter
from torch.distributed.checkpoint.filesystem import FileSystem

from jeanzay_kit.ckpt.checksum import DEFAULT_ALGORITHM, checksum_text, new_hasher
from jeanzay_kit.ckpt.layout import FileRecord


class _HashingStream(io.RawIOBase):
    """Forwards writes to the file and feeds them to the checksum; no reads."""

    def __init__(self, raw: io.BufferedWriter):
        super().__init__()
        self.raw = raw
        self.hasher = new_hasher(DEFAULT_ALGORITHM)
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:  # noqa: ANN001 - bytes-like
        view = memoryview(data).cast("B")
        self.hasher.update(view)
        written = self.raw.write(view)
        self.size += len(view)
        return written if written is not None else len(view)

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
            yield stream  # type: ignore[misc]
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


def hashing_writer(path: Path, thread_count: int) -> tuple[FileSystemWriter, HashingFileSystem]:
    writer = FileSystemWriter(str(path), thread_count=thread_count, sync_files=True)
    fs = HashingFileSystem()
    writer.fs = fs
    return writer, fs
