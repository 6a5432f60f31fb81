"""What a run directory says about its run, for `jzk status`: the last metrics record,
the heartbeats, the restarts. Reads files only (no Slurm), so it works for local runs and
where accounting is missing."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

from jeanzay_kit import run_layout as layout
from jeanzay_kit.launch.status import RunProgress
from jeanzay_kit.node.restarts import restart_history
from jeanzay_kit.runtime.heartbeat import HEARTBEAT_DIR, read_beats
from jeanzay_kit.runtime.stall import FINISHED_PHASES


def _records_newest_first(run_dir: Path):  # noqa: ANN202 - a generator of dicts
    try:
        lines = (run_dir / layout.METRICS).read_text().splitlines()
    except OSError:
        return
    for line in reversed(lines):
        try:
            yield json.loads(line)
        except ValueError:
            continue  # a line being written


def last_metrics(run_dir: Path) -> dict | None:
    return next(_records_newest_first(run_dir), None)


def last_evaluation(run_dir: Path) -> dict[str, float] | None:
    """The eval values of the newest record that has them (evaluations are sparser than
    logged steps)."""
    for record in _records_newest_first(run_dir):
        if "eval_loss" in record:
            return {
                k: float(v)
                for k, v in record.items()
                if k.startswith("eval_") and isinstance(v, (int, float))
            }
    return None


def run_progress(run_dir: Path, now: float | None = None, job_id: str | None = None) -> RunProgress:
    """job_id: count the restarts and starts of that Slurm job only (a run directory
    resubmitted as several jobs shows each its own); None: all of them."""
    now = time.time() if now is None else now
    record = last_metrics(run_dir) or {}
    beats = read_beats(run_dir / HEARTBEAT_DIR)
    running = [b for b in beats if b.phase not in FINISHED_PHASES]
    total = max((b.total_steps for b in beats), default=None)
    step = max((b.step for b in running), default=record.get("step"))
    script, script_beat_age = _script_progress(run_dir, now, job_id)
    ages = [now - b.wall_time for b in running]
    if script_beat_age is not None:  # a script task's wrappers beat too
        ages.append(script_beat_age)
    history = restart_history(run_dir)  # a finished run's too
    restarts = len([r for r in history if job_id is None or r.get("job_id") == job_id])
    if script.attempts:
        restarts = max(restarts, script.attempts - 1)
    return replace(
        script,
        step=step,
        total=total,
        loss=record.get("loss"),
        eta_s=record.get("eta_s"),
        oldest_beat_s=max(ages, default=None),
        restarts=restarts,
        data_wait_share=record.get("data_wait_share"),
        evaluation=last_evaluation(run_dir),
    )


def _script_progress(
    run_dir: Path, now: float, job_id: str | None = None
) -> tuple[RunProgress, float | None]:
    """A script task's attempts, newest output line and newest checkpoint-looking file
    (node/script_watch.py writes the lines in its beats), and the age of the stalest
    beat of a running task's wrapper; nothing of these for the toolkit's loop."""
    from jeanzay_kit.node.script_files import newest_checkpoint, read_attempts, read_script_beats
    from jeanzay_kit.node.script_rules import COMMAND_FILE

    if not (run_dir / COMMAND_FILE).is_file():
        return RunProgress(), None
    beats = read_script_beats(run_dir)
    newest = max((b for b in beats if b.last_line), key=lambda b: b.output_time, default=None)
    found = newest_checkpoint(run_dir)
    running = [b for b in beats if not b.finished]
    return RunProgress(
        attempts=len([a for a in read_attempts(run_dir) if job_id is None or _same_job(a, job_id)]),
        last_line=newest.last_line if newest else None,
        last_line_age_s=now - newest.output_time if newest else None,
        checkpoint_file=str(found[0].relative_to(run_dir)) if found else None,
        checkpoint_age_s=now - found[1] if found else None,
    ), max((now - b.wall_time for b in running), default=None)


def _same_job(attempt: dict, job_id: str) -> bool:
    """An attempt's record (SLURM_JOB_ID, and the array form where there is one) is of
    the manifest's job `job_id`."""
    return job_id in (attempt.get("job_id"), attempt.get("array_id"))
