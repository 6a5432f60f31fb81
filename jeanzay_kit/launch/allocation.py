"""The account's allocation read from Slurm's accounting (launch/allocation_rules.py says
what the figures mean): `jzk status --hours`, and the line `jzk submit` says before it
submits, refusing a request that would pass what is left (cluster.allocation)."""

from __future__ import annotations

import sys
from datetime import date, timedelta

from jeanzay_kit.config.spec import JobSpec
from jeanzay_kit.errors import JzkError
from jeanzay_kit.launch import allocation_rules as rules


def account_standing(spec: JobSpec, today: date | None = None) -> rules.Standing | None:
    """Used, left and the burn rate of the request's account on this pool; None when the
    profile declares no allocation (cluster.allocation.hours)."""
    from jeanzay_kit.slurm.commands import sacct_account_text

    cluster = spec.cluster
    if cluster.allocation_hours is None or not cluster.is_slurm:
        return None
    today = today or date.today()
    since = cluster.allocation_since or (today - timedelta(days=365)).isoformat()
    text = sacct_account_text(spec.resources.account, since)
    by_day = rules.gpu_hours_by_day(text, node_shape(spec))
    if date.max in by_day:  # running attempts: used today
        by_day[today] = by_day.get(today, 0.0) + by_day.pop(date.max)
    return rules.standing(cluster.allocation_hours, by_day, today, cluster.allocation_blocked_at)


def node_shape(spec: JobSpec) -> rules.NodeShape:
    part = spec.resources.partition
    return rules.NodeShape(part.gpus_per_node, part.cpus_per_node)


def charged_gpus(spec: JobSpec) -> int:
    """The GPUs the request is charged for (allocation_rules.charged_gpus): all its nodes'
    GPUs when job.sbatch_args asks --exclusive."""
    res = spec.resources
    if res.partition.cpu_only:
        return 0  # CPU hours: not this allocation's
    exclusive = "--exclusive" in spec.job.sbatch_args
    cpus = res.ntasks_per_node * res.cpus_per_task
    return rules.charged_gpus(res.nodes, res.gpus_per_node, cpus, node_shape(spec), exclusive)


def request_hours(spec: JobSpec, jobs: int = 1) -> float:
    """The most GPU hours the request is charged: its charged GPUs x its time limit x the
    jobs (a chain's, a study's tasks)."""
    return charged_gpus(spec) * spec.resources.time_minutes / 60 * jobs


def check_request(spec: JobSpec, request_hours: float) -> None:
    """Say what the request takes of what is left; refuse it past what is left unless
    cluster.allocation.go_over=true."""
    s = account_standing(spec)
    if s is None:
        return
    print(rules.request_line(request_hours, s), file=sys.stderr)
    refusal = rules.over_allocation(request_hours, s)
    if refusal and not spec.cluster.allocation_go_over:
        raise JzkError(refusal)


def standing_text(spec: JobSpec) -> str:
    s = account_standing(spec)
    if s is None:
        raise JzkError(
            f"cluster.allocation.hours is not set for cluster={spec.cluster.name}: no "
            "allocation to read. HINT: cluster.allocation.hours=<GPU hours granted> (and "
            "cluster.allocation.since=YYYY-MM-DD), in your profile or on the command line"
        )
    who = spec.resources.account or "your jobs"
    return "\n".join(rules.standing_lines(s, date.today(), who))
