"""The account's allocation: what is used (from sacct's rows), what is left, the burn rate
and the day the hours run out at that rate, and what a request takes of what is left.
Pure: the edge (launch/allocation.py) reads sacct and the profile (cluster.allocation).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime, timedelta

# The burn rate is over the last days of use.
BURN_DAYS = 7
# Past this, the hours do not run out at this rate (and no date is that far).
MAX_DAYS = 3650


@dataclass(frozen=True)
class Standing:
    granted: float  # GPU hours (cluster.allocation.hours)
    used: float
    burn_per_day: float  # over the last BURN_DAYS days
    blocked_at: float  # the site's ratio (1.25: blocked at 125 % of the hours)

    @property
    def left(self) -> float:
        return self.granted - self.used

    def runs_out(self, today: date) -> date | None:
        """The day the hours granted are spent at the burn rate; None when nothing burns."""
        if self.burn_per_day <= 0:
            return None
        if self.left <= 0:
            return today
        days = self.left / self.burn_per_day
        return None if days > MAX_DAYS else today + timedelta(days=days)


@dataclass(frozen=True)
class NodeShape:
    """One node of the pool, as the site counts it: its GPUs and CPUs (None: unknown)."""

    gpus: int | None
    cpus: int | None

    @property
    def cpus_per_gpu(self) -> int | None:
        return self.cpus // self.gpus if self.gpus and self.cpus else None


def charged_gpus(
    nodes: int, gpus_per_node: int, cpus_per_node: int, node: NodeShape, exclusive: bool
) -> int:
    """The GPUs a site counting as IDRIS does charges for a request: a job asking more
    CPUs than its GPUs' share of a node is counted as the matching share of the node's
    GPUs, and an exclusive job as all its nodes' GPUs (IDRIS, "Computing hours accounting
    and the idracct command"). A pool whose shape is unknown: the GPUs asked."""
    if node.gpus is None:
        return nodes * gpus_per_node
    if exclusive:
        return nodes * node.gpus
    share = math.ceil(cpus_per_node / node.cpus_per_gpu) if node.cpus_per_gpu else 0
    return nodes * min(node.gpus, max(gpus_per_node, share))


def tres_charged_gpus(tres: str, node: NodeShape) -> float:
    """The GPUs charged for one attempt by its AllocTRES (cpu=...,gres/gpu=...,node=...):
    the GPUs allocated, or the CPUs' share of the nodes' GPUs where that is more."""
    from jeanzay_kit.launch.status import tres_gpus

    gpus = tres_gpus(tres)
    counts = dict(item.partition("=")[::2] for item in tres.split(","))
    cpus, nodes = counts.get("cpu", ""), counts.get("node", "1")
    if not gpus or not node.cpus_per_gpu or not cpus.isdigit() or not nodes.isdigit():
        return gpus
    per_node = math.ceil(int(cpus) / max(int(nodes), 1) / node.cpus_per_gpu)
    return max(gpus, int(nodes) * min(node.gpus or per_node, per_node))


def gpu_hours_by_day(sacct: str, node: NodeShape = NodeShape(None, None)) -> dict[date, float]:
    """Rows of `sacct -X -n -P -o JobID,ElapsedRaw,AllocTRES,End` (every attempt): GPU
    hours charged (tres_charged_gpus) by the day each attempt ended (a running one:
    today, by its End 'Unknown')."""
    out: dict[date, float] = {}
    for line in sacct.splitlines():
        cells = line.strip().split("|")
        if len(cells) != 4 or not cells[1].isdigit():
            continue
        hours = int(cells[1]) * tres_charged_gpus(cells[2], node) / 3600
        try:
            day = datetime.fromisoformat(cells[3]).date()
        except ValueError:
            day = date.max  # still running: counted, dated by the caller
        out[day] = out.get(day, 0.0) + hours
    return out


def standing(
    granted: float, by_day: Mapping[date, float], today: date, blocked_at: float = 1.0
) -> Standing:
    running = by_day.get(date.max, 0.0)
    recent = sum(h for d, h in by_day.items() if today - timedelta(days=BURN_DAYS) < d <= today)
    return Standing(granted, sum(by_day.values()), (recent + running) / BURN_DAYS, blocked_at)


def standing_lines(s: Standing, today: date, account: str) -> list[str]:
    out = s.runs_out(today)
    pct = 100 * s.used / s.granted if s.granted else 0.0
    lines = [
        f"allocation of {account}: {s.granted:,.1f} GPU hours",
        f"  used      {s.used:,.1f} ({pct:.0f} %)",
        f"  left      {s.left:,.1f}",
        f"  burn      {s.burn_per_day:,.1f} GPU hours a day (the last {BURN_DAYS} days)",
        f"  runs out  {out.isoformat() if out else 'never at this rate'}",
    ]
    if s.blocked_at > 1.0:
        lines.append(
            f"  the site stops the account's jobs at {s.granted * s.blocked_at:,.1f} GPU hours "
            f"({100 * s.blocked_at:.0f} % of the allocation)"
        )
    return lines


def request_line(request_hours: float, s: Standing) -> str:
    share = f"{100 * request_hours / s.left:.0f} %" if s.left > 0 else "all"
    return (
        f"allocation: this request takes at most {request_hours:,.1f} GPU hours of the "
        f"{max(s.left, 0):,.1f} left ({share})"
    )


def over_allocation(request_hours: float, s: Standing) -> str | None:
    """The refusal of a request that would pass what is left, or None."""
    if request_hours <= s.left:
        return None
    return (
        f"cluster.allocation: this request takes up to {request_hours:,.1f} GPU hours and "
        f"{max(s.left, 0):,.1f} of the {s.granted:,.1f} granted are left "
        f"({s.used:,.1f} used). HINT: a shorter resources.time or fewer GPUs, or "
        "cluster.allocation.go_over=true to submit it anyway"
    )
