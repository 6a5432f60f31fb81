"""What a run's network accesses mean, and what a job on offline nodes exports. Pure.

The traced process (offline/trace.py) records each access as plain values: the host, the
port, the URL where a frame of the stack holds one, and the stack as (file, line, module,
where) rows, `where` one of "project", "toolkit", "library", "stdlib". This module names
the library and the user's line that led there, says it in one line each, and refuses.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

PROJECT, TOOLKIT, LIBRARY, STDLIB = "project", "toolkit", "library", "stdlib"


@dataclass(frozen=True)
class Frame:
    file: str
    line: int
    module: str  # the frame's __name__
    where: str  # PROJECT | TOOLKIT | LIBRARY | STDLIB


@dataclass(frozen=True)
class Access:
    """One network access, as it reads in a report."""

    host: str
    port: int | None
    url: str | None
    library: str  # the package the user's code called (transformers, torch, urllib...)
    user_line: str | None  # "train.py:12", the project's innermost line on the stack

    def line(self) -> str:
        target = self.url or (f"{self.host}:{self.port}" if self.port else self.host)
        by = f"by {self.library}"
        return f"{target}  {by}" + (f", from {self.user_line}" if self.user_line else "")


def top_package(module: str) -> str:
    return module.split(".")[0] or module


def describe(host: str, port: int | None, url: str | None, frames: Sequence[Frame]) -> Access:
    """The access with the library the user's code called and the user's line: frames run
    outermost first; the library is the first library (else stdlib) frame after the
    project's last one."""
    last_user = max((i for i, f in enumerate(frames) if f.where == PROJECT), default=-1)
    user = frames[last_user] if last_user >= 0 else None
    after = frames[last_user + 1 :]
    called = next((f for f in after if f.where == LIBRARY), None) or next(
        (f for f in after if f.where == STDLIB), None
    )
    library = top_package(called.module) if called else "unknown"
    user_line = f"{user.file}:{user.line}" if user else None
    return Access(host, port, url, library, user_line)


def unique(accesses: Sequence[Access]) -> list[Access]:
    """One row per URL (a client's retries are one access), and per host for the accesses
    no frame named a URL of (a name lookup, then the connection) unless a row names one."""
    named = {a.host for a in accesses if a.url}
    rows: dict[tuple[str, str | None], Access] = {}
    for a in accesses:
        if a.url is None and a.host in named:
            continue
        rows.setdefault((a.url or a.host, a.user_line), a)
    return list(rows.values())


def report_lines(accesses: Sequence[Access], offline: bool) -> list[str]:
    if not accesses:
        return ["network: no access (the run needs no internet up to where it was tried)"]
    how = "taken away" if offline else "watched"
    lines = [f"network: {len(accesses)} access(es) with the network {how}:"]
    return lines + [f"  {a.line()}" for a in accesses]


def refusal(accesses: Sequence[Access], cluster: str) -> str:
    """The one-line refusal of a submission to nodes without internet."""
    first = accesses[0]
    more = f" and {len(accesses) - 1} more (listed above)" if len(accesses) > 1 else ""
    return (
        f"cluster.compute_internet: {cluster}'s compute nodes have no internet, and the run "
        f"reaches {first.url or first.host} ({first.library}"
        + (f", from {first.user_line}" if first.user_line else "")
        + f"){more}: it would fail there after its wait in the queue. HINT: `jzk prefetch` "
        "with the same overrides (or `jzk submit --prefetch`) fetches it where the network "
        "is; --allow-network submits anyway"
    )
