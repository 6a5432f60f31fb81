"""Every rank's output in <run_dir>/train.log, one whole line at a time, labelled.

What a rank prints still goes where it went (the terminal, Slurm's .out/.err); each
complete line is also appended to <run_dir>/train.log as `[rank N] line`, with one
write() on a file opened O_APPEND, so lines of different ranks never mix mid-line
(`jzk logs RUN_DIR --rank N` reads them back). Two ways in:

- `install(run_dir, rank)`: the toolkit's own workers replace sys.stdout/sys.stderr with
  a LineTee (Python-level: output written by C code, NCCL's, is not copied);
- `Pump`: the local launcher of a script (node/script_task.py) reads each process's
  stdout and stderr from pipes and forwards them whole, line by line (a progress bar's
  `\\r` updates as they come), to its own stdout/stderr and to train.log.

A progress bar's `\\r` redraws reach the terminal; train.log keeps the last state of
each line. Edge module (files, file descriptors).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
import time
from collections.abc import Callable
from typing import IO, Any, TextIO

from jeanzay_kit.rundir.rank_lines import label
from jeanzay_kit.rundir.run_directory import RunDir

# The end of a process's output kept to read how it ended (faulthandler's report).
TAIL_BYTES = 16384


def open_log(run_dir: RunDir) -> int:
    run_dir.root.mkdir(parents=True, exist_ok=True)
    return os.open(run_dir.train_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)


def mark_start(run_dir: RunDir, marker: str) -> None:
    """An unlabelled line opening an attempt in train.log (`jzk logs --attempt K` counts
    them); `marker` is the launcher's `jzk: start ...` line, without its number: it gets
    the count of the markers already there, plus one."""
    try:
        old = run_dir.train_log.read_text(errors="replace")
    except OSError:
        old = ""
    head = marker.split("{n}")[0]
    number = sum(1 for line in old.splitlines() if line.startswith(head)) + 1
    try:
        fd = open_log(run_dir)
        os.write(fd, (marker.format(n=number) + "\n").encode())
        os.close(fd)
    except OSError:
        pass


def last_state(line: str) -> str:
    """A line as a terminal leaves it: what follows its last carriage return."""
    body = line.rstrip("\n")
    return body.rsplit("\r", 1)[-1] + ("\n" if line.endswith("\n") else "")


class LineTee:
    """A text stream that writes through to `original` and copies whole lines, labelled,
    to the train.log descriptor `fd`."""

    def __init__(self, original: TextIO, fd: int, prefix: str) -> None:
        self.original, self.fd, self.prefix = original, fd, prefix.encode()
        self._pending = ""
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        written = self.original.write(text)
        with self._lock:
            self._pending += text
            if "\n" in self._pending:
                *whole, self._pending = self._pending.split("\n")
                for line in whole:
                    self._append(last_state(line + "\n"))
        return written

    def _append(self, line: str) -> None:
        # A full disk must not stop training over a copy of its output.
        with contextlib.suppress(OSError):
            os.write(self.fd, self.prefix + line.encode(errors="replace"))

    def flush(self) -> None:
        self.original.flush()

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding, buffer...
        return getattr(self.original, name)


def install(run_dir: RunDir, rank: int) -> None:
    """This process's sys.stdout and sys.stderr also fill <run_dir>/train.log."""
    try:
        fd = open_log(run_dir)
    except OSError:
        return  # the run goes on; only the copy is missing
    prefix = label(rank)
    sys.stdout = LineTee(sys.stdout, fd, prefix)
    sys.stderr = LineTee(sys.stderr, fd, prefix)


class Pump(threading.Thread):
    """Forwards a child's pipe to `out` in whole segments (a line, or a `\\r` redraw),
    each with one write, under a lock shared by all pumps of the run; whole lines also
    go, labelled, to train.log. It notes when the process last printed and its last line
    (the local hang watch, node/script_local_watch.py), and while `capture` is set copies
    the output there too (a hang's stacks)."""

    def __init__(self, pipe: IO[bytes], out: IO[bytes], fd: int, prefix: str, lock: Any):
        super().__init__(daemon=True)
        self.pipe, self.out, self.fd, self.prefix, self.lock = pipe, out, fd, prefix.encode(), lock
        self.tail = b""  # the end of the output (TAIL_BYTES): how the process ended
        self.last_time, self.last_line = 0.0, ""
        self.capture: IO[bytes] | None = None

    def run(self) -> None:
        line = b""  # the current line, for train.log
        for segment in _segments(self.pipe, self._heard):
            self.tail = (self.tail + segment)[-TAIL_BYTES:]
            with self.lock:
                self.out.write(segment)
                self.out.flush()
            if (capture := self.capture) is not None:
                with contextlib.suppress(ValueError, OSError):  # closed meanwhile
                    capture.write(segment)
                    capture.flush()
            line = line + segment if not line.endswith(b"\r") else segment
            if segment.endswith(b"\n"):
                text = last_state(line.decode(errors="replace"))
                if text.strip():
                    self.last_line = text.strip()[-500:]
                with contextlib.suppress(OSError):
                    os.write(self.fd, self.prefix + text.encode())
                line = b""
        if line:
            os.write(
                self.fd, self.prefix + last_state(line.decode(errors="replace") + "\n").encode()
            )

    def _heard(self) -> None:
        """Output came, a whole line or not: progress dots printed without a newline
        are signs of life too (as on Slurm, where the watch reads the log file's size)."""
        self.last_time = time.time()


def _segments(pipe: IO[bytes], heard: Callable[[], None]) -> Any:
    """The pipe's bytes cut after each b"\\n" or b"\\r"; the rest at its end. heard() is
    called as each chunk arrives, before it is cut."""
    pending = b""
    while chunk := os.read(pipe.fileno(), 65536):
        heard()
        pending += chunk
        cut = max(pending.rfind(b"\n"), pending.rfind(b"\r"))
        if cut < 0:
            continue
        whole, pending = pending[: cut + 1], pending[cut + 1 :]
        yield from re.findall(rb"[^\r\n]*[\r\n]", whole)
    if pending:
        yield pending
