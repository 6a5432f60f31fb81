"""The processes a rank started (its DataLoader workers, torch.compile's workers), ended
with it when its watchdog ends it after a hang (runtime/heartbeat.py).

A loader worker that never runs a line of Python, stopped, or deadlocked at its fork
(CPython before 3.11.10 can leave a forked child waiting for ever on a lock another
thread held at the fork: CPython gh-112275), never notices that its rank died: torch's
worker checks its parent only between batches. It would outlive the rank and, having
inherited them, hold the run's stdout and stderr open, so that a caller reading them (a
pipe, `| tee`, a test) waits for ever although the run restarted and ended. Seen in CI:
an evaluation's worker hung, the run restarted and completed, and its caller's read of
its output timed out 300 s later.

Linux only (/proc): elsewhere no process is listed and none is ended.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Mapping
from pathlib import Path

PROC = Path("/proc")


def parent_and_state(stat: str) -> tuple[int, str]:
    """The parent pid and the one-letter state of a /proc/PID/stat line. The command
    name before them is in parentheses and may hold spaces and parentheses itself."""
    fields = stat.rsplit(")", 1)[1].split()
    return int(fields[1]), fields[0]


def descendants(pid: int, stats: Mapping[int, str]) -> list[tuple[int, str]]:
    """(pid, state) of every process under `pid` in `stats` (pid -> its stat line),
    children before their own children."""
    children: dict[int, list[tuple[int, str]]] = {}
    for child, stat in stats.items():
        parent, state = parent_and_state(stat)
        children.setdefault(parent, []).append((child, state))
    found: list[tuple[int, str]] = []
    queue = [pid]
    while queue:
        for child, state in sorted(children.get(queue.pop(0), [])):
            found.append((child, state))
            queue.append(child)
    return found


def read_stats(root: Path = PROC) -> dict[int, str]:
    """Every process's stat line, those that ended meanwhile left out."""
    stats: dict[int, str] = {}
    with contextlib.suppress(OSError):
        for entry in root.iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    stats[int(entry.name)] = (entry / "stat").read_text()
    return stats


def end_descendants(pid: int | None = None) -> list[tuple[int, str]]:
    """SIGKILL every process under `pid` (this one by default); returns them, with the
    state each was in (S sleeping, T stopped, D in the kernel...)."""
    found = descendants(os.getpid() if pid is None else pid, read_stats())
    for child, _state in found:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(child, signal.SIGKILL)
    return found
