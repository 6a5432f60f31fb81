"""The heartbeat records of a run directory's heartbeat/ folder: a rank's
`rank-<N>.json` (every rank of a run writes it, runtime/heartbeat.py; the watchdog judges
it, runtime/stall.py) and a script task's `task-<N>.json` (its wrapper writes it,
node/script_watch.py); `jzk status` reads both (run_directory.RunDir.beats,
script_beats). Pure: the records' fields, their parsing, when a beat is frozen.

It sits beside the run directory's room (the layout table names the folder, RunDir
reads it), so both sides of a job agree on it without importing each other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass

from jeanzay_kit.values import flag, real, text, whole

FINISHED_PHASES = ("done",)  # a beat's phase once its rank has ended
# A beat this many intervals old (plus a second of slack for a busy filesystem) means the
# rank's writer thread is not running: the process is stopped, dead or holds the GIL.
FROZEN_BEATS = 3
# Each script task's wrapper writes `<run_dir>/heartbeat/task-<N>.json`: not `rank-<N>.json`,
# which a session-API script under the same run directory writes (runtime/heartbeat.py).
SCRIPT_BEAT_PREFIX = "task-"


@dataclass(frozen=True)
class Beat:
    rank: int
    host: str
    pid: int
    job_id: str | None
    step: int
    total_steps: int
    phase: str  # start | data | forward_backward | optimizer | eval | checkpoint | done
    progress_time: float  # wall clock of the last change of step or phase
    wall_time: float  # wall clock of the write
    token: str  # the attempt: the same on every rank of one launch
    interval_s: float  # how often the rank writes its beat
    start_step: int | None = None  # the step this process started from (its first beat)

    @property
    def finished(self) -> bool:
        """The rank has ended (its last beat): not running, not stalled."""
        return self.phase in FINISHED_PHASES

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> Beat:
        """A beat file's JSON; KeyError or TypeError where it is damaged."""
        start, job = data.get("start_step"), data.get("job_id")
        return cls(
            rank=whole(data["rank"]),
            host=text(data["host"]),
            pid=whole(data["pid"]),
            job_id=None if job is None else text(job),
            step=whole(data["step"]),
            total_steps=whole(data["total_steps"]),
            phase=text(data["phase"]),
            progress_time=real(data["progress_time"]),
            wall_time=real(data["wall_time"]),
            token=text(data.get("token", "")),
            interval_s=real(data.get("interval_s", 2.0)),
            start_step=None if start is None else whole(start),
        )


@dataclass(frozen=True)
class ScriptBeat:
    """What a script task's wrapper saw of its command (node/script_watch_rules.py)."""

    rank: int
    host: str
    pid: int  # the command's process
    token: str  # the attempt: the same on every task of one job step
    output_time: float  # when the command last printed (the attempt's start before that)
    last_line: str  # its last line of output
    wall_time: float  # when the beat was written
    interval_s: float
    finished: bool = False  # the command has ended
    code: int | None = None  # its exit code once ended (negative: killed by that signal)
    at_exit: bool = False  # it died after its program had ended (ending_rules.died_at_exit)

    def to_json(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> ScriptBeat:
        """A beat file's JSON; KeyError or TypeError where it is damaged."""
        return cls(
            rank=whole(data["rank"]),
            host=text(data["host"]),
            pid=whole(data["pid"]),
            token=text(data["token"]),
            output_time=real(data["output_time"]),
            last_line=text(data["last_line"]),
            wall_time=real(data["wall_time"]),
            interval_s=real(data["interval_s"]),
            finished=flag(data["finished"]),
            code=None if data.get("code") is None else whole(data["code"]),
            at_exit=flag(data.get("at_exit", False)),
        )

    def frozen(self, now: float) -> bool:
        """Its wrapper writes no beat any more: the node is lost or the task stopped
        (the toolkit loop's rule, runtime/stall.py)."""
        return now - self.wall_time > FROZEN_BEATS * self.interval_s + 1.0
