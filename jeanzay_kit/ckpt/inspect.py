"""`jzk ckpt list|verify|digest RUN_DIR`: look at a run's checkpoints without a process group."""

from __future__ import annotations

import tempfile
from pathlib import Path

from jeanzay_kit.ckpt.store import CheckpointStore
from jeanzay_kit.errors import JzkError


class CheckpointNotFound(JzkError):
    exit_code = 1


def _store(run_dir: str | Path) -> CheckpointStore:
    path = Path(run_dir)
    if path.name != "checkpoints" and (path / "checkpoints").is_dir():
        path = path / "checkpoints"
    if not path.is_dir():
        raise CheckpointNotFound(f"no checkpoints folder in {run_dir}")
    return CheckpointStore(path)


def list_checkpoints(run_dir: str | Path) -> list[dict]:
    """One row per step folder: step, size, complete or not (manifest present)."""
    store = _store(run_dir)
    rows = []
    for entry in store.entries():
        row = {
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
            except Exception as err:  # noqa: BLE001 - shown to the user as the row's state
                row["complete"] = False
                row["error"] = str(err)
        rows.append(row)
    return rows


def verify(run_dir: str | Path) -> dict[str, list[str]]:
    """Problems of every complete checkpoint (manifest present): {name: [problems]}."""
    store = _store(run_dir)
    return {e.name: store.problems(e.step) for e in store.entries() if e.has_manifest}


def model_state(run_dir: str | Path, step: int | None = None) -> tuple[int, dict]:
    """The full model parameters of a checkpoint (the newest intact one by default)."""
    import torch
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    store = _store(run_dir)
    if step is None:
        step = store.newest_good(report=lambda _msg: None)
        if step is None:
            raise CheckpointNotFound(f"no complete, intact checkpoint in {store.root}")
    else:
        problems = store.problems(step)
        if problems:
            raise CheckpointNotFound(f"step-{step} cannot be used: " + "; ".join(problems))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "full.pt"
        # Gathers every rank's shards into one state dict, without a process group.
        dcp_to_torch_save(store.step_dir(step) / "dcp", out)
        state = torch.load(out, weights_only=True)
    return step, state["model"]


def digest(run_dir: str | Path, step: int | None = None) -> tuple[int, str]:
    from jeanzay_kit.train.digest import state_digest

    step, state = model_state(run_dir, step)
    return step, state_digest(state)
