"""The restart budget of a run: `<run_dir>/restarts.json`, one record per restart.

After a hang (Exit.HUNG) or a crash, a run with restarts left goes again from its newest
complete checkpoint: cluster=local restarts its workers (node/local.py). The record
lives in the run directory, so a count survives the process that made it, and a run
that keeps failing stops after preemption.max_restarts restarts instead of looping. A
run that finishes clears it.
"""

from __future__ import annotations

import json
import time
from typing import Any

from jeanzay_kit.durable_io import write_durably
from jeanzay_kit.rundir.run_directory import RunDir


def _read(run_dir: RunDir) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(restarts that count against the budget now, those of earlier finished runs)."""
    return run_dir.restart_records()


def _write(run_dir: RunDir, restarts: list, history: list) -> None:
    run_dir.root.mkdir(parents=True, exist_ok=True)
    body = {"restarts": restarts, "history": history}
    write_durably(run_dir.restarts, json.dumps(body, indent=1).encode())


def read_restarts(run_dir: RunDir) -> list[dict[str, Any]]:
    """The restarts that count against preemption.max_restarts now."""
    return _read(run_dir)[0]


def record_restart(run_dir: RunDir, reason: str, job_id: str | None = None) -> int:
    """Add one restart (of Slurm job `job_id`, the manifest's form: "123" or an array
    task's "123_4"; None: a local run); returns how many the run has had, this one
    included."""
    current, history = _read(run_dir)
    current.append({"reason": reason, "time": time.time(), "job_id": job_id})
    _write(run_dir, current, history)
    return len(current)


def clear_restarts(run_dir: RunDir) -> None:
    """The run finished: its budget starts afresh; what happened moves to the history."""
    current, history = _read(run_dir)
    if current:
        _write(run_dir, [], history + current)
