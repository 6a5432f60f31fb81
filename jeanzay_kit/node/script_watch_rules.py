"""When a script task is hung, and what its status can say, for code that writes no
heartbeat. Pure: beats, times and names in, verdicts out (node/script_watch.py does the
watching on every task).

A script that does not know the toolkit shows life in two ways the toolkit can see from
outside: lines on its output (a progress bar, a loss every N steps: usually only rank 0
prints) and files written under its run directory (its checkpoints, its logs). The run
is hung when, for watchdog.stall_seconds, no task of the attempt printed a line and no
file of the script's changed. Each task's wrapper writes what it saw of its command in a
beat, `<run_dir>/heartbeat/rank-<N>.json` (the toolkit loop's format, phase "script",
plus the last line and its time), so every task judges the same attempt.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

SCRIPT_PHASE = "script"
DONE_PHASE = "done"  # the command ended (train/stall.py FINISHED_PHASES)
# A beat this many intervals old (and a second for a busy filesystem): that task's wrapper
# is not running (the node is lost, or its processes were stopped).
FROZEN_BEATS = 3
# File names that look like a checkpoint (`jzk status` shows the newest).
CHECKPOINT_SUFFIXES = (".pt", ".pth", ".ckpt", ".safetensors", ".bin", ".pkl", ".distcp")
CHECKPOINT_WORDS = ("checkpoint", "ckpt")


@dataclass(frozen=True)
class ScriptBeat:
    rank: int
    host: str
    pid: int  # the command's process
    token: str  # the attempt: the same on every task of one job step
    output_time: float  # when the command last printed (the attempt's start before that)
    last_line: str  # its last line of output
    wall_time: float  # when the beat was written
    interval_s: float
    finished: bool = False  # the command has ended

    def to_json(self) -> dict[str, Any]:
        # The toolkit loop's beat fields (train/stall.py Beat) first: `jzk status` and the
        # restart rules read both kinds.
        return {
            "rank": self.rank,
            "host": self.host,
            "pid": self.pid,
            "job_id": None,
            "step": 0,
            "total_steps": 0,
            "phase": DONE_PHASE if self.finished else SCRIPT_PHASE,
            "progress_time": self.output_time,
            "wall_time": self.wall_time,
            "token": self.token,
            "interval_s": self.interval_s,
            "last_line": self.last_line,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ScriptBeat | None:
        """None for a beat of another kind (the toolkit loop's, a session's)."""
        if data.get("phase") not in (SCRIPT_PHASE, DONE_PHASE) or "last_line" not in data:
            return None
        return cls(
            rank=int(data["rank"]),
            host=str(data["host"]),
            pid=int(data["pid"]),
            token=str(data.get("token", "")),
            output_time=float(data["progress_time"]),
            last_line=str(data.get("last_line", "")),
            wall_time=float(data["wall_time"]),
            interval_s=float(data.get("interval_s", 2.0)),
            finished=data.get("phase") == DONE_PHASE,
        )

    def frozen(self, now: float) -> bool:
        return now - self.wall_time > FROZEN_BEATS * self.interval_s + 1.0


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
            else f"its last line {_age(now - b.output_time)} ago: {b.last_line[-120:]!r}"
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
    stall_seconds: float,
    token: str,
    signalled_at: float | None = None,
    after_signal_s: float = 0.0,
) -> ScriptHang | None:
    """The attempt `token` is hung: no beat of it shows a line and no file of the script
    changed for stall_seconds (0: never). Before any beat arrives, nothing is judged.

    After the stop signal (`signalled_at`: the time-limit warning or a preemption
    notice), the script has `after_signal_s` of quiet at most: it was asked to save and
    end before the limit, and a handler stuck in a collective would otherwise hold the
    job until Slurm kills it at the limit, unrequeued."""
    current = tuple(b for b in beats if b.token == token and not b.finished)
    if stall_seconds <= 0 or not current:
        return None
    signs = [start, *(b.output_time for b in current)]
    if newest_write is not None:
        signs.append(newest_write)
    limit, rule = stall_seconds, f"watchdog.stall_seconds={stall_seconds:g}"
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


def hang_folder_name(start: float) -> str:
    """The folder of one attempt's hang dumps: every task of the step names it alike
    from the step's start (JZK_STEP_START), and so does the restart step after it."""
    return f"hang-{int(start)}"


def looks_like_checkpoint(name: str) -> bool:
    lowered = name.lower()
    return lowered.endswith(CHECKPOINT_SUFFIXES) or any(w in lowered for w in CHECKPOINT_WORDS)


def _age(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h"
