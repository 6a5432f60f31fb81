"""How a local run ended, for `jzk status`: `<run_dir>/outcome.json`. Edge (one file).

A Slurm job's end is in Slurm's accounting; a run on this machine has no scheduler, and a
script task writes neither heartbeats nor model_final.pt. `jzk train` records the end of
each local run here (removed when a run starts, so a run in progress never shows the end
of the one before).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager

from jeanzay_kit.durable_io import write_durably
from jeanzay_kit.ending.codes import Exit
from jeanzay_kit.rundir.run_directory import RunDir


def state_of(exit_code: int) -> str:
    """Slurm's words for how a run ended: COMPLETED, STOPPED (run again to go on), FAILED."""
    if exit_code == 0:
        return "COMPLETED"
    return "STOPPED" if exit_code == Exit.STOPPED else "FAILED"


def clear_outcome(run_dir: RunDir) -> None:
    run_dir.outcome.unlink(missing_ok=True)


def record_outcome(run_dir: RunDir, exit_code: int, signum: int = 0) -> None:
    """signum: the signal a process of the run died of (0: none), e.g. a script's
    SIGUSR1 it does not handle, which stops the run (exit 3) but is what happened."""
    record = {
        "state": state_of(exit_code),
        "exit_code": exit_code,
        "signal": signum or None,
        "ended_at": time.time(),
    }
    write_durably(run_dir.outcome, (json.dumps(record) + "\n").encode())


def read_signal(run_dir: RunDir) -> int:
    """The signal a process of the last local run died of (0: none, or not recorded)."""
    try:
        record = json.loads(run_dir.outcome.read_text())
    except (OSError, ValueError):
        return 0
    signum = record.get("signal") if isinstance(record, dict) else None
    return signum if isinstance(signum, int) and signum > 0 else 0


def read_outcome(run_dir: RunDir) -> str | None:
    """The recorded state of the last local run, or None (running, or never recorded)."""
    try:
        record = json.loads(run_dir.outcome.read_text())
    except (OSError, ValueError):
        return None
    state = record.get("state") if isinstance(record, dict) else None
    return state if isinstance(state, str) else None


class Outcome:
    code = 1  # until the launcher returns: an exception is a failure
    signal = 0  # the signal a process of the run died of (a script's launcher sets it)


@contextmanager
def recorded_outcome(run_dir: RunDir) -> Iterator[Outcome]:
    """A local run's end, recorded whatever happens in the block: the earlier run's
    removed first, so a run in progress never shows it."""
    run_dir.root.mkdir(parents=True, exist_ok=True)
    clear_outcome(run_dir)
    outcome = Outcome()
    try:
        yield outcome
    except SystemExit as done:  # one worker trains in this process, and exits 3 on a stop
        outcome.code = done.code if isinstance(done.code, int) else 1
        raise
    finally:
        record_outcome(run_dir, outcome.code, outcome.signal)
