"""Which runs a directory given to `jzk report` holds, and their metrics. Reads files only.

Three shapes, tried in order:
- a sweep or submitted run: `manifest.jsonl` lists each run's run_dir and overrides
  (the jeanzay launcher, `jzk submit`);
- a run directory: its own `metrics.jsonl` (`python train.py`, a requeued job);
- a local Hydra sweep (`python train.py -m hydra/launcher=basic ...`): numbered
  sub-directories, each a run directory with Hydra's `.hydra/overrides.yaml`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jeanzay_kit.errors import JzkError
from jeanzay_kit.launch.manifest import read_manifest
from jeanzay_kit.rundir.run_directory import RunDir


@dataclass(frozen=True)
class RunFiles:
    run_dir: RunDir
    overrides: tuple[str, ...]
    records: list[dict[str, Any]]


def find_runs(given: RunDir) -> list[RunFiles]:
    """The runs of `given`: a run directory, or a sweep's folder (its manifest, or the
    points inside)."""
    if given.manifest.is_file():
        by_dir: dict[str, tuple[str, ...]] = {}
        for record in read_manifest(given.manifest):
            # A resubmitted run appears once per job id: its run directory is the same.
            by_dir[str(record.get("run_dir", ""))] = tuple(record.get("overrides") or ())
        runs = [(RunDir(Path(d)), overrides) for d, overrides in by_dir.items() if d]
        return [RunFiles(run, overrides, run.metric_records()) for run, overrides in runs]
    # A script of its own logs no metrics.jsonl: its run is reported all the same (its
    # starts, its end, its GPU hours), without curves.
    if given.metrics.is_file() or given.looks_like_a_run():
        return [_run_files(given)]
    subdirs = sorted(
        (run for run in given.inside() if run.metrics.is_file() or run.looks_like_a_run()),
        key=lambda run: _point_order(run.root.name),
    )
    if subdirs:
        return [_run_files(run) for run in subdirs]
    raise JzkError(
        f"{given} has no {given.manifest.name}, no {given.metrics.name} and no run "
        "directories with one. "
        "HINT: give a run directory (outputs/<job.name>-<hash>) or a sweep directory "
        "(multirun/<job.name>)"
    )


def _point_order(name: str) -> tuple[bool, int, str]:
    """A sweep's numbered points first, in their order (2 before 10), then the rest."""
    return (not name.isdigit(), int(name) if name.isdigit() else 0, name)


def _run_files(run: RunDir) -> RunFiles:
    """A run directory Hydra ran: its own overrides, its metrics."""
    return RunFiles(run, run.hydra_overrides(), run.metric_records())
