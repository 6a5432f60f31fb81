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
import threading
import time
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from jeanzay_kit.ckpt.checksum import checksum_of
from jeanzay_kit.ckpt.commit import TrashEmptier, any_rank_failed, commit_checkpoint
from jeanzay_kit.ckpt.layout import (
    MANIFEST,
    FileRecord,
    parameter_mismatch,
    parse_step_dir,
)
from jeanzay_kit.ckpt.resume import check_compatible, choose_checkpoint
from jeanzay_kit.ckpt.rng import rng_state, set_rng_state
from jeanzay_kit.ckpt.store import CheckpointStore
from jeanzay_kit.ckpt.trainer_state import TrainerState
from jeanzay_kit.ckpt.writable import save_failure_hint
from jeanzay_kit.config.identity import resume_hash
from jeanzay_kit.config.sections import WRITER_THREADS_MAX
from jeanzay_kit.durable_io import write_synced
from jeanzay_kit.errors import CheckpointWriteError, PeerFailed, ResumeError, is_loader_death
from jeanzay_kit.rundir.run_directory import RunDir
from jeanzay_kit.values import integer
from jeanzay_kit.version import __version__

# Optimizer state keyed per parameter name ("state.<fqn>.exp_avg", "param_groups.<fqn>.lr"):
# pipeline stages hold different parameters, and a nested "param_groups" list would have
# the same key on every rank, which DCP would save once as if it were replicated.


# torch.distributed.checkpoint (DCP) is imported where a save or a load needs it, not
# with this module: its import takes about 0.5 s per process (it pulls in sympy), which a
# fresh run would otherwise pay before its first step (bench/'s ttfs_vs_bare).


def _options() -> Any:
    """DCP's state-dict options: a flattened optimizer state, keyed by parameter name,
    valid for any sharding."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(flatten_optimizer_state_dict=True)


def state_dicts(module: nn.Module, optimizer: torch.optim.Optimizer) -> tuple[dict, dict]:
    """The model's and optimizer's state dicts as DCP saves them."""
    from torch.distributed.checkpoint.state_dict import get_state_dict

    return get_state_dict(module, optimizer, options=_options())


WRITER_THREADS = min(WRITER_THREADS_MAX, os.cpu_count() or 1)


def _save_bytes(data: bytes, path: Path) -> FileRecord:
    """Write a small file with fsync; its checksum comes from the bytes in hand."""
    write_synced(path, data)  # inside .tmp-step-N: the folder's rename seals it
    return FileRecord(len(data), checksum_of(data))


def _save_tensors(state: dict[str, Any], writer: Any) -> None:
    """DCP's save; a one-process group skips DCP's planning round trip (its plans
    pickled and sent to itself through the group, about 15 ms a save on the bench's
    state): the same files, the same metadata, as its loads already do (load below)."""
    import torch.distributed.checkpoint as dcp

    alone = dist.is_initialized() and dist.get_world_size() == 1
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.save(state, storage_writer=writer, no_dist=alone)


def _torch_bytes(obj: Any) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


class _SmallWrites(threading.Thread):
    """A save's small files, each written and fsynced, on a thread of their own; the
    first OSError is kept for the ranks' agreement (Checkpointer._small_done)."""

    def __init__(self, folder: Path, payloads: Mapping[str, bytes]) -> None:
        super().__init__(daemon=True)
        self.folder, self.payloads = folder, dict(payloads)
        self.records: dict[str, FileRecord] = {}
        self.failure: OSError | None = None

    def run(self) -> None:
        try:
            for name, data in self.payloads.items():
                self.records[name] = _save_bytes(data, self.folder / name)
        except OSError as err:
            self.failure = err


class Checkpointer:
    def __init__(
        self,
        run_dir: RunDir,
        module: nn.Module,
        optimizer: torch.optim.Optimizer,
        *,
        rank: int,
        world: Mapping[str, Any],
        config: Mapping[str, Any],
        device: torch.device,
        keep_last: int,
        use_async: bool = False,
        log: Callable[[str], None] = print,
        keep_best: tuple[str, str] | None = None,
        writer_threads: int | None = None,
    ):
        self.store = CheckpointStore(run_dir.checkpoints)
        self.module = module
        self.optimizer = optimizer
        self.rank = rank
        self.world = dict(world)
        self.config = config
        self.device = device
        self.keep_last = keep_last
        self.writer_threads = writer_threads or WRITER_THREADS  # checkpoint.writer_threads
        self.keep_best = keep_best  # (metrics.jsonl key, "min" | "max"): kept by retention
        self.log = log if rank == 0 else (lambda _msg: None)
        self._trash = TrashEmptier(self.store)
        self._background = None
        if use_async:
            from jeanzay_kit.ckpt.background_save import BackgroundSave

            self._background = BackgroundSave(device)
        # How long the last save held up training: the save call, plus (async) the wait
        # in before_update() for the staging copy.
        self.last_blocking_s = 0.0
        self._in_flight: int | None = None  # the step of an asynchronous save not yet done

    # ---- saving --------------------------------------------------------------------------

    def save(
        self,
        step: int,
        trainer: TrainerState,
        force_sync: bool = False,
        evaluated: Mapping[str, float] | None = None,
        data_state: Mapping[str, Any] | None = None,
    ) -> None:
        """Collective: every rank calls it at the same step. evaluated: the evaluation of
        this step (eval_loss, eval_<name>), recorded in the manifest for keep_best.
        data_state: where this rank stands in a streaming dataset (train/stream.py),
        saved as its own `data-<rank>.pt` (plain types)."""
        t0 = time.perf_counter()
        self._wait_save()  # the next save waits for the previous one
        tmp = self._fresh_folder(step)
        model_sd, optim_sd = state_dicts(self.module, self.optimizer)
        # The small files are written while DCP writes the tensors (their fsyncs would
        # otherwise come one after the other, before it: docs/performance.md).
        small = _SmallWrites(tmp, self._small_payloads(trainer, data_state))
        small.start()
        fields = {
            "world": self.world,
            "config_hash": resume_hash(self.config),
            "code_version": __version__,
            "sample_position": trainer.sample_position,
            "extra": _extra(evaluated, self.keep_best),
        }
        self._write_and_commit(
            step, tmp, {"model": model_sd, "optim": optim_sd}, fields, small, force_sync
        )
        self.last_blocking_s = time.perf_counter() - t0

    def _fresh_folder(self, step: int) -> Path:
        """The step's temporary folder, empty (rank 0 makes it; every rank agrees)."""
        tmp = self.store.tmp_dir(step)
        failure: OSError | None = None
        if self.rank == 0:
            try:
                if tmp.exists():
                    shutil.rmtree(tmp)
                tmp.mkdir(parents=True)
            except OSError as err:
                failure = err
        self._agree(step, failure)  # also the barrier: the folder exists for everyone
        return tmp

    def _small_payloads(
        self, trainer: TrainerState, data_state: Mapping[str, Any] | None
    ) -> dict[str, bytes]:
        """This rank's random generators and stream position; rank 0's trainer state and
        config: taken now (the step's state), written by _SmallWrites."""
        out = {f"rank-{self.rank}.pt": _torch_bytes(rng_state(self.device))}
        if data_state is not None:
            out[f"data-{self.rank}.pt"] = _torch_bytes(dict(data_state))
        if self.rank == 0:
            out["trainer.pt"] = _torch_bytes(trainer.to_payload())
            out["config.json"] = json.dumps(self.config, indent=2, default=str).encode()
        return out

    def _small_done(self, step: int, small: _SmallWrites) -> dict[str, FileRecord]:
        """The small files' records, once every rank agrees that all were written."""
        small.join()
        self._agree(step, small.failure)
        return small.records

    def _write_and_commit(
        self,
        step: int,
        tmp: Path,
        state: dict[str, Any],
        fields: dict[str, Any],
        small: _SmallWrites,
        force_sync: bool,
    ) -> None:
        """The tensors through DCP, then the commit (manifest last): here, or in the
        background (checkpoint.async) unless force_sync."""
        from torch.distributed.checkpoint.api import CheckpointException

        from jeanzay_kit.ckpt.raw_storage import RawWriter

        background = self._background is not None and not force_sync
        # In the background one writer thread is enough and leaves the cores to training
        # (measured in docs/performance.md, "Checkpoint costs").
        writer = RawWriter(tmp / "dcp", 1 if background else self.writer_threads)

        def commit(group: Any) -> None:
            commit_checkpoint(
                self.store,
                step,
                self.rank,
                fields=fields,
                records=small.records,
                dcp_records=writer.fs.records,
                group=group,
                keep_last=self.keep_last,
                trash=self._trash,
                log=self.log,
                device=self.device if group is None else torch.device("cpu"),
                keep_best=self.keep_best,
            )

        if background:
            assert self._background is not None
            self._small_done(step, small)
            self._background.start(state, writer, commit)
            self._in_flight = step
            return
        try:
            try:
                _save_tensors(state, writer)
            finally:
                small.join()  # nothing writes into the folder once this ends
            self._small_done(step, small)
            commit(None)
        except (OSError, CheckpointException) as err:
            # DCP gathers every rank's write errors and raises on all of them; the
            # commit agrees by itself: every rank is here for the same step.
            raise self._lost(step, err) from None

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
            from torch.distributed.checkpoint.api import CheckpointException

            step, self._in_flight = self._in_flight, None
            try:
                self._background.wait()
            except (OSError, CheckpointException) as err:
                assert step is not None  # an error comes only from a save that started
                raise self._lost(step, err) from None

    # ---- a save that cannot be written ----------------------------------------------------

    def _agree(self, step: int, failure: OSError | None) -> None:
        """Collective: when any rank's write failed, every rank raises for this step."""
        if any_rank_failed(failure is not None, None, self.device):
            raise self._lost(step, failure)

    def _lost(self, step: int, err: BaseException | None) -> BaseException:
        """Remove what this save wrote (rank 0) and say what happened, the space it needs
        and has, and that the previous checkpoint is kept."""
        tmp, final = self.store.tmp_dir(step), self.store.step_dir(step)
        if self.rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)
            if final.exists() and not (final / MANIFEST).exists():
                shutil.rmtree(final, ignore_errors=True)  # renamed, but never sealed
        interrupted = _interruption(err, self.rank)
        if interrupted is not None:
            return interrupted
        cause = _root_cause(err)
        complete = [e for e in self.store.entries() if e.has_manifest]
        kept = f"step-{complete[0].step} is kept" if complete else "there is none yet"
        needed = self._size_hint(complete)
        try:
            free = f"{shutil.disk_usage(self.store.root).free / 1e6:.1f} MB free there"
        except OSError:
            free = "free space unknown"
        return CheckpointWriteError(
            f"checkpoint step-{step} could not be written to {tmp}: {cause}. It needs "
            f"about {needed}; {free}. The partial folder was removed; the newest complete "
            f"checkpoint {kept}. HINT: "
            + save_failure_hint(_root_errno(err), str(self.store.root.parent))
        )

    def _size_hint(self, complete: list) -> str:
        for entry in complete:
            try:
                size = self.store.manifest(entry.step).total_bytes
                return f"{size / 1e6:.1f} MB (the size of {entry.name})"
            except Exception:  # noqa: BLE001 - only a hint for the message
                continue
        model_sd, optim_sd = state_dicts(self.module, self.optimizer)
        tensors = [v for v in [*model_sd.values(), *optim_sd.values()] if torch.is_tensor(v)]
        return f"{sum(t.nbytes for t in tensors) / 1e6:.1f} MB (this rank's state)"

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
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import set_state_dict

        from jeanzay_kit.ckpt.raw_storage import RawReader

        model_sd, optim_sd = state_dicts(self.module, self.optimizer)
        self._check_shapes(folder, model_sd)
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
            model_state_dict=model_sd,
            optim_state_dict=optim_sd,
            options=_options(),
        )
        set_rng_state(torch.load(self._rng_file(folder), weights_only=True), self.device)
        payload = torch.load(folder / "trainer.pt", weights_only=True)
        return TrainerState.from_payload(payload)

    def load_data_state(self, folder: Path) -> tuple[dict[str, Any] | None, int]:
        """This rank's saved stream position (None: the checkpoint has none for it) and
        the number of data-parallel ranks that saved the checkpoint."""
        saved = CheckpointStore(folder.parent).manifest(parse_step_dir(folder.name) or 0)
        path = folder / f"data-{self.rank}.pt"
        state = torch.load(path, weights_only=True) if path.exists() else None
        return state, integer(saved.world.get("dp_size"), 0)

    def _check_shapes(self, folder: Path, model_sd: dict) -> None:
        """Refuse, on every rank alike and before reading any tensor, a model whose
        parameters no longer fit the checkpoint (its code changed; the config did not):
        one message naming the parameter and both shapes, exit 2, no restart spent."""
        from jeanzay_kit.ckpt.raw_storage import RawReader

        metadata = RawReader(folder / "dcp").read_metadata()
        saved = {
            key.removeprefix("model."): tuple(meta.size)
            for key, meta in metadata.state_dict_metadata.items()
            if key.startswith("model.") and hasattr(meta, "size")
        }
        current = {k: tuple(v.shape) for k, v in model_sd.items() if torch.is_tensor(v)}
        pipeline = int(self.world.get("pp_size", 1) or 1) > 1
        problem = parameter_mismatch(str(folder), saved, current, whole_model=not pipeline)
        if problem:
            raise ResumeError(problem)

    def _rng_file(self, folder: Path) -> Path:
        """This rank's random generators. Saved on another number of ranks, rank r takes
        those of rank r mod the saved count: random draws inside the model (dropout)
        then differ from an uninterrupted run; the data order does not use them."""
        saved = CheckpointStore(folder.parent).manifest(parse_step_dir(folder.name) or 0)
        size = integer(saved.world.get("world_size"), 0)
        rank = self.rank % size if size and size != self.world["world_size"] else self.rank
        return folder / f"rank-{rank}.pt"


def _root_errno(err: BaseException | None) -> int | None:
    """The errno of the OS error behind a failed save, where there is one."""
    from torch.distributed.checkpoint.api import CheckpointException

    if isinstance(err, CheckpointException):
        for _rank, (inner, _trace) in sorted(err.failures.items()):
            return _root_errno(inner)
    while err is not None and not isinstance(err, OSError):
        err = err.__cause__ or err.__context__
    return err.errno if isinstance(err, OSError) else None


def _interruption(err: BaseException | None, rank: int) -> BaseException | None:
    """A save stopped by something other than its files. torch's SIGCHLD handler raises
    a loader worker's death wherever the training process is, a save included, and DCP
    hands that rank's error to every rank: not a write failure (exit 2, never retried)
    but a crash of that rank (restarted within the budget), and a peer's stop on the
    others. Seen in a stress run: a worker killed at step 19 of a run saving every 5."""
    from torch.distributed.checkpoint.api import CheckpointException

    if not isinstance(err, CheckpointException):
        return None
    for failed, (inner, _trace) in sorted(err.failures.items()):
        if is_loader_death(inner):
            if failed == rank:
                return inner
            return PeerFailed(f"a DataLoader worker of rank {failed} died during a save")
    return None


def _root_cause(err: BaseException | None) -> str:
    """The OS error behind a failed save (DCP wraps each rank's error), in one line."""
    from torch.distributed.checkpoint.api import CheckpointException

    if isinstance(err, CheckpointException):
        for rank, (inner, _trace) in sorted(err.failures.items()):
            return f"{_root_cause(inner)} (rank {rank})"
    if err is None:
        return "another rank could not write its files"
    return str(err)


def _extra(evaluated: Mapping[str, float] | None, keep_best: tuple[str, str] | None) -> dict:
    """What the manifest records besides the files: the step's evaluation, and which of
    its values keep_best ranks checkpoints by (`jzk ckpt list` marks the best)."""
    extra: dict[str, Any] = {}
    if evaluated:
        extra["eval"] = dict(evaluated)
    if keep_best is not None:
        extra["keep_best"] = {"key": keep_best[0], "mode": keep_best[1]}
    return extra
