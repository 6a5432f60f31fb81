"""Save and load training state across all ranks with torch.distributed.checkpoint (DCP).

Every mode goes through DCP: sharded FSDP parameters and pipeline stages are written by
the ranks that hold them, replicated DDP state once. A save is a collective:

1. every rank writes into `.tmp-step-N/`: DCP shards of model + optimizer (raw tensor
   bytes, checksummed and fsynced by the writer of ckpt/raw_storage.py), and its own
   `rank-<r>.pt` (RNG states); rank 0 adds `trainer.pt` (step, sample position, LR
   scheduler, grad scaler, metrics) and `config.json`;
2. barrier; rank 0 checksums every file, renames the folder to `step-N`, writes
   `manifest.json` last, applies retention; barrier.

With checkpoint.async=true, step 1's DCP part runs in the background
(ckpt/background_save.py). The parts, one job each: ckpt/rng.py and ckpt/trainer_state.py
(what besides the weights is saved), ckpt/commit.py (sealing and retention),
ckpt/resume.py (which checkpoint to resume from, and the config-compatibility rule),
ckpt/store.py and ckpt/layout.py (the folders and the manifest).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import time
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_state_dict,
    set_state_dict,
)

from jeanzay_kit import __version__
from jeanzay_kit.ckpt.background_save import BackgroundSave
from jeanzay_kit.ckpt.checksum import checksum_of
from jeanzay_kit.ckpt.commit import TrashEmptier, commit_checkpoint
from jeanzay_kit.ckpt.layout import FileRecord
from jeanzay_kit.ckpt.raw_storage import RawReader, RawWriter
from jeanzay_kit.ckpt.resume import check_compatible, choose_checkpoint
from jeanzay_kit.ckpt.rng import rng_state, set_rng_state
from jeanzay_kit.ckpt.store import CheckpointStore
from jeanzay_kit.ckpt.trainer_state import TrainerState
from jeanzay_kit.config.identity import resume_hash
from jeanzay_kit.durable_io import write_synced

# Optimizer state keyed per parameter name ("state.<fqn>.exp_avg", "param_groups.<fqn>.lr"):
# pipeline stages hold different parameters, and a nested "param_groups" list would have
# the same key on every rank, which DCP would save once as if it were replicated.
OPTIONS = StateDictOptions(flatten_optimizer_state_dict=True)

WRITER_THREADS = min(4, os.cpu_count() or 1)


def _save_bytes(data: bytes, path: Path) -> FileRecord:
    """Write a small file with fsync; its checksum comes from the bytes in hand."""
    write_synced(path, data)  # inside .tmp-step-N: the folder's rename seals it
    return FileRecord(len(data), checksum_of(data))


def _save_torch(obj: Any, path: Path) -> FileRecord:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return _save_bytes(buffer.getvalue(), path)


class Checkpointer:
    def __init__(
        self,
        run_dir: Path,
        module: nn.Module,
        optimizer: torch.optim.Optimizer,
        rank: int,
        world: Mapping[str, Any],
        config: Mapping[str, Any],
        device: torch.device,
        keep_last: int = 3,
        use_async: bool = False,
        log: Callable[[str], None] = print,
    ):
        self.store = CheckpointStore(run_dir / "checkpoints")
        self.module = module
        self.optimizer = optimizer
        self.rank = rank
        self.world = dict(world)
        self.config = config
        self.device = device
        self.keep_last = keep_last
        self.log = log if rank == 0 else (lambda _msg: None)
        self._trash = TrashEmptier(self.store)
        self._background = BackgroundSave(device) if use_async else None
        # How long the last save held up training: the save call, plus (async) the wait
        # in before_update() for the staging copy.
        self.last_blocking_s = 0.0

    # ---- saving --------------------------------------------------------------------------

    def save(self, step: int, trainer: TrainerState, force_sync: bool = False) -> None:
        """Collective: every rank calls it at the same step."""
        t0 = time.perf_counter()
        self._wait_save()  # the next save waits for the previous one
        tmp = self.store.tmp_dir(step)
        if self.rank == 0:
            if tmp.exists():
                shutil.rmtree(tmp)
            tmp.mkdir(parents=True)
        dist.barrier()
        model_sd, optim_sd = get_state_dict(self.module, self.optimizer, options=OPTIONS)
        state = {"model": model_sd, "optim": optim_sd}
        records = {
            f"rank-{self.rank}.pt": _save_torch(
                rng_state(self.device), tmp / f"rank-{self.rank}.pt"
            )
        }
        fields = {
            "world": self.world,
            "config_hash": resume_hash(self.config),
            "code_version": __version__,
            "sample_position": trainer.sample_position,
        }
        if self.rank == 0:
            records["trainer.pt"] = _save_torch(trainer.to_payload(), tmp / "trainer.pt")
            records["config.json"] = _save_bytes(
                json.dumps(self.config, indent=2, default=str).encode(), tmp / "config.json"
            )
        background = self._background is not None and not force_sync
        # In the background one writer thread is enough and leaves the cores to training
        # (measured in docs/performance.md, "Checkpoint costs").
        writer = RawWriter(tmp / "dcp", 1 if background else WRITER_THREADS)

        def commit(group: Any) -> None:
            commit_checkpoint(
                self.store,
                step,
                self.rank,
                fields,
                records,
                writer.fs.records,
                group,
                self.keep_last,
                self._trash,
                self.log,
            )

        if background:
            assert self._background is not None
            self._background.start(state, writer, commit)
        else:
            dcp.save(state, storage_writer=writer)
            commit(None)
        self.last_blocking_s = time.perf_counter() - t0

    def before_update(self) -> None:
        """Call before anything changes the weights or the optimizer state (the optimizer
        step): an asynchronous save may still be copying them."""
        if self._background is not None:
            self._background.before_update()
            self.last_blocking_s += self._background.blocked_s

    def wait(self) -> None:
        """Finish an asynchronous save and the deletion of dropped checkpoints."""
        try:
            self._wait_save()
        finally:
            self._trash.join()

    def close(self) -> None:
        """After the last save: finish it and free the staging buffers."""
        try:
            self.wait()
        finally:
            if self._background is not None:
                self._background.close()

    def _wait_save(self) -> None:
        if self._background is not None:
            self._background.wait()

    # ---- loading -------------------------------------------------------------------------

    def find(self, resume: str) -> Path | None:
        """The checkpoint folder to resume from (rank 0 decides, everyone agrees)."""
        choice: list[str | None] = [None]
        if self.rank == 0:
            choice[0] = choose_checkpoint(self.store, resume, self.log)
        dist.broadcast_object_list(choice, src=0)
        return Path(choice[0]) if choice[0] else None

    def check_compatible(self, folder: Path, allow_change: bool) -> None:
        check_compatible(folder, self.world, self.config, allow_change, self.log)

    def load(self, folder: Path) -> TrainerState:
        model_sd, optim_sd = get_state_dict(self.module, self.optimizer, options=OPTIONS)
        state = {"model": model_sd, "optim": optim_sd}
        # Each rank reads what it holds straight from the checkpoint's metadata: DCP's
        # planning round (gathering every rank's plan on rank 0 and sending it back) adds
        # nothing to a load (docs/performance.md, "Checkpoint costs"). no_dist warns that
        # torch.distributed looks unused: it is on purpose.
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="torch.distributed is disabled")
            dcp.load(state, storage_reader=RawReader(folder / "dcp"), no_dist=True)
        set_state_dict(
            self.module,
            self.optimizer,
            model_state_dict=state["model"],
            optim_state_dict=state["optim"],
            options=OPTIONS,
        )
        rng_file = folder / f"rank-{self.rank}.pt"
        set_rng_state(torch.load(rng_file, weights_only=True), self.device)
        payload = torch.load(folder / "trainer.pt", weights_only=True)
        return TrainerState.from_payload(payload)
