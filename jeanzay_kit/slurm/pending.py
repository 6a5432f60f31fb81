"""Why a pending job waits, in words: Slurm's reason code (squeue's REASON) turned into
what it means for this job and what would change it. Pure: the edge reads squeue, sprio
and sacct (cli/status.py) and passes what it read.

Reason codes: Slurm's "Job Reason Codes" (https://slurm.schedmd.com/job_reason_codes.html).
The limit codes are built from parts (QOS|Assoc, Grp|Max, a resource, a scope), so they are
read from their parts, not listed one by one: QOSMaxGRESPerUser, AssocGrpGRESMinutes...
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

# The fields `jzk status` asks squeue for pending jobs (slurm/commands.py), "|"-separated.
PENDING_FORMAT = "JobID:60|,Reason:60|,StartTime:30|,LastSchedEval:30|,Dependency:500|"


@dataclass(frozen=True)
class Waiting:
    """What Slurm says of one pending job."""

    job_id: str
    reason: str  # Slurm's word, e.g. Priority, QOSMaxGRESPerUser
    start_estimate: str | None = None  # ISO, Slurm's backfill estimate; None when it has none
    evaluated_at: str | None = None  # when the scheduler last looked at the job
    dependency: str = ""  # squeue's Dependency, e.g. afterany:123(unfulfilled)
    # sprio's parts of the job's priority (age, fairshare, jobsize, qos...), when read.
    priority: Mapping[str, int] = field(default_factory=dict)


def parse_pending(text: str) -> dict[str, Waiting]:
    """Rows of `squeue -h -t PD -O PENDING_FORMAT`."""
    out: dict[str, Waiting] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) < 5 or not cells[0]:
            continue
        job_id, reason, start, evaluated, dependency = cells[:5]
        out[job_id] = Waiting(
            job_id,
            reason,
            _time(start),
            _time(evaluated),
            "" if dependency in ("(null)", "") else dependency,
        )
    return out


def _time(value: str) -> str | None:
    """Slurm's 2026-11-28T17:45:13, or None for N/A, Unknown, 0."""
    return value if re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d(:\d\d)?$", value) else None


def parse_sprio(text: str) -> dict[str, dict[str, int]]:
    """Rows of `sprio -h -o "%i|%Y|%A|%F|%J|%P|%Q"`: job, priority, age, fair-share,
    size, partition, QoS."""
    names = ("priority", "age", "fairshare", "jobsize", "partition", "qos")
    out: dict[str, dict[str, int]] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) != 7:
            continue
        try:
            out[cells[0]] = {n: int(float(v)) for n, v in zip(names, cells[1:], strict=True)}
        except ValueError:
            continue
    return out


# Parts of a limit code: where the limit is, which kind, on what, over what scope.
_LIMIT = re.compile(
    r"^(?P<where>QOS|Assoc)(?P<kind>Grp|Max)(?P<what>[A-Za-z]+?)"
    r"(?P<scope>PerUser|PerAccount|PerJob|PerNode|PerTask|RunMinutes|Minutes|Limit)?$"
)
# Reasons of a request Slurm will not start as it is (the toolkit's validation catches
# most of them before the queue).
NEVER_AS_ASKED = (
    "PartitionTimeLimit",
    "PartitionNodeLimit",
    "BadConstraints",
    "InvalidQOS",
    "InvalidAccount",
    "QOSJobLimit",
    "AccountNotAllowed",
    "PartitionConfig",
)
_RESOURCES = {
    "GRES": "GPUs",
    "CPU": "CPUs",
    "Cpu": "CPUs",
    "Node": "nodes",
    "Mem": "memory",
    "Jobs": "running jobs",
    "Submit": "queued jobs",
    "SubmitJob": "queued jobs",
    "Wall": "time",
    "Billing": "billing units",
    "Energy": "energy",
    "License": "licences",
    "BB": "burst buffer",
}
_SCOPES = {
    "PerUser": "one user",
    "PerAccount": "one account",
    "PerJob": "one job",
    "PerNode": "one node",
    "PerTask": "one task",
}


def limit_why(reason: str) -> str | None:
    """The sentence for a QoS or association limit code, or None when it is not one."""
    m = _LIMIT.match(reason)
    if m is None:
        return None
    owner = "its QoS" if m["where"] == "QOS" else "your account (its association)"
    what = _RESOURCES.get(m["what"], m["what"])
    scope = m["scope"] or ""
    if scope in ("Minutes", "RunMinutes"):
        if scope == "Minutes" and m["where"] == "Assoc":
            return (
                f"the allocation of your account is spent ({reason}: the {what}-minutes it "
                "may use): no job of this account starts until more hours are granted. HINT: "
                "on Jean Zay ask for more hours (eDARI), or submit with another account"
            )
        return (
            f"{owner} caps the {what}-minutes of the running jobs together ({reason}): it "
            "starts as running jobs end. HINT: a shorter resources.time asks for fewer minutes"
        )
    if m["kind"] == "Max" and scope in ("PerJob", "PerNode", "PerTask"):
        return (
            f"it asks more {what} than {owner} allows {_SCOPES[scope]} ({reason}): it will "
            "not start as it is. HINT: ask less (resources.*) or choose another QoS "
            "(resources.qos)"
        )
    holder = _SCOPES.get(scope, "all its jobs together")
    return (
        f"{owner} lets {holder} hold only so many {what}, and your running or queued jobs "
        f"hold them ({reason}): it starts when one of them ends. HINT: another QoS "
        "(resources.qos) or fewer resources may start it sooner"
    )


def never_starts(reason: str) -> bool:
    """Whether a pending job with this reason can never start by itself: held, or
    refused as it stands (NEVER_AS_ASKED; BadConstraints also when the nodes it leaves
    out leave too few for it)."""
    return reason in NEVER_AS_ASKED or reason.startswith("JobHeld")


def pending_why(
    waiting: Waiting, dependency_states: Mapping[str, str] | None = None, partition: str = ""
) -> str:
    """One sentence: why `waiting` waits and what would change it. dependency_states: the
    state of each job it depends on (sacct), when read."""
    reason = waiting.reason
    start = f" Slurm's estimate: {waiting.start_estimate}." if waiting.start_estimate else ""
    if reason == "Priority":
        parts = ", ".join(f"{k} {v}" for k, v in waiting.priority.items() if k != "priority")
        mine = (
            f" (its priority {waiting.priority['priority']}: {parts})" if waiting.priority else ""
        )
        return (
            f"jobs of higher priority go first{' in ' + partition if partition else ''}"
            f"{mine}; it starts as they do.{start} HINT: a shorter resources.time lets the "
            "backfill scheduler start it in a gap"
        )
    if reason == "Resources":
        return (
            "it is next, but the nodes it asks for are busy: it starts when enough of them "
            f"are free.{start} HINT: fewer nodes or a shorter resources.time can start sooner"
        )
    if reason in ("Dependency", "DependencyNeverSatisfied"):
        return _dependency_why(waiting, dependency_states or {})
    if reason.startswith("JobHeld"):
        who = "an administrator" if reason == "JobHeldAdmin" else "you (or --hold)"
        release = f"scontrol release {waiting.job_id}"
        return f"it is held by {who}: it never starts until released. HINT: {release}"
    if reason == "BeginTime":
        return f"it was asked not to start before a time (--begin).{start}"
    if reason.startswith("ReqNodeNotAvail") or reason in ("Reservation", "ResvDeleted"):
        return (
            "the nodes it may use are reserved (a maintenance or a reservation) before its "
            f"time limit would end ({reason}): it starts after the reservation.{start} HINT: a "
            "resources.time that ends before the reservation starts it now (`scontrol show "
            "reservation` gives its start)"
        )
    if reason in ("None", ""):
        return "just submitted: the scheduler has not looked at it yet"
    limit = limit_why(reason)
    if limit is not None:
        return limit + (f".{start}" if start else "")
    if reason in NEVER_AS_ASKED:
        return (
            f"Slurm will not start it as asked ({reason}). HINT: `jzk validate` the request "
            "against the cluster's profile and submit it again"
        )
    return f"Slurm says {reason}.{start}"


_DEPENDS = re.compile(r"(\w+):(\d+(?:_\d+)?)")


def dependency_jobs(waiting: Waiting) -> list[str]:
    """The jobs a pending job's dependency names (afterany:123(unfulfilled),afterok:7)."""
    return [job for _kind, job in _DEPENDS.findall(waiting.dependency)]


def _dependency_why(waiting: Waiting, states: Mapping[str, str]) -> str:
    jobs = _DEPENDS.findall(waiting.dependency)
    named = ", ".join(
        f"job {job} ({kind}{', ' + states[job] if job in states else ''})" for kind, job in jobs
    )
    if waiting.reason == "DependencyNeverSatisfied":
        return (
            f"it waits for {named or 'a job'} that ended in a way its dependency excludes: "
            f"it will never start. HINT: jzk cancel {waiting.job_id}, then submit it again"
        )
    return f"it starts after {named or 'the job it depends on'} ends (its dependency)"


def estimate_errors(estimates: Mapping[str, str], starts: Mapping[str, str]) -> list[float]:
    """Seconds each started job began after Slurm's first estimate of its start (negative:
    before it), for the jobs of `estimates` (job -> estimate) that `starts` (sacct's
    Start) says have started."""
    from datetime import datetime

    out = []
    for job, estimate in estimates.items():
        start = starts.get(job)
        if start is None or _time(start) is None:
            continue
        delta = datetime.fromisoformat(start) - datetime.fromisoformat(estimate)
        out.append(delta.total_seconds())
    return out


def trust_line(errors: list[float]) -> str | None:
    """How good Slurm's estimates were for this user's last jobs, or None without any."""
    if not errors:
        return None
    ordered = sorted(errors)
    median = ordered[len(ordered) // 2]
    return (
        f"Slurm's start estimates for your last {len(ordered)} job(s) were off by "
        f"{_signed(median)} (median; from {_signed(ordered[0])} to {_signed(ordered[-1])})"
    )


def _signed(seconds: float) -> str:
    word = "late" if seconds > 0 else "early"
    s = abs(seconds)
    text = f"{s / 3600:.1f} h" if s >= 5400 else f"{s / 60:.0f} min" if s >= 60 else f"{s:.0f} s"
    return f"{text} {word}" if s >= 1 else "0 s"
