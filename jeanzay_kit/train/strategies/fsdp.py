"""parallel.mode=fsdp: FSDP2 (fully_shard), parameters, gradients and optimizer state sharded."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, cast

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.fsdp import fully_shard

from jeanzay_kit.train.strategies.base import ReplicatedStrategy


class FSDPStrategy(ReplicatedStrategy):
    name = "fsdp"

    @classmethod
    def from_job(
        cls, model: nn.Module, spec: Any, *, compiled: bool, **common: Any
    ) -> ReplicatedStrategy:
        return cls(model, compile_model=compiled, **common)

    def __init__(self, model: nn.Module, *args, compile_model: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        model = model.to(self.ctx.device)
        mesh = self.ctx.mesh["dp"]
        # Shard block by block, then the root: each block's parameters are gathered just
        # before it runs and freed after, so peak memory holds one block unsharded.
        # (A model without `blocks` is one unit: train/components.py warns about it.)
        blocks = getattr(model, "blocks", None)
        if isinstance(blocks, (nn.ModuleDict, nn.ModuleList)):
            for block in blocks.values() if isinstance(blocks, nn.ModuleDict) else blocks:
                fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
        self.model = cast(nn.Module, torch.compile(model)) if compile_model else model
        if compile_model:
            self.compile_loss()
        self.sharded = model

    def parameters(self) -> list[nn.Parameter]:
        return list(self.sharded.parameters())

    def modules(self) -> Iterator[nn.Module]:
        yield self.sharded

    def sync_gradients(self, last: bool) -> contextlib.AbstractContextManager:
        # Reduce-scatter gradients only after the last micro-batch of the step.
        self.sharded.set_requires_gradient_sync(last)  # type: ignore[operator]
        return contextlib.nullcontext()

    def state_module(self) -> nn.Module:
        return self.sharded

    def full_state_dict(self) -> dict[str, torch.Tensor] | None:
        state = get_model_state_dict(
            self.sharded, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
        )
        return cast(dict[str, torch.Tensor], dict(state)) if self.ctx.is_main else None
