"""When a script task is hung, and what its status can say, for code that writes no
heartbeat. Pure: beats, times and names in, verdicts out (node/script_watch.py does the
watching on every task).

A script that does not know the toolkit shows life in two ways the toolkit can see from
outside: lines on its output (a progress bar, a loss every N steps: usually only rank 0
prints) and files written under its run directory (its checkpoints, its logs). The run
is hung when, for watchdog.stall_seconds, no task of the attempt printed a line and no
file of the script's changed. Each task's wrapper writes what it saw of its command in a
beat, `<run_dir>/heartbeat/task-<N>.json` (beside a session's own `rank-<N>.json`), with
the last line and its time, so every task judges the same attempt.
"""

from __future__ import annotations

import signal
from collections.abc import Iterable
from dataclasses import dataclass

from jeanzay_kit.ending.codes import WARNING_NAMES, stop_signals
from jeanzay_kit.rundir.beats import Beat, ScriptBeat
from jeanzay_kit.rundir.progress import format_duration
from jeanzay_kit.runtime.stall import START_GRACE_S, START_PHASE, check_seconds

# The stop signals that ask the script to save and end before a limit. Not SIGTERM: then
# Slurm itself is ending the job (a cancel, a preemption, a requeue), and there is
# nothing left to watch.
WARNINGS = stop_signals(WARNING_NAMES)


@dataclass
class StopSeen:
    """What a task's watch knows of the stop: when the first warning came, and whether
    Slurm is ending the job."""

    warned_at: float | None = None
    ending: bool = False

    def saw(self, signum: int, now: float) -> None:
        if signum == signal.SIGTERM:
            self.ending = True
        elif signum in WARNINGS and self.warned_at is None:
            self.warned_at = now

    def check_every(self, stall_seconds: float, after_signal_s: float, beat_s: float) -> float:
        """How often to judge the attempt: every tenth of the rule in force (every task
        reads every beat: a large job must not keep the shared filesystem busy), not
        more often than beats are written."""
        rule = stall_seconds
        if self.warned_at is not None and 0 < after_signal_s < stall_seconds:
            rule = after_signal_s
        return max(beat_s, rule / 10)


@dataclass(frozen=True)
class ScriptHang:
    quiet_s: float  # seconds without a line from any task or a file written
    named: ScriptBeat  # a frozen task if any, else the one quiet the longest
    beats: tuple[ScriptBeat, ...]
    limit: str  # the rule that fired, as the keys say it

    def message(self, run_dir: str, now: float) -> str:
        b = self.named
        why = (
            "its wrapper has written no beat either (the node is lost or its processes are stopped)"
            if b.frozen(now)
            else f"its last line {format_duration(now - b.output_time)} ago: {b.last_line[-120:]!r}"
            if b.last_line
            else "it has printed nothing"
        )
        return (
            f"the script made no progress for {self.quiet_s:.0f} s: no task printed a "
            f"line and no file changed under {run_dir} ({self.limit}); task {b.rank} "
            f"(host {b.host}, pid {b.pid}): {why}"
        )


def script_hang(
    beats: Iterable[ScriptBeat],
    newest_write: float | None,
    start: float,
    now: float,
    *,
    stall_seconds: float,
    token: str,
    signalled_at: float | None = None,
    after_signal_s: float = 0.0,
    session_beat: float | None = None,
) -> ScriptHang | None:
    """The attempt `token` is hung: no beat of it shows a line and no file of the script
    changed for stall_seconds (0: never; START_GRACE_S at least before its first line or
    file). Before any beat arrives, nothing is judged.

    After the stop signal (`signalled_at`: the time-limit warning or a preemption
    notice), the script has `after_signal_s` of quiet at most: it was asked to save and
    end before the limit, and a handler stuck in a collective would otherwise hold the
    job until Slurm kills it at the limit, unrequeued.

    session_beat: when a loop on the session API last made progress in this attempt,
    as its heartbeats say (None: it writes none): a loop that printed nothing and saved
    nothing for stall_seconds, stepping on, was judged hung here."""
    current = tuple(b for b in beats if b.token == token and not b.finished)
    if stall_seconds <= 0 or not current:
        return None
    signs = [start, *(b.output_time for b in current)]
    signs += [t for t in (newest_write, session_beat) if t is not None]
    limit, rule = stall_seconds, f"watchdog.stall_seconds={stall_seconds:g}"
    # Nothing printed or written yet: the script is starting (imports, data, the
    # process group's rendezvous), which a CPU-starved node took over 10 s to do.
    written = newest_write is not None and newest_write > start
    starting = not any(b.output_time > start for b in current) and not written
    if starting and stall_seconds < START_GRACE_S:
        limit, rule = START_GRACE_S, f"{rule} ({START_GRACE_S:g} s while it starts)"
    elif session_beat is not None:
        # A session's own watchdog names the hang first, from inside (its step, its
        # stacks): this watch is for when it cannot (every rank stopped, a node lost).
        # Both at once left two hang folders, hang-<step> and hang-<start>.
        first = 2 * check_seconds(stall_seconds) + 5.0
        limit, rule = stall_seconds + first, f"{rule} + {first:g} s for the session's own watchdog"
    if signalled_at is not None and 0 < after_signal_s < stall_seconds:
        signs.append(signalled_at)
        limit = after_signal_s
        rule = f"{after_signal_s:g} s after the stop signal: half of preemption.lead_seconds"
    quiet = now - max(signs)
    if quiet <= limit:
        return None
    frozen = [b for b in current if b.frozen(now)]
    named = min(frozen or current, key=lambda b: (b.wall_time if frozen else b.output_time, b.rank))
    return ScriptHang(quiet, named, current, rule)


def session_beat(beats: Iterable[Beat], start: float) -> float | None:
    """When a loop on the session API last made progress (a new step or phase, as its
    heartbeats say: heartbeat/rank-<N>.json) in the attempt started at `start`; None:
    none wrote a beat (a script that writes none). Not when it last beat: its beats
    come from a thread of their own, also while its loop is stuck. While it starts (its
    first step not reached: model, data, torch's imports), a beat is enough: its own
    watchdog gives that phase START_GRACE_S (runtime/stall.py stall_limit); a Hydra
    app's loop, slow to start on a busy machine, was judged hung here before its step 1."""
    times = [
        b.wall_time if b.phase == START_PHASE else b.progress_time
        for b in beats
        if b.wall_time >= start and not b.finished
    ]
    return max(times, default=None)
