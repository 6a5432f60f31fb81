"""parallel.mode=dataparallel: nn.DataParallel, one process driving every GPU of one node.

Kept because users compare it with DDP. It is slower: one Python thread scatters inputs,
replicates the model on every step and gathers outputs on GPU 0. bench/ shows the gap.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import torch
from torch import nn

from jeanzay_kit.train.strategies.base import ReplicatedStrategy, cpu_state


class DataParallelStrategy(ReplicatedStrategy):
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

    def state_module(self) -> nn.Module:
        return self.raw

    def full_state_dict(self) -> dict[str, torch.Tensor] | None:
        return cpu_state(self.raw)
