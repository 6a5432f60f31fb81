"""parallel.mode=dataparallel: nn.DataParallel, one process driving every GPU of one node.

Kept because users compare it with DDP. It is slower: one Python thread scatters inputs,
replicates the model on every step and gathers outputs on GPU 0. bench/ shows the gap.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import torch
from torch import nn

from jeanzay_kit.train.strategies.base import Batch, Strategy, cpu_state


class DataParallelStrategy(Strategy):
    name = "dataparallel"

    def __init__(self, model: nn.Module, *args, **kwargs):
        super().__init__(*args, **kwargs)
        warnings.warn(
            "parallel.mode=dataparallel is slower than parallel.mode=ddp (one process, model "
            "replicated every step, outputs gathered on one GPU); see docs/parallelism.md",
            stacklevel=2,
        )
        self.raw = model.to(self.ctx.device)
        gpus = torch.cuda.device_count() if self.ctx.device.type == "cuda" else 0
        self.model: nn.Module = nn.DataParallel(self.raw) if gpus > 1 else self.raw

    def parameters(self) -> list[nn.Parameter]:
        return list(self.raw.parameters())

    def modules(self) -> Iterator[nn.Module]:
        yield self.model

    def train_step(self, batches: list[Batch]) -> torch.Tensor:
        total = torch.zeros((), device=self.ctx.device)
        for x, y in batches:
            with self.autocast():
                loss = self.loss_fn(self.model(x), y)
            self.backward(loss / len(batches))
            total += loss.detach()
        return total / len(batches)

    @torch.no_grad()
    def eval_loss(self, batches: list[Batch]) -> torch.Tensor | None:
        losses = []
        for x, y in batches:
            with self.autocast():
                losses.append(self.loss_fn(self.model(x), y).float())
        return torch.stack(losses).mean() if losses else None

    def full_state_dict(self) -> dict[str, torch.Tensor] | None:
        return cpu_state(self.raw)
