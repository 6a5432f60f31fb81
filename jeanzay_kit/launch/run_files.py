"""What a run directory says about its run, for `jzk status`: the last metrics record,
the heartbeats, the restarts. Reads files only (no Slurm), so it works for local runs and
where accounting is missing."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from jeanzay_kit.node.restarts import restart_history
from jeanzay_kit.train.heartbeat import HEARTBEAT_DIR, read_beats
from jeanzay_kit.train.stall import FINISHED_PHASES


@dataclass(frozen=True)
class RunProgress:
    step: int | None = None
    total: int | None = None
    loss: float | None = None
    eta_s: float | None = None
    oldest_beat_s: float | None = None  # age of the stalest heartbeat of a running rank
    restarts: int = 0


def last_metrics(run_dir: Path) -> dict | None:
    path = run_dir / "metrics.jsonl"
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            return json.loads(line)
        except ValueError:
            continue  # a line being written
    return None


def run_progress(run_dir: Path, now: float | None = None) -> RunProgress:
    now = time.time() if now is None else now
    record = last_metrics(run_dir) or {}
    beats = read_beats(run_dir / HEARTBEAT_DIR)
    running = [b for b in beats if b.phase not in FINISHED_PHASES]
    total = max((b.total_steps for b in beats), default=None)
    step = max((b.step for b in running), default=record.get("step"))
    return RunProgress(
        step=step,
        total=total,
        loss=record.get("loss"),
        eta_s=record.get("eta_s"),
        oldest_beat_s=max((now - b.wall_time for b in running), default=None),
        restarts=len(restart_history(run_dir)),  # a finished run's too
    )
