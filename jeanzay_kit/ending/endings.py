"""The run's record of how each attempt ended: `<run_dir>/endings.jsonl`. Edge (files).

One line per end of an attempt, written by whoever saw it end (the local launcher,
node/local.py; the batch script's step after srun, node/restart_job.py): the class and
its one line of evidence (ending/ending_rules.py), the step reached, the nodes, the newest
complete checkpoint then. `jzk status` and `jzk report` read the newest; the next
failure is compared with it (a repeat ends the run instead of a restart).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any

from jeanzay_kit.ending.ending_rules import (
    Decision,
    Verdict,
    attempt_part,
    classify,
    decide,
    verdict_of,
)
from jeanzay_kit.rundir.run_directory import RunDir

LOG_TAIL_BYTES = 256 * 1024  # an attempt's end is near the end of the log


def log_tail(path: Path) -> str:
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - LOG_TAIL_BYTES))
            return handle.read().decode(errors="replace")
    except OSError:
        return ""


def attempt_log(run_dir: RunDir) -> str:
    """The newest attempt's lines of train.log, labels removed."""
    from jeanzay_kit.slurm.sbatch import START_MARK

    return attempt_part(log_tail(run_dir.train_log), START_MARK)


def attempt_beats(run_dir: RunDir, since: float | None) -> tuple[int | None, list[str]]:
    """The step the attempt started at `since` reached (its ranks' newest beats), and
    the hosts of its ranks."""
    beats = [b for b in run_dir.beats() if since is None or b.wall_time >= since]
    step = max((b.step for b in beats), default=None)
    return step, sorted({b.host for b in beats})


def newest_checkpoint(run_dir: RunDir) -> int | None:
    from jeanzay_kit.ckpt.store import CheckpointStore

    root = run_dir.checkpoints
    if not root.is_dir():
        return None
    steps = [e.step for e in CheckpointStore(root).entries() if e.has_manifest]
    return max(steps, default=None)


def classify_attempt(
    run_dir: RunDir,
    exit_code: int | None,
    since: float | None,
    *,
    signal_name: str | None = None,
    slurm_state: str = "",
    extra_log: str = "",
) -> Verdict:
    """The end of the attempt started at `since`, from train.log (and `extra_log`: the
    job's own Slurm log, where slurmstepd writes) and its heartbeats."""
    from jeanzay_kit.slurm.sbatch import START_MARK

    step, _ = attempt_beats(run_dir, since)
    log = attempt_log(run_dir)
    if extra_log:  # the newest attempt's part of it (the batch script marks each start)
        log += "\n" + attempt_part(extra_log, START_MARK)
    return classify(
        exit_code=exit_code,
        log=log,
        signal_name=signal_name,
        slurm_state=slurm_state,
        step=step,
    )


def read_endings(run_dir: RunDir) -> list[dict[str, Any]]:
    """How each attempt ended, oldest first (endings.jsonl, one JSON object a line)."""
    return run_dir.ending_records()


def newest_ending(run_dir: RunDir) -> Verdict | None:
    endings = read_endings(run_dir)
    return verdict_of(endings[-1]) if endings else None


def record_ending(
    run_dir: RunDir,
    verdict: Verdict,
    *,
    job_id: str | None = None,
    since: float | None = None,
    retried: bool | None = None,
    nodes: list[str] | None = None,
) -> None:
    """Append one end of an attempt (one write on a file opened for appending). nodes:
    the attempt's nodes when known without heartbeats (the health gate's, before any)."""
    checkpoint = newest_checkpoint(run_dir)
    hosts = nodes if nodes is not None else attempt_beats(run_dir, since)[1]
    record = {
        **verdict.record(),
        "job_id": job_id,
        "nodes": hosts,
        "checkpoint": checkpoint,
        "retried": retried,
        "time": time.time(),
    }
    run_dir.root.mkdir(parents=True, exist_ok=True)
    fd = os.open(run_dir.endings, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(record) + "\n").encode())
    finally:
        os.close(fd)


def record_local_end(run_dir: RunDir, code: int, signum: int, since: float) -> None:
    """A local run of the user's own script (`jzk train job.entry=script.py`): its end,
    classified from its code, the signal a process died of and its train.log, as a Slurm
    job's are (a failed attempt is not restarted here: retried false)."""
    import signal

    name = signal.Signals(signum).name if signum > 0 else None
    with contextlib.suppress(OSError):  # the record never fails the run
        verdict = classify_attempt(run_dir, code, since, signal_name=name)
        record_ending(run_dir, verdict, since=since, retried=False)


def judge(run_dir: RunDir, verdict: Verdict) -> Decision:
    """Whether restarting after `verdict` can help, against the run's record: the end
    before it (when this attempt was a restart) and the checkpoints since."""
    from jeanzay_kit.ending.restarts import read_restarts

    restarted = bool(read_restarts(run_dir))
    endings = read_endings(run_dir) if restarted else []
    previous = verdict_of(endings[-1]) if endings else None
    before = endings[-1].get("checkpoint") if endings else None
    return decide(
        verdict,
        previous,
        new_checkpoint=newest_checkpoint(run_dir) != before,
        restarted_before=restarted,
    )


def verdict_line(verdict: Verdict, decision: Decision) -> str:
    """`data error at step 4: ValueError: ...; not restarted: the attempt before failed
    the same way at the same step. HINT: ...`"""
    return f"{verdict.line()}; not restarted: {decision.why}. HINT: {verdict.fix}"
