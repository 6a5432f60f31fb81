"""Save and load training state across all ranks with torch.distributed.checkpoint (DCP).

Every mode goes through DCP: sharded FSDP parameters and pipeline stages are written by
the ranks that hold them, replicated DDP state once. A save is a collective:

1. every rank writes into `.tmp-step-N/`: DCP shards of model + optimizer (raw tensor
   bytes, checksummed and fsynced by the writer of ckpt/raw_storage.py), and its own
   `rank-<r>.pt` (RNG states); rank 0 adds `trainer.pt` (step, sample position, LR
   scheduler, grad scaler, metrics) and `config.json`;
2. barrier; rank 0 checksums every file, renames the folder to `step-N`, writes
   `manifest.json` last, applies retention; barrier.

With checkpoint.async=true, step 1's DCP part runs in the background: a staging thread
copies the state into CPU memory (a device-to-host copy on GPU) while the next step's
forward and backward run, and the loop calls `before_update()` before the optimizer changes
the weights, which waits for that copy if it is not done yet. Then another thread writes
the files and commits; the next save waits for that.
"""

from __future__ import annotations

import io
import json
import os
import random
import shutil
import threading
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.staging import AsyncStager, DefaultStager, StagingOptions
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_state_dict,
    set_state_dict,
)

from jeanzay_kit import __version__
from jeanzay_kit.ckpt.checksum import checksum_of
from jeanzay_kit.ckpt.layout import FileRecord, config_change_message, parse_step_dir
from jeanzay_kit.ckpt.raw_storage import RawReader, RawWriter
from jeanzay_kit.ckpt.staging import CpuCopyStager
from jeanzay_kit.ckpt.store import CheckpointStore, ResumeError
from jeanzay_kit.config.identity import RESUME_IGNORES, config_differences, resume_hash
from jeanzay_kit.durable_io import write_synced

# Optimizer state keyed per parameter name ("state.<fqn>.exp_avg", "param_groups.<fqn>.lr"):
# pipeline stages hold different parameters, and a nested "param_groups" list would have
# the same key on every rank, which DCP would save once as if it were replicated.
OPTIONS = StateDictOptions(flatten_optimizer_state_dict=True)


WRITER_THREADS = min(4, os.cpu_count() or 1)


@dataclass
class TrainerState:
    step: int
    sample_position: int
    scheduler: dict
    scaler: dict | None
    last_loss: float | None


def rng_state(device: torch.device) -> dict[str, Any]:
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state: dict[str, Any] = {
        "python": random.getstate(),
        # Plain lists, so the file loads with torch.load(weights_only=True).
        "numpy": [kind, keys.tolist(), int(pos), int(has_gauss), float(cached)],
        "torch": torch.get_rng_state(),
    }
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: Mapping[str, Any], device: torch.device) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


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
        self.use_async = use_async
        self.log = log if rank == 0 else (lambda _msg: None)
        self._pending: threading.Thread | None = None  # an asynchronous save in flight
        # Deleting checkpoints dropped by retention (rank 0), off the training thread.
        self._cleanup: threading.Thread | None = None
        self._async_error: BaseException | None = None
        # An asynchronous save runs its collectives in a background thread; on the training
        # process group they would interleave with the training's own and deadlock.
        self._async_group = dist.new_group(backend="gloo") if use_async else None
        # One stager for the whole run: it keeps its CPU buffers (pinned on a GPU machine)
        # from one save to the next, so later saves copy into memory already mapped, and
        # copies on its own thread. The buffers are reused only after the previous save's
        # files are written: save() waits for that first. On CPU, ckpt/staging.py copies
        # without holding the GIL (DCP's DefaultStager holds it, see there).
        self._stager: AsyncStager | None = None
        if use_async and device.type == "cuda":
            self._stager = DefaultStager(
                StagingOptions(
                    use_pinned_memory=True,
                    use_shared_memory=False,
                    use_async_staging=True,
                    use_non_blocking_copy=True,
                )
            )
        elif use_async:
            self._stager = CpuCopyStager()
        self._staging: Any = None  # the staging copy in flight (a Future)
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
            records["trainer.pt"] = _save_torch(
                {
                    "step": trainer.step,
                    "sample_position": trainer.sample_position,
                    "scheduler": trainer.scheduler,
                    "scaler": trainer.scaler,
                    "last_loss": trainer.last_loss,
                },
                tmp / "trainer.pt",
            )
            records["config.json"] = _save_bytes(
                json.dumps(self.config, indent=2, default=str).encode(), tmp / "config.json"
            )
        background = self._stager is not None and not force_sync
        # In the background one writer thread is enough, and leaves the cores to training
        # (bench/bench_checkpoint.py: the step after an async save on 2 cores slowed by
        # 410 ms with 4 threads, 300 ms with 1).
        writer = RawWriter(tmp / "dcp", 1 if background else WRITER_THREADS)
        if background:
            response = dcp.async_save(
                state,
                storage_writer=writer,
                process_group=self._async_group,
                async_stager=self._stager,
            )
            self._staging = response.staging_completion
            # Wait for the writes and seal the checkpoint off the training thread.
            self._pending = threading.Thread(
                target=self._finish_async,
                args=(step, response.upload_completion, fields, records, writer.fs),
                daemon=True,
            )
            self._pending.start()
        else:
            dcp.save(state, storage_writer=writer)
            self._commit(step, fields, None, records, writer.fs.records)
        self.last_blocking_s = time.perf_counter() - t0

    def before_update(self) -> None:
        """Call before anything changes the weights or the optimizer state (the optimizer
        step): an asynchronous save may still be copying them."""
        if self._staging is None:
            return
        t0 = time.perf_counter()
        try:
            self._staging.result()
        finally:
            self._staging = None
            self.last_blocking_s += time.perf_counter() - t0

    def _finish_async(self, step: int, upload: Any, fields: dict, records: dict, fs: Any) -> None:
        try:
            upload.result()
            self._commit(step, fields, self._async_group, records, fs.records)
        except BaseException as err:  # noqa: BLE001 - reported by wait() on the main thread
            self._async_error = err

    def _join_cleanup(self) -> None:
        if self._cleanup is not None:
            self._cleanup.join()
            self._cleanup = None

    def wait(self) -> None:
        """Finish an asynchronous save and the deletion of dropped checkpoints."""
        try:
            self._wait_save()
        finally:
            self._join_cleanup()

    def close(self) -> None:
        """After the last save: finish it and free the staging buffers."""
        try:
            self.wait()
        finally:
            if self._stager is not None:
                self._stager.close()
                self._stager = None

    def _wait_save(self) -> None:
        """Finish an asynchronous save (its writes and its commit); re-raise its error."""
        self.before_update()  # (the staging copy ends before the writes do)
        if self._pending is None:
            return
        self._pending.join()
        self._pending = None
        if self._async_error is not None:
            err, self._async_error = self._async_error, None
            raise err

    def _commit(
        self,
        step: int,
        fields: dict,
        group: Any,
        records: dict[str, FileRecord],
        dcp_records: dict[str, FileRecord],
    ) -> None:
        """Every rank's checksums go to rank 0, which seals the folder."""
        tmp = self.store.tmp_dir(step)
        mine = dict(records)
        for path, record in dcp_records.items():
            mine[str(Path(path).relative_to(tmp))] = record
        gathered: list[dict | None] = [None] * dist.get_world_size(group) if self.rank == 0 else []
        # The gather also waits until every rank's files are written and fsynced.
        dist.gather_object(
            mine,
            gathered if self.rank == 0 else None,
            dst=dist.get_global_rank(group, 0) if group is not None else 0,
            group=group,
        )
        if self.rank == 0:
            known: dict[str, FileRecord] = {}
            for part in gathered:
                known.update(part or {})
            manifest = self.store.commit(step, fields, known=known)
            removed = self.store.apply_retention(self.keep_last, newest_good=step, delete=False)
            if removed:
                self._join_cleanup()
                self._cleanup = threading.Thread(target=self.store.empty_trash, daemon=True)
                self._cleanup.start()
            note = f", removed {', '.join(removed)}" if removed else ""
            self.log(f"checkpoint step-{step} saved ({manifest.total_bytes / 1e6:.1f} MB){note}")
        dist.barrier(group=group)  # nobody goes on (or exits) before the checkpoint is sealed

    # ---- loading -------------------------------------------------------------------------

    def find(self, resume: str) -> Path | None:
        """The checkpoint folder to resume from (rank 0 decides, everyone agrees)."""
        choice: list[str | None] = [None]
        if self.rank == 0:
            choice[0] = self._choose(resume)
        dist.broadcast_object_list(choice, src=0)
        return Path(choice[0]) if choice[0] else None

    def _choose(self, resume: str) -> str | None:
        if resume == "never":
            return None
        if resume == "auto":
            removed = self.store.remove_stale()
            if removed:
                self.log(f"removed unfinished saves: {', '.join(sorted(removed))}")
            step = self.store.newest_good(report=self.log)
            return str(self.store.step_dir(step)) if step is not None else None
        path = Path(resume)
        store = CheckpointStore(path.parent)
        step = parse_step_dir(path.name)
        if step is None or not path.is_dir():
            raise ResumeError(
                f"resume={resume} is not a checkpoint folder (<run_dir>/checkpoints/step-N)"
            )
        problems = store.problems(step)
        if problems:
            raise ResumeError(f"resume={resume} is damaged: " + "; ".join(problems))
        return str(path)

    def check_compatible(self, folder: Path, allow_change: bool) -> None:
        manifest = CheckpointStore(folder.parent).manifest(parse_step_dir(folder.name) or 0)
        if manifest.world != self.world:
            raise ResumeError(
                f"{folder} was saved with layout {manifest.world}, this run is {self.world}. "
                "HINT: resume with the same parallel.mode, nodes and GPUs per node, or "
                "resume=never to start over"
            )
        if manifest.config_hash != resume_hash(self.config):
            old = json.loads((folder / "config.json").read_text())
            if not allow_change:
                raise ResumeError(config_change_message(str(folder), old, dict(self.config)))
            diffs = config_differences(old, dict(self.config), RESUME_IGNORES)
            self.log("resuming with a changed config: " + "; ".join(diffs[:10]))

    def load(self, folder: Path) -> TrainerState:
        model_sd, optim_sd = get_state_dict(self.module, self.optimizer, options=OPTIONS)
        state = {"model": model_sd, "optim": optim_sd}
        # Each rank reads what it holds straight from the checkpoint's metadata: DCP's
        # planning round (gathering every rank's plan on rank 0 and sending it back) adds
        # nothing to a load and cost 0.21 of the 0.35 s a resume spent in load() (cProfile,
        # bench model). no_dist warns that torch.distributed looks unused: it is on purpose.
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
        trainer = torch.load(folder / "trainer.pt", weights_only=True)
        return TrainerState(
            trainer["step"],
            trainer["sample_position"],
            trainer["scheduler"],
            trainer["scaler"],
            trainer["last_loss"],
        )
