"""Which rank stalls a run, from the ranks' heartbeats. Pure: values in, a verdict out.

Every rank writes `<run_dir>/heartbeat/rank-<N>.json` from a background thread
(runtime/heartbeat.py). Two clocks in each beat tell two failures apart:

- `wall_time`: when the file was last written. The writer thread runs whatever the
  training thread does, so a beat FROZEN_BEATS intervals old means the whole process is
  frozen or gone (SIGSTOP, a dead node, a hang in C code that holds the GIL).
- `progress_time`: when the training thread last moved (a new step or phase). A rank
  alive but without progress is stuck (in a collective a frozen peer never joins, in a
  deadlock, on a dead filesystem).

The run stalls once a rank has not moved for watchdog.stall_seconds. A frozen rank is
the cause of the others being stuck, so it is named first. Beats of
another attempt (a token every rank gets from rank 0 at start) and of ranks that have
finished are left out.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

# The heartbeat file's record (jeanzay_kit/rundir/beats.py, beside the run directory's room);
# named here too for the watchdog's readers.
from jeanzay_kit.rundir.beats import FROZEN_BEATS, Beat

# Phases of a session (runtime/session.py) in which a rank waits in a collective for its
# peers (FSDP's all-gather in the forward, DDP's gradient all-reduce in the backward):
# when several ranks stall, one still in the user's own code is named before these.
WAITING_PHASES = ("forward", "backward")
# Before its first step an attempt imports torch, joins its peers, builds and loads: on a
# CPU-starved node that took over 10 s with no fault at all (a rehearsal's run without
# faults, named hung at step 0 in phase start with watchdog.stall_seconds=5). A low
# stall_seconds is meant for the steps; until the first one a rank has at least this.
START_PHASE = "start"
START_GRACE_S = 60.0


def stall_limit(phase: str, stall_seconds: float) -> float:
    """How long a rank in `phase` may make no progress: stall_seconds, or START_GRACE_S
    at least while it starts."""
    return max(stall_seconds, START_GRACE_S) if phase == START_PHASE else stall_seconds


def check_seconds(stall_seconds: float) -> float:
    """How often a rank's watchdog looks at the beats (runtime/heartbeat.py)."""
    return max(0.5, min(5.0, stall_seconds / 4))


@dataclass(frozen=True)
class Stall:
    beat: Beat  # the rank named as the cause
    frozen: bool  # True: the process itself stopped; False: alive without progress
    seconds: float  # how long it has made no progress
    live_ranks: tuple[int, ...]  # ranks whose heartbeat thread still runs
    # The furthest step a rank of the attempt reached: a frozen rank's own beat is up to
    # a beat interval old (its writer stopped with it), dozens of short steps behind.
    step: int

    @property
    def reporter(self) -> int | None:
        """The lowest live rank: it writes the report and asks for the restart."""
        return min(self.live_ranks) if self.live_ranks else None

    def message(self, stall_seconds: float) -> str:
        b = self.beat
        what = (
            f"has written no heartbeat and made no progress for {self.seconds:.0f} s (the "
            "process is stopped, dead, or hung in native code)"
            if self.frozen
            else f"has made no progress for {self.seconds:.0f} s"
        )
        # Its phase is its last beat's: said with that beat's step when the run went
        # further (a saving phase at step 40 is not what it did at step 44). A user
        # read "at step 44 (its last heartbeat: step 40)" as two claims on one rank.
        reached = f"step {self.step}/{b.total_steps}"
        where = (
            f"at {reached} in phase {b.phase}"
            if b.step == self.step
            else f"while the run is at {reached} (this rank's last heartbeat: step {b.step}, in "
            f"phase {b.phase})"
        )
        grace = stall_limit(b.phase, stall_seconds)
        starting = f" ({grace:g} s while it starts)" if grace > stall_seconds else ""
        return (
            f"rank {b.rank} (host {b.host}, pid {b.pid}) {what}, {where}; "
            f"watchdog.stall_seconds={stall_seconds:g}{starting}"
        )


def find_stall(beats: Iterable[Beat], now: float, stall_seconds: float, token: str) -> Stall | None:
    """The rank that stalls this attempt, or None while every rank moves.

    A run stalls when a rank has neither moved nor written a beat for stall_seconds
    (START_GRACE_S at least before the attempt's first step). The
    rank named is a frozen one (no beat for FROZEN_BEATS intervals: its writer thread
    stopped too) if there is one, since the others then wait for it, else the rank with
    the oldest progress, a rank waiting for its peers (WAITING_PHASES) last."""
    current = [b for b in beats if b.token == token and not b.finished]
    stalled = [
        b
        for b in current
        if now - min(b.progress_time, b.wall_time) > stall_limit(b.phase, stall_seconds)
    ]
    if not stalled:
        return None
    live = tuple(sorted(b.rank for b in current if not _frozen(b, now)))
    step = max(b.step for b in current)
    frozen = [b for b in stalled if _frozen(b, now)]
    if frozen:
        worst = min(frozen, key=lambda b: (b.wall_time, b.rank))
        return Stall(worst, True, now - worst.progress_time, live, step)
    worst = min(stalled, key=lambda b: (b.phase in WAITING_PHASES, b.progress_time, b.rank))
    return Stall(worst, False, now - worst.progress_time, live, step)


def _frozen(beat: Beat, now: float) -> bool:
    return now - beat.wall_time > FROZEN_BEATS * beat.interval_s + 1.0
