"""A study's folder as the core commands see it (`jzk status`, `jzk logs`, `jzk report`):
the names of its files and its trials' run directories. Imports no Optuna, so a plain
install (without the `tune` extra) tells a study's folder from a run directory, and reads
its trials' logs; opening the study itself needs Optuna (tune/study.py, tune/view.py)."""

from __future__ import annotations

from pathlib import Path

JOURNAL_FILE = "study.journal"
# With tune.storage (an RDB URL) the study's folder keeps where the study is, for `jzk
# status`, `jzk report` and `jzk logs` (the folder still holds the trials and the lock).
STORAGE_FILE = "storage.json"  # {"url": ..., "study_name": ...}
TASK_ATTR = "jzk_task"


def is_study_dir(path: Path) -> bool:
    return (path / JOURNAL_FILE).is_file() or (path / STORAGE_FILE).is_file()


def trial_dir(study_dir: Path, number: int) -> Path:
    """A trial's run directory: its own, whatever its values (two trials drawing the
    same values never share one)."""
    return study_dir / f"trial-{number}"
