"""parallel.mode=ddp: DistributedDataParallel, one process per GPU."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from jeanzay_kit.train.strategies.base import Batch, ReplicatedStrategy, cpu_state


class DDPStrategy(ReplicatedStrategy):
    name = "ddp"

    @classmethod
    def from_job(
        cls, model: nn.Module, spec: Any, *, compiled: bool, **common: Any
    ) -> ReplicatedStrategy:
        return cls(model, bucket_cap_mb=spec.comm.bucket_cap_mb, compile_model=compiled, **common)

    def __init__(
        self,
        model: nn.Module,
        *args,
        bucket_cap_mb: float = 25.0,
        compile_model: bool = False,
        **kwargs,
    ):
        super().__init__(*args, **kwargs)
        model = model.to(self.ctx.device)
        self.raw = model
        if compile_model:
            model = torch.compile(model)  # type: ignore[assignment]
            self.compile_loss()
        self.ddp: DDP | None = None
        self.model = model
        # One replica: no gradient to average with anyone. DDP would still copy every
        # gradient into its buckets and back, and under torch.compile split the model's
        # graph at each bucket (to overlap an all-reduce that has no one to talk to),
        # which stops fusions across the splits. Gradients are the same either way (a
        # sum over one rank, divided by one).
        if dist.get_world_size(self.ctx.dp_group) > 1:
            device_ids = [self.ctx.device.index] if self.ctx.device.type == "cuda" else None
            self.ddp = DDP(
                model,
                device_ids=device_ids,
                process_group=self.ctx.dp_group,
                bucket_cap_mb=bucket_cap_mb,
            )
            self.model = self.ddp

    def parameters(self) -> list[nn.Parameter]:
        return list(self.model.parameters())

    def before_resumed_steps(self, batch: Batch) -> None:
        """Put a resumed run on the bucket layout the uninterrupted run has, so it stays
        bit-identical: one throw-away backward of this batch, leaving no trace
        (distributed/ddp_buckets.py says why)."""
        from jeanzay_kit.distributed.ddp_buckets import throwaway_backward

        def backward() -> None:
            with self.autocast():
                loss = self.compute_loss(self.model, batch)
            loss.float().backward()

        throwaway_backward(self.model, backward, self.ctx.device)

    def agree_buffers(self) -> None:
        """Rank 0's buffers on every rank. DDP broadcasts them at the start of a synced
        forward, so between steps each rank holds the statistics of its own last
        micro-batch (BatchNorm's running mean and variance). A checkpoint saves a
        replicated tensor from one rank, chosen by DCP: with rank 1's statistics a resumed
        run would differ from the uninterrupted one (which goes on with rank 0's), and
        each rank would evaluate with its own. Training is unchanged: the next forward
        broadcasts rank 0's buffers anyway."""
        buffers = [b for b in self.raw.buffers() if b.numel()]
        if buffers and dist.get_world_size(self.ctx.dp_group) > 1:
            for buffer in buffers:
                dist.broadcast(buffer, group_src=0, group=self.ctx.dp_group)

    def modules(self) -> Iterator[nn.Module]:
        yield self.model

    def sync_gradients(self, last: bool) -> contextlib.AbstractContextManager:
        # Gradients are all-reduced only on the last micro-batch of the step; the others
        # accumulate locally (no_sync), which is what makes accumulation cheap.
        if last or self.ddp is None:
            return contextlib.nullcontext()
        return self.ddp.no_sync()

    def eval_module(self) -> nn.Module:
        return self.ddp.module if self.ddp is not None else self.model

    def state_module(self) -> nn.Module:
        return self.raw

    def full_state_dict(self) -> dict[str, torch.Tensor] | None:
        # Every replica holds the same parameters; rank 0's copy is the model.
        return cpu_state(self.raw) if self.ctx.is_main else None
