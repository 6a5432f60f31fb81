"""What a run directory says about its run, for `jzk status`: the last metrics record,
the heartbeats, the restarts. Reads files only (no Slurm), so it works for local runs and
where accounting is missing."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

from jeanzay_kit.ending.ending_rules import Verdict
from jeanzay_kit.launch.ledger import RunRecord, run_record
from jeanzay_kit.launch.status import RunProgress
from jeanzay_kit.rundir.run_directory import RunDir


def last_metrics(run_dir: RunDir) -> dict | None:
    records = run_dir.metric_records()
    return records[-1] if records else None


def last_evaluation(run_dir: RunDir) -> dict[str, float] | None:
    """The eval values of the newest record that has them (evaluations are sparser than
    logged steps)."""
    for record in reversed(run_dir.metric_records()):
        if "eval_loss" in record:
            return {
                k: float(v)
                for k, v in record.items()
                if k.startswith("eval_") and isinstance(v, (int, float))
            }
    return None


def ledger_record(run_dir: RunDir, kept_step: int | None) -> RunRecord | None:
    """The run's own record for its ledger (launch/ledger.py): its starts, the step time
    and saves' blocking of its kept metrics, the step its newest attempt reached; None
    for a run that recorded no start (a script task, or a run from before starts.jsonl)."""
    run = run_dir
    starts = run.start_records()
    if not starts:
        return None
    reached = max((b.step for b in run.beats()), default=None)
    return run_record(starts, run.metric_records(), kept_step, reached)


def run_progress(
    run_dir: RunDir, now: float | None = None, job_id: str | None = None, log: Path | None = None
) -> RunProgress:
    """job_id: count the restarts and starts of that Slurm job only, and show the last
    line that job printed (a run directory resubmitted as several jobs shows each its
    own); None: all of them, the last line a run on this machine printed (train.log).
    log: the job's Slurm log (its manifest record), read when no beat of the job is left."""
    now = time.time() if now is None else now
    record = last_metrics(run_dir) or {}
    beats = run_dir.beats()
    running = [b for b in beats if not b.finished]
    total = max((b.total_steps for b in beats), default=None)
    step = max((b.step for b in running), default=record.get("step"))
    script, script_beat_age = _script_progress(run_dir, now, job_id, log)
    ages = [now - b.wall_time for b in running]
    if script_beat_age is not None:  # a script task's wrappers beat too
        ages.append(script_beat_age)
    history = run_dir.restart_history()  # a finished run's too
    restarts = len([r for r in history if job_id is None or r.get("job_id") == job_id])
    if script.attempts:
        restarts = max(restarts, script.attempts - 1)
    verdict, storm = _ending(run_dir, job_id, restarts)
    return replace(
        script,
        verdict=verdict.kind if verdict else None,
        evidence=verdict.line() if verdict else None,
        fix=verdict.fix if verdict else None,
        storm=storm,
        step=step,
        total=total,
        loss=record.get("loss"),
        eta_s=record.get("eta_s"),
        oldest_beat_s=max(ages, default=None),
        restarts=restarts,
        data_wait_share=record.get("data_wait_share"),
        evaluation=last_evaluation(run_dir),
    )


def _ending(run_dir: RunDir, job_id: str | None, restarts: int) -> tuple[Verdict | None, bool]:
    """The newest end of an attempt (of that Slurm job when job_id is given) and whether
    the run's restarts are a storm (ending/endings.py)."""
    from jeanzay_kit.ending.ending_rules import storm, verdict_of

    endings = run_dir.ending_records()
    endings = [e for e in endings if job_id is None or e.get("job_id") == job_id]
    newest = verdict_of(endings[-1]) if endings else None
    return newest, storm(endings, restarts)


def _script_progress(
    run_dir: RunDir, now: float, job_id: str | None = None, log: Path | None = None
) -> tuple[RunProgress, float | None]:
    """A script task's attempts, newest output line and newest checkpoint-looking file
    (node/script_watch.py writes the lines in its beats), and the age of the stalest
    beat of a running task's wrapper; nothing of these for the toolkit's loop.

    The beats are one file per task, which the next job of the run directory replaces:
    a job's line comes from its own beats (their token starts with its SLURM_JOB_ID,
    node/script_task.py), else from its own log; a run on this machine writes no beat,
    its lines are in train.log."""
    run = run_dir
    if not run.is_script_run():
        return RunProgress(), None
    attempts = [a for a in run.attempt_records() if job_id is None or _same_job(a, job_id)]
    beats = run.script_beats()
    if job_id is not None:
        tokens = tuple(f"{a['job_id']}-" for a in attempts if a.get("job_id"))
        beats = [b for b in beats if b.token.startswith(tokens)] if tokens else []
    newest = max((b for b in beats if b.last_line), key=lambda b: b.output_time, default=None)
    if newest is not None:
        last: tuple[str, float] | None = (newest.last_line, newest.output_time)
    elif job_id is None:
        last = last_line_of(run.train_log)
    else:
        last = _last_line_of_job_log(log)
    found = run.newest_script_checkpoint()
    running = [b for b in beats if not b.finished]
    return RunProgress(
        attempts=len(attempts),
        last_line=last[0] if last else None,
        last_line_age_s=now - last[1] if last else None,
        checkpoint_file=str(found[0].relative_to(run_dir.root)) if found else None,
        checkpoint_age_s=now - found[1] if found else None,
    ), max((now - b.wall_time for b in running), default=None)


def last_line_of(path: Path, tail: int = 65536) -> tuple[str, float] | None:
    """The last non-empty line of a log file (read from its last `tail` bytes) and the
    file's mtime; None when it has none or cannot be read."""
    try:
        with path.open("rb") as f:
            size = f.seek(0, 2)
            f.seek(max(0, size - tail))
            text = f.read().decode("utf-8", "replace")
            mtime = path.stat().st_mtime
    except OSError:
        return None
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return (lines[-1][-500:], mtime) if lines else None


def _last_line_of_job_log(log: Path | None) -> tuple[str, float] | None:
    """The newer of the job's stdout and stderr logs' last lines."""
    if log is None:
        return None
    found = [last_line_of(path) for path in (log, log.with_suffix(".err"))]
    return max((f for f in found if f), key=lambda f: f[1], default=None)


def _same_job(attempt: dict, job_id: str) -> bool:
    """An attempt's record (SLURM_JOB_ID, and the array form where there is one) is of
    the manifest's job `job_id`."""
    return job_id in (attempt.get("job_id"), attempt.get("array_id"))
