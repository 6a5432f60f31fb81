"""parallel.mode=ddp: DistributedDataParallel, one process per GPU."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from jeanzay_kit.train.strategies.base import Batch, Strategy, cpu_state


class DDPStrategy(Strategy):
    name = "ddp"

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
        device_ids = [self.ctx.device.index] if self.ctx.device.type == "cuda" else None
        self.model = DDP(
            model,
            device_ids=device_ids,
            process_group=self.ctx.dp_group,
            bucket_cap_mb=bucket_cap_mb,
        )

    def parameters(self) -> list[nn.Parameter]:
        return list(self.model.parameters())

    def modules(self) -> Iterator[nn.Module]:
        yield self.model

    def train_step(self, batches: list[Batch]) -> torch.Tensor:
        total = torch.zeros((), device=self.ctx.device)
        n = len(batches)
        for i, (x, y) in enumerate(batches):
            # Gradients are all-reduced only on the last micro-batch of the step; the
            # others accumulate locally (no_sync), which is what makes accumulation cheap.
            sync = contextlib.nullcontext() if i == n - 1 else self.model.no_sync()
            with sync:
                with self.autocast():
                    loss = self.loss_fn(self.model(x), y)
                self.backward(loss / n)
            total += loss.detach()
        return total / n

    @torch.no_grad()
    def eval_loss(self, batches: list[Batch]) -> torch.Tensor | None:
        losses = []
        for x, y in batches:
            with self.autocast():
                losses.append(self.loss_fn(self.model.module(x), y).float())
        return torch.stack(losses).mean() if losses else None

    def full_state_dict(self) -> dict[str, torch.Tensor] | None:
        # Every replica holds the same parameters; rank 0's copy is the model.
        return cpu_state(self.raw) if self.ctx.is_main else None
