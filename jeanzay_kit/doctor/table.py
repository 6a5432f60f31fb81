"""What `jzk doctor` concludes from what every rank measured. Pure.

- The rank table: host, rank, local rank, visible devices, CPU affinity and the master
  address and port each rank derived.
- Which ranks pair up for the per-rank bandwidth test. A collective is as slow as its
  slowest member, so one all-reduce over the whole world cannot say which rank is slow.
  Ranks are paired twice, (0,1)(2,3)... then (1,2)(3,4)...(n-1,0): a slow rank is slow
  in both of its pairs, its partners only in one, so a rank's figure is the better of
  its pairs and only the slow rank keeps a low one.
- Which ranks to flag: under SLOW_FACTOR times the median figure.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

# A rank whose bus bandwidth is under this fraction of the median is flagged.
SLOW_FACTOR = 0.7


@dataclass(frozen=True)
class RankFacts:
    rank: int
    local_rank: int
    node_rank: int
    host: str
    pid: int
    devices: str  # CUDA_VISIBLE_DEVICES as the rank sees it, "-" when unset
    device: str  # what the rank trains on: cpu, or cuda:N and its name
    cpus: tuple[int, ...]  # CPU affinity (os.sched_getaffinity)
    master: str  # address:port this rank rendezvoused with


def cpu_ranges(cpus: Sequence[int]) -> str:
    """[0, 1, 2, 3, 8] -> "0-3,8" (the notation of taskset and Slurm's cpu binding)."""
    if not cpus:
        return "-"
    ordered = sorted(set(cpus))
    parts, start, prev = [], ordered[0], ordered[0]
    for cpu in [*ordered[1:], None]:
        if cpu is not None and cpu == prev + 1:
            prev = cpu
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if cpu is not None:
            start = prev = cpu
    return ",".join(parts)


def pair_rounds(world: int) -> list[list[list[int]]]:
    """The two pairings of the bandwidth test; with an odd world one rank sits a round out.
    A world of 2 has one pair (both rounds would be the same)."""
    if world < 2:
        return []
    first = [[r, r + 1] for r in range(0, world - 1, 2)]
    if world == 2:
        return [first]
    second = [[r, r + 1] for r in range(1, world - 1, 2)]
    if world % 2 == 0:
        second.append([world - 1, 0])
    return [first, second]


def bus_bandwidth(nbytes: int, seconds: float, world: int) -> float:
    """All-reduce bus bandwidth in bytes/s, as nccl-tests defines it: the algorithm
    bandwidth (size / time) times 2(n-1)/n, the share of the data each link carries in a
    ring, so figures compare across world sizes."""
    if seconds <= 0 or world < 2:
        return 0.0
    return nbytes / seconds * 2 * (world - 1) / world


def rank_figures(world: int, pair_bandwidth: Sequence[dict[int, float]]) -> list[float | None]:
    """Each rank's figure: the best bandwidth of the pairs it was in (None if in none).
    pair_bandwidth: per round, {rank: the bus bandwidth its pair measured}."""
    figures: list[float | None] = [None] * world
    for round_figures in pair_bandwidth:
        for rank, value in round_figures.items():
            old = figures[rank]
            figures[rank] = value if old is None else max(old, value)
    return figures


def slow_ranks(figures: Sequence[float | None], factor: float = SLOW_FACTOR) -> list[int]:
    known = [f for f in figures if f is not None]
    if len(known) < 2:
        return []
    median = statistics.median(known)
    return [r for r, f in enumerate(figures) if f is not None and f < factor * median]


def gbps(value: float | None) -> str:
    return "-" if value is None else f"{value / 1e9:.2f}"


def format_rank_table(
    facts: Sequence[RankFacts], figures: Sequence[float | None] = (), slow: Sequence[int] = ()
) -> str:
    header = ["RANK", "HOST", "LOCAL", "NODE", "PID", "DEVICES", "DEVICE", "CPUS", "MASTER"]
    if figures:
        header += ["BUSBW GB/s", ""]
    cells = [header]
    for fact in sorted(facts, key=lambda f: f.rank):
        row = [
            str(fact.rank),
            fact.host,
            str(fact.local_rank),
            str(fact.node_rank),
            str(fact.pid),
            fact.devices,
            fact.device,
            cpu_ranges(fact.cpus),
            fact.master,
        ]
        if figures:
            row += [gbps(figures[fact.rank]), "SLOW" if fact.rank in slow else ""]
        cells.append(row)
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    )
