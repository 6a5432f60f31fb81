"""The restart budget of a run: `<run_dir>/restarts.json`, one record per restart.

After a hang (EXIT_HUNG) or a crash, a run with restarts left goes again from its newest
complete checkpoint: cluster=local restarts its workers (launch/local.py). The record
lives in the run directory, so a count survives the process that made it, and a run
that keeps failing stops after preemption.max_restarts restarts instead of looping. A
run that finishes clears it.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from jeanzay_kit.durable_io import write_durably

RESTARTS_FILE = "restarts.json"


def read_restarts(run_dir: Path) -> list[dict[str, Any]]:
    try:
        data = json.loads((run_dir / RESTARTS_FILE).read_text())
        return list(data.get("restarts", []))
    except (OSError, ValueError, AttributeError):
        return []


def record_restart(run_dir: Path, reason: str) -> int:
    """Add one restart; returns how many the run has had, this one included."""
    history = read_restarts(run_dir)
    history.append({"reason": reason, "time": time.time()})
    run_dir.mkdir(parents=True, exist_ok=True)
    write_durably(run_dir / RESTARTS_FILE, json.dumps({"restarts": history}, indent=1).encode())
    return len(history)


def clear_restarts(run_dir: Path) -> None:
    (run_dir / RESTARTS_FILE).unlink(missing_ok=True)
