"""Who writes a run directory now: the lease's record and the rules that judge it. Pure.

A run directory has one writer at a time (docs/run-directories.md). The writer holds
`<run_dir>/lease.json` for its whole life: a POSIX record lock (fcntl) on that file where
the filesystem honours one (GPFS, Lustre mounted with `flock`, NFS with its lock
protocol: the lock is released by the filesystem when the holder's process dies or its
node is expelled), and in the file a record that says who holds it (host, pid, Slurm job,
since when), renewed every RENEW_SECONDS so a reader can judge it where locks are not
honoured (Lustre's `noflock`, `localflock`). lease.py is the edge that takes it;
this module decides from plain values.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from enum import Enum

# The holder rewrites its record this often; without a filesystem lock, a record not
# renewed for STALE_SECONDS is a holder that died (SIGKILL, a lost node).
RENEW_SECONDS = 30.0
STALE_SECONDS = 120.0


@dataclass(frozen=True)
class LeaseRecord:
    """Who holds a run directory: enough for a reader on another node to name it."""

    host: str
    pid: int
    job_id: str  # SLURM_JOB_ID of the holder ("" for a run outside Slurm)
    since: float  # when it took the lease (epoch seconds)
    renewed: float  # its last renewal
    command: str = ""  # what it runs, for the message (e.g. "jzk train", "script train.py")
    attempt: int = 0  # SLURM_RESTART_COUNT: which start of the job
    released: bool = False  # set by a holder that ended cleanly
    token: str = ""  # unique per acquisition: tells two takers apart

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True) + "\n"


def parse_record(text: str) -> LeaseRecord | None:
    """The record in `text`, or None when it is empty or not one (a partial write)."""
    try:
        data = json.loads(text)
        return LeaseRecord(
            host=str(data["host"]),
            pid=int(data["pid"]),
            job_id=str(data.get("job_id") or ""),
            since=float(data["since"]),
            renewed=float(data.get("renewed", data["since"])),
            command=str(data.get("command", "")),
            attempt=int(data.get("attempt", 0)),
            released=bool(data.get("released", False)),
            token=str(data.get("token", "")),
        )
    except (ValueError, KeyError, TypeError):
        return None


class Verdict(Enum):
    FREE = "free"  # nobody holds it
    OURS = "ours"  # an earlier attempt of this very Slurm job: a requeue takes it over
    STALE = "stale"  # its holder died
    HELD = "held"  # a live writer holds it: refuse


def judge(
    record: LeaseRecord | None,
    *,
    my_host: str,
    my_job_id: str,
    now: float,
    pid_alive: bool,
    locked: bool | None,
) -> Verdict:
    """Whether a would-be writer may take the run directory.

    locked: the filesystem's lock is held by another process (True), free (False), or
    not honoured on this filesystem (None: the record alone decides). pid_alive: whether
    the record's pid is a live process on this host (only asked when the host is ours).
    """
    if locked is False:
        return Verdict.FREE  # the filesystem says nobody holds it: its word wins
    if record is None:
        # Locked with no record yet: a holder between its lock and its first write.
        return Verdict.HELD if locked else Verdict.FREE
    if my_job_id and record.job_id == my_job_id:
        return Verdict.OURS  # Slurm runs one attempt of a job at a time
    if locked:
        return Verdict.HELD
    if record.released:
        return Verdict.FREE
    if record.host == my_host and not pid_alive:
        return Verdict.STALE
    if now - record.renewed > STALE_SECONDS:
        return Verdict.STALE
    return Verdict.HELD


def describe_holder(record: LeaseRecord | None, now: float) -> str:
    """'pid 123 on node7 (Slurm job 456), since 2026-11-26 07:40 UTC (12 min ago)'."""
    if record is None:
        return "another process (it has not written its record yet)"
    import datetime

    started = datetime.datetime.fromtimestamp(record.since, datetime.timezone.utc)
    who = f"pid {record.pid} on {record.host}"
    if record.job_id:
        who += f" (Slurm job {record.job_id}" + (
            f", restart {record.attempt})" if record.attempt else ")"
        )
    what = f", running {record.command}" if record.command else ""
    return (
        f"{who}{what}, since {started:%Y-%m-%d %H:%M:%S} UTC "
        f"({_ago(now - record.since)}; renewed {_ago(now - record.renewed)})"
    )


def saves_on_stop(record: LeaseRecord) -> str:
    """What a stop signal makes the holder do: the toolkit's loop saves first; a script
    (`command` "script ...") saves only if it handles the signal (a session does), and a
    user's trial was told "saves first" of a script that saved nothing."""
    if record.command.startswith("script "):
        return "a session saves first, a script of its own only if it handles the signal"
    return "it saves first"


def busy_message(run_dir: str, record: LeaseRecord | None, now: float) -> str:
    """The one line a second writer gets: the holder and the ways out."""
    holder = describe_holder(record, now)
    if record is not None and record.job_id:
        stop = f"`scancel {record.job_id}`"
    elif record is not None:
        stop = f"stop it (`kill -USR1 {record.pid}` on {record.host}: {saves_on_stop(record)})"
    else:
        stop = "stop it"
    return (
        f"job.run_dir={run_dir} is being written by {holder}: a run directory has one "
        f"writer at a time. HINT: wait for that run to end (`jzk status {run_dir}`), or "
        f"{stop} and run this again (it resumes from the newest checkpoint), or give this "
        "run a directory of its own (job.run_dir=...)"
    )


def _ago(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{seconds:.0f} s ago"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3600:.1f} h ago"
