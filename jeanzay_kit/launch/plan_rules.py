"""`jzk plan`: the alternatives to a request that still train the same run, and their
rows once Slurm has estimated each one's start. Pure: the edge (cli/plan.py) validates
every alternative, asks `sbatch --test-only` and passes the answers in.

Which alternatives (issue 67, docs/queue.md):
- as asked;
- a shorter time limit in a chain of jobs (`--chain N`): each job resumes the run where
  the last one stopped, and a short job fits the backfill scheduler's gaps;
- a `--time-min` (resources.time_min) of half the limit: backfill may start the job
  sooner with a limit between the two; the run saves at its limit and requeues;
- another QoS of the profile whose limits hold the request;
- another pool the project holds (Jean Zay: the same project's account on V100, A100 or
  H100: `abc@h100` -> `abc@a100`), the request otherwise the same;
- half the nodes, the global batch kept by gradient accumulation (the toolkit's own
  loop only: it keeps train.global_batch_size), for twice the time (chained when that
  passes the longest limit).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from jeanzay_kit.slurm_syntax.timefmt import format_time

# A job shorter than this spends more of its hours starting than training.
MIN_CHAIN_MINUTES = 30


@dataclass(frozen=True)
class Alternative:
    label: str
    overrides: tuple[str, ...]  # added to the request's own
    chain: int = 1  # jobs in the chain (`jzk submit --chain`)


@dataclass(frozen=True)
class Request:
    """What the alternatives are built from: the request as validated."""

    minutes: int  # resources.time
    nodes: int
    gpus_per_node: int
    qos: str | None
    qos_limits: Sequence[tuple[str, int, int | None]] = ()  # (name, max minutes, max GPUs)
    longest_minutes: int = 0  # the longest limit any QoS or the partition allows
    resumes: bool = True  # a chain resumes the run (the toolkit's loop, a script's resume_args)
    keeps_global_batch: bool = True  # fewer nodes keep the global batch (toolkit's loop)
    # Other pools the account's project holds (Jean Zay: V100, A100, H100, each its own
    # account): (profile, account).
    pools: Sequence[tuple[str, str]] = ()


@dataclass(frozen=True)
class Row:
    number: int
    label: str
    overrides: tuple[str, ...]
    chain: int
    start_estimate: str | None  # Slurm's (sbatch --test-only), ISO
    end_estimate: str | None
    gpu_hours: float
    refused: str | None = None  # Slurm's refusal, when it refused
    notes: tuple[str, ...] = field(default=())


def alternatives(req: Request) -> list[Alternative]:
    """The request as asked first, then each alternative that trains the same run."""
    out = [Alternative("as asked", ())]
    if req.resumes:
        for parts in (2, 4):
            minutes = req.minutes // parts
            if minutes >= MIN_CHAIN_MINUTES:
                out.append(
                    Alternative(
                        f"{parts} chained jobs of {format_time(minutes)}",
                        (f"resources.time={format_time(minutes)}",),
                        parts,
                    )
                )
        half = req.minutes // 2
        if half >= MIN_CHAIN_MINUTES:
            out.append(
                Alternative(
                    f"time-min {format_time(half)} (backfill may start it sooner, shorter)",
                    (f"resources.time_min={format_time(half)}",),
                )
            )
    gpus = req.nodes * req.gpus_per_node
    for name, max_minutes, max_gpus in req.qos_limits:
        if (
            name != req.qos
            and req.minutes <= max_minutes
            and (max_gpus is None or gpus <= max_gpus)
        ):
            out.append(Alternative(f"QoS {name}", (f"resources.qos={name}",)))
    for profile, account in req.pools:
        out.append(
            Alternative(f"pool {profile}", (f"cluster={profile}", f"cluster.account={account}"))
        )
    if req.nodes > 1 and req.keeps_global_batch:
        nodes, minutes = req.nodes // 2, req.minutes * 2
        chain = 1
        while req.longest_minutes and minutes // chain > req.longest_minutes:
            chain *= 2
        if not (chain > 1 and not req.resumes):
            out.append(
                Alternative(
                    f"{nodes} node(s), twice the time"
                    + (f", {chain} chained jobs" if chain > 1 else ""),
                    (f"resources.nodes={nodes}", f"resources.time={format_time(minutes // chain)}"),
                    chain,
                )
            )
    return out


def other_pools(
    account: str | None,
    suffix: str | None,
    profiles: Sequence[tuple[str, str | None]],
    current: str,
) -> list[tuple[str, str]]:
    """(profile, account) of each other profile whose accounts end with their own suffix
    (Jean Zay's `<project>@<arch>`), for this request's project."""
    if not account or not suffix or not account.endswith(suffix):
        return []
    project = account[: -len(suffix)]
    return [
        (name, project + other)
        for name, other in profiles
        if other and name != current and other != suffix
    ]


def with_alternative(overrides: Sequence[str], alt: Alternative) -> list[str]:
    """The request's overrides with the alternative's; another pool replaces the
    profile and the account (Hydra takes one `cluster=`)."""
    if any(o.startswith("cluster=") for o in alt.overrides):
        kept = [
            o for o in overrides if not o.lstrip("+~").startswith(("cluster=", "cluster.account="))
        ]
        return [*kept, *alt.overrides]
    return [*overrides, *alt.overrides]


def row_of(
    number: int,
    alt: Alternative,
    minutes: int,
    gpus: int,
    start: str | None,
    refused: str | None = None,
) -> Row:
    """One row: the start Slurm estimated, the end (each chained job's limit after it:
    the latest end), the GPU hours at most (every job to its limit)."""
    end = None
    if start is not None:
        try:
            end = (
                datetime.fromisoformat(start) + timedelta(minutes=minutes * alt.chain)
            ).isoformat()
        except ValueError:
            end = None
    hours = round(gpus * minutes * alt.chain / 60, 2)
    return Row(number, alt.label, alt.overrides, alt.chain, start, end, hours, refused)


def plan_table(rows: Sequence[Row]) -> str:
    header = ("#", "WHAT", "STARTS", "ENDS BY", "GPU H", "OVERRIDES")
    cells = [header] + [
        (
            str(r.number),
            r.label,
            r.start_estimate or ("refused" if r.refused else "?"),
            r.end_estimate or "-",
            f"{r.gpu_hours:g}",
            " ".join(r.overrides) + (f" --chain {r.chain}" if r.chain > 1 else "") or "-",
        )
        for r in rows
    ]
    widths = [max(len(c[i]) for c in cells) for i in range(len(header) - 1)]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row[:-1], widths, strict=True)) + "  " + row[-1]
        for row in cells
    )
