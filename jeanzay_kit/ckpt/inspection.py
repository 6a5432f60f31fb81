"""`jzk ckpt list|verify|digest RUN_DIR`: look at a run's checkpoints without a process group."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from jeanzay_kit.ckpt.layout import best_step
from jeanzay_kit.ckpt.store import CheckpointStore
from jeanzay_kit.errors import CheckpointNotFound
from jeanzay_kit.rundir.run_directory import RunDir
from jeanzay_kit.values import as_node


def _store(run_dir: str | Path) -> CheckpointStore:
    path = Path(run_dir)  # a run directory, or its checkpoints folder itself
    inside = RunDir(path).checkpoints
    if path.name != inside.name and inside.is_dir():
        path = inside
    if not path.is_dir():
        raise CheckpointNotFound(f"no checkpoints folder in {run_dir}")
    return CheckpointStore(path)


def list_checkpoints(run_dir: str | Path) -> list[dict]:
    """One row per step folder: step, size, complete or not (manifest present), its
    evaluation, and `best` on the one checkpoint.keep_best keeps."""
    store = _store(run_dir)
    rows: list[dict[str, Any]] = []
    keep_best: Mapping[str, object] = {}
    for entry in store.entries():
        row: dict[str, Any] = {
            "step": entry.step,
            "name": entry.name,
            "complete": entry.has_manifest,
            "bytes": None,
            "sample_position": None,
        }
        if entry.has_manifest:
            try:
                manifest = store.manifest(entry.step)
                row["bytes"] = manifest.total_bytes
                row["sample_position"] = manifest.sample_position
                row["eval"] = dict(as_node(manifest.extra.get("eval")))
                keep_best = as_node(manifest.extra.get("keep_best")) or keep_best
            except Exception as err:  # noqa: BLE001 - shown to the user as the row's state
                row["complete"] = False
                row["error"] = str(err)
        rows.append(row)
    if keep_best:
        key, mode = str(keep_best["key"]), str(keep_best["mode"])
        evaluated = {r["step"]: r["eval"] for r in rows if r["complete"] and r.get("eval")}
        best = best_step(evaluated, key, mode)
        for row in rows:
            if row["step"] == best:
                row["best"] = f"best {key}={row['eval'][key]:.4g} ({mode})"
    return rows


def verify(run_dir: str | Path) -> dict[str, list[str]]:
    """Problems of every complete checkpoint (manifest present): {name: [problems]}."""
    store = _store(run_dir)
    return {e.name: store.problems(e.step) for e in store.entries() if e.has_manifest}


def model_state(run_dir: str | Path, step: int | None = None) -> tuple[int, dict]:
    """The full model parameters of a checkpoint (the newest intact one by default)."""
    store = _store(run_dir)
    if step is None:
        step = store.newest_good(report=lambda _msg: None)
        if step is None:
            raise CheckpointNotFound(f"no complete, intact checkpoint in {store.root}")
    else:
        problems = store.problems(step)
        if problems:
            raise CheckpointNotFound(f"step-{step} cannot be used: " + "; ".join(problems))
    return step, load_model_params(store.step_dir(step) / "dcp")


def load_model_params(dcp_dir: Path) -> dict:
    """Every model parameter of a DCP checkpoint, whole (the shards of every rank joined),
    without a process group. The state dict to fill is built from the checkpoint's own
    metadata: names, shapes and dtypes of the `model.*` entries."""
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    from jeanzay_kit.ckpt.raw_storage import RawReader

    reader = RawReader(dcp_dir)
    metadata = reader.read_metadata()
    model = {
        fqn.removeprefix("model."): torch.empty(md.size, dtype=md.properties.dtype)
        for fqn, md in metadata.state_dict_metadata.items()
        if fqn.startswith("model.") and isinstance(md, TensorStorageMetadata)
    }
    with warnings.catch_warnings():  # no_dist is on purpose: no process group here
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.load({"model": model}, storage_reader=reader, no_dist=True)
    return model


def digest(run_dir: str | Path, step: int | None = None) -> tuple[int, str]:
    from jeanzay_kit.ckpt.digest import state_digest

    step, state = model_state(run_dir, step)
    return step, state_digest(state)
