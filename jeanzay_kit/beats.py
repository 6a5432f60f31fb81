"""A rank's heartbeat record, `<run_dir>/heartbeat/rank-<N>.json`: what every rank of a
run writes (runtime/heartbeat.py), the watchdog judges (runtime/stall.py) and `jzk
status` reads (run_directory.RunDir.beats). Pure: the record's fields and its parsing.

It sits beside the run directory's room (the layout table names the folder, RunDir
reads it), so both sides of a job agree on it without importing each other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from jeanzay_kit.values import real, text, whole

FINISHED_PHASES = ("done",)  # a beat's phase once its rank has ended


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
