"""train.log's lines as both sides read them: each whole line of a rank labelled
`[rank N] ` (runtime/rank_log.py writes them; `jzk logs --rank N` reads them). Pure."""

from __future__ import annotations

import re

_LABEL = re.compile(r"^\[rank (\d+)\] ", re.M)
# What rank 0 prints the moment the ranks agree to stop on a signal (runtime/run.py):
# `jzk rehearse` times a preemption's detection by it.
STOPPING = "received: stopping after step"


def label(rank: int) -> str:
    return f"[rank {rank}] "


def lines_of_rank(text: str, rank: int) -> str:
    """The lines train.log holds for one rank, their label removed."""
    prefix = label(rank)
    return "".join(
        line[len(prefix) :] for line in text.splitlines(keepends=True) if line.startswith(prefix)
    )


def ranks_in(text: str) -> list[int]:
    return sorted({int(m.group(1)) for m in _LABEL.finditer(text)})
