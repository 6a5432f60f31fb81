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

from jeanzay_kit import run_layout as layout
from jeanzay_kit.errors import JzkError
from jeanzay_kit.launch.manifest import MANIFEST, read_manifest
from jeanzay_kit.runtime.metrics import METRICS_FILE as METRICS
from jeanzay_kit.runtime.metrics import read_records


@dataclass(frozen=True)
class RunFiles:
    run_dir: Path
    overrides: tuple[str, ...]
    records: list[dict[str, Any]]


def hydra_overrides(run_dir: Path) -> tuple[str, ...]:
    """The overrides Hydra recorded for a run (task overrides), or none."""
    path = run_dir / layout.HYDRA / "overrides.yaml"
    if not path.is_file():
        return ()
    from omegaconf import OmegaConf

    loaded = OmegaConf.to_container(OmegaConf.load(path))
    return tuple(str(o) for o in loaded) if isinstance(loaded, list) else ()


def find_runs(directory: Path) -> list[RunFiles]:
    if (directory / MANIFEST).is_file():
        by_dir: dict[str, tuple[str, ...]] = {}
        for record in read_manifest(directory / MANIFEST):
            # A resubmitted run appears once per job id: its run directory is the same.
            by_dir[str(record.get("run_dir", ""))] = tuple(record.get("overrides") or ())
        return [
            RunFiles(Path(d), overrides, read_records(Path(d) / METRICS))
            for d, overrides in by_dir.items()
            if d
        ]
    if (directory / METRICS).is_file():
        return [RunFiles(directory, hydra_overrides(directory), read_records(directory / METRICS))]
    subdirs = (
        sorted(
            (p for p in directory.iterdir() if (p / METRICS).is_file()),
            key=lambda p: (not p.name.isdigit(), int(p.name) if p.name.isdigit() else 0, p.name),
        )
        if directory.is_dir()
        else []
    )
    if subdirs:
        return [RunFiles(p, hydra_overrides(p), read_records(p / METRICS)) for p in subdirs]
    raise JzkError(
        f"{directory} has no {MANIFEST}, no {METRICS} and no run directories with one. "
        "HINT: give a run directory (outputs/<job.name>-<hash>) or a sweep directory "
        "(multirun/<job.name>)"
    )
