"""Streaming data: a `torch.utils.data.IterableDataset` read by torchdata's StatefulDataLoader.

A stream has no length and no index, so the global-batch plan (runtime/sampler.py) cannot
say which samples a rank reads: each data-parallel rank reads its own share of the
stream (the dataset splits itself by `torch.distributed.get_rank()` and, inside a loader
worker, `torch.utils.data.get_worker_info()`; docs/your-model-and-data.md), `grad_accum`
micro-batches of `micro_batch_size` samples per step. When the stream ends, the next
epoch starts (the dataset's `set_epoch(epoch)` is called when it has one).

Where a rank stands in its stream is the StatefulDataLoader's `state_dict()`: the
dataset's own `state_dict()` (torchdata's Stateful protocol) from each loader worker, the
workers' seeds and how many batches were taken. Every data-parallel rank saves its own in
the checkpoint (`data-<rank>.pt`, ckpt/checkpointer.py). A resume restores it only where
it means the same thing: the same number of data-parallel ranks and loader workers, and
a dataset that saved its state; otherwise `loader.stream_resume` decides (exact: refuse;
replay: torchdata re-reads and drops the batches already taken; restart: the stream
starts again) and `stream_restore` (train/stream_rules.py, pure) says why and what to do.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import IterableDataset

from jeanzay_kit.ckpt.checkpointer import Checkpointer
from jeanzay_kit.config.sections import LoaderSettings
from jeanzay_kit.config.spec import JobSpec
from jeanzay_kit.distributed.process_group import DistContext
from jeanzay_kit.errors import ContractError
from jeanzay_kit.runtime.sampler import StreamPlan
from jeanzay_kit.train.loader import (
    StepBatches,
    build_collate,
    describe_loader,
    ignore_stop_signals,
    prefetch_for,
    worker_context,
    workers_here,
)
from jeanzay_kit.train.stream_rules import stream_restore


def is_stream(dataset: Any) -> bool:
    return isinstance(dataset, IterableDataset)


def is_stateful(dataset: Any) -> bool:
    """torchdata's Stateful protocol: the stream can say where it is and go back there."""
    return callable(getattr(dataset, "state_dict", None)) and callable(
        getattr(dataset, "load_state_dict", None)
    )


def build_stream_loader(
    dataset: Any,
    settings: LoaderSettings,
    *,
    workers: int,
    device_type: str,
    micro_batch: int,
    seed: int,
    per_step: int = 1,
) -> Any:
    """torchdata's StatefulDataLoader over the stream, `micro_batch` samples a batch.

    drop_last: every micro-batch has micro_batch samples, as in the plan's batches; a
    rank's stream that ends early starts its next epoch instead of making a short batch.
    Workers are never persistent: a new epoch's workers copy the dataset again, so a
    `set_epoch` made in the training process reaches them."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    extra: dict[str, Any] = {}
    if workers > 0:
        extra["worker_init_fn"] = ignore_stop_signals
        extra["multiprocessing_context"] = worker_context()
        extra["prefetch_factor"] = prefetch_for(settings.prefetch_factor, workers, per_step)
    with warnings.catch_warnings():
        # torchdata 0.11 calls a torch API that torch >= 2.9 deprecates; harmless.
        warnings.filterwarnings("ignore", message=".*set_vital.*")
        return StatefulDataLoader(
            dataset,
            batch_size=micro_batch,
            drop_last=True,
            num_workers=workers,
            collate_fn=build_collate(settings.collate_fn),
            pin_memory=settings.pin_for(device_type),
            # The workers' base seed comes from this generator, not from the global RNG
            # (which model initialisation and dropout use); it is part of the saved state.
            generator=torch.Generator().manual_seed(seed),
            **extra,
        )


class StreamBatches(StepBatches):
    """The stream's micro-batches, `grad_accum` per optimizer step, on the device; a new
    epoch when the stream ends."""

    def __init__(self, loader: Any, grad_accum: int, device: torch.device, describe: str):
        super().__init__(loader, grad_accum, device, describe)
        self.loader: Any = loader  # torchdata's StatefulDataLoader, or torch's
        self.epoch = 0
        self.stateful = is_stateful(loader.dataset)

    def _next(self) -> Any:
        assert self._it is not None
        try:
            return next(self._it)
        except StopIteration:
            pass
        # The stream ended: its next epoch, once. An epoch with no full micro-batch would
        # start epochs forever.
        self.epoch += 1
        self._start_epoch()
        self._it = iter(self.loader)
        try:
            return next(self._it)
        except StopIteration:
            raise ContractError(
                f"{self.describe}: the stream yields fewer than one micro-batch "
                f"({self.loader.batch_size} samples) on this rank in an epoch. HINT: check "
                "how the dataset splits itself across ranks and loader workers, or lower "
                "train.micro_batch_size"
            ) from None

    def _start_epoch(self) -> None:
        set_epoch = getattr(self.loader.dataset, "set_epoch", None)
        if callable(set_epoch):
            set_epoch(self.epoch)

    def state_dict(self) -> dict[str, Any]:
        """Where this rank stands: plain types (the checkpoint loads it weights_only)."""
        return {
            "epoch": self.epoch,
            "workers": self.loader.num_workers,
            "stateful": self.stateful,
            "loader": self.loader.state_dict(),
        }

    def restore(self, state: Mapping[str, Any] | None) -> None:
        """Continue from `state` (stream_restore's choice), or start at epoch 0."""
        self.epoch = int(state["epoch"]) if state else 0
        self._start_epoch()
        if state:
            self.loader.load_state_dict(state["loader"])


def open_stream(
    spec: JobSpec,
    ctx: DistContext,
    dataset: Any,
    plan: StreamPlan,
    ckpt: Checkpointer,
    folder: Path | None,
) -> StreamBatches:
    """torchdata's StatefulDataLoader over this rank's share of the stream, at the place
    the checkpoint saved for this rank (train/stream.py says when that is refused)."""
    data_key = f"data._target_={spec.data.get('_target_')}"
    if spec.layout.pp_size > 1:
        raise ContractError(
            f"{data_key} is a stream (IterableDataset): parallel.mode={spec.layout.mode} "
            "splits the model into stages that must read the same samples, which a stream "
            "cannot promise. HINT: use parallel=ddp or parallel=fsdp, or a map-style Dataset"
        )
    workers = workers_here(spec.loader)
    accum = plan.accumulation_steps
    loader = build_stream_loader(
        dataset,
        spec.loader,
        workers=workers,
        device_type=ctx.device.type,
        micro_batch=spec.train.micro_batch_size,
        seed=spec.train.seed + ctx.dp_rank,  # the ranks' workers draw different numbers
        per_step=accum,
    )
    batches = StreamBatches(loader, accum, ctx.device, describe_loader(spec, workers))
    if folder is None:
        if ctx.is_main and not batches.stateful and spec.loader.stream_resume == "exact":
            print(
                f"WARNING: {data_key} is an IterableDataset without state_dict()/"
                "load_state_dict(): a resume from this run's checkpoints will be refused "
                "(loader.stream_resume=exact). HINT: give the dataset both methods "
                "(docs/your-model-and-data.md, 'Streaming data'), or choose "
                "loader.stream_resume=replay or restart now",
                file=sys.stderr,
                flush=True,
            )
        batches.restore(None)
        return batches
    saved, saved_dp = ckpt.load_data_state(folder)
    state = stream_restore(
        spec.loader.stream_resume,
        saved,
        saved_dp,
        dp_size=spec.layout.dp_size,
        dp_rank=ctx.dp_rank,
        workers=workers,
        folder=str(folder),
        data_key=data_key,
    )
    if state is None and ctx.is_main:
        print(f"note: {data_key} starts again from its beginning (loader.stream_resume=restart)")
    batches.restore(state)
    return batches
