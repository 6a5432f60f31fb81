"""parallel.mode=pipeline and pipeline_ddp: torch.distributed.pipelining stages.

The model is cut into `pp_size` (x `stages_per_rank` for interleaved 1F1B) consecutive
chunks with `model.pipeline_chunk`. Stage i lives on pipeline rank i mod pp_size (the
looped placement interleaved schedules expect). With pipeline_ddp the replicas of a
stage average their gradients with one coalesced all-reduce over their data-parallel
group after the schedule step. (Wrapping the stage in DDP, which torch's stages support,
gave results that drifted by ~1e-8 after a restart: the DDP reducer's first iteration
after construction sums differently, so a resumed run was not bit-identical to an
uninterrupted one. Measured with tests/distributed/test_resume.py.)

One optimizer step is one schedule.step over this replica's whole share of the global
batch, cut into `parallel.microbatches x accumulation` pipeline micro-batches: gradient
accumulation happens inside the schedule instead of around it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import (
    PipelineStage,
    Schedule1F1B,
    ScheduleGPipe,
    ScheduleInterleaved1F1B,
)

from jeanzay_kit.contracts import PipelineSplittable
from jeanzay_kit.errors import ContractError
from jeanzay_kit.train.batch import concat
from jeanzay_kit.train.strategies.base import Batch, Strategy, cpu_state

SCHEDULES = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}


def stage_ids(pp_rank: int, pp_size: int, per_rank: int) -> list[int]:
    """Stages held by a pipeline rank, looped: rank r holds r, r + pp, r + 2pp, ..."""
    return [pp_rank + k * pp_size for k in range(per_rank)]


class PipelineStrategy(Strategy):
    name = "pipeline"

    @classmethod
    def from_job(cls, model: nn.Module, spec: Any, *, compiled: bool, **common: Any) -> Strategy:
        # Every micro-batch of an optimizer step goes through the schedule at once.
        n_micro = spec.layout.microbatches * spec.train.grad_accum_steps
        return cls(model, n_microbatches=n_micro, **common)

    def __init__(self, model: nn.Module, *args, n_microbatches: int, **kwargs):
        super().__init__(*args, **kwargs)
        lay = self.ctx.layout
        pp_group = self.ctx.pp_group
        if pp_group is None:
            raise ValueError("pipeline strategy without a 'pp' mesh dimension")
        interleaved = lay.schedule == "interleaved_1f1b"
        per_rank = lay.stages_per_rank if interleaved else 1
        self.num_stages = lay.pp_size * per_rank
        self.ids = stage_ids(self.ctx.pp_rank, lay.pp_size, per_rank)
        self.chunks: list[nn.Module] = []
        stages: list[Any] = []  # PipelineStage
        if not callable(getattr(model, "pipeline_chunk", None)):
            raise ContractError(
                f"parallel.mode={lay.mode}: {type(model).__name__} has no "
                "pipeline_chunk(index, count) to split it into stages. HINT: add one "
                "(jeanzay_kit/contracts.py: PipelineSplittable), or use parallel=ddp or fsdp"
            )
        for sid in self.ids:
            chunk = cast(PipelineSplittable, model).pipeline_chunk(sid, self.num_stages)
            chunk = chunk.to(self.ctx.device)
            self.chunks.append(chunk)
            stages.append(
                PipelineStage(chunk, sid, self.num_stages, self.ctx.device, group=pp_group)
            )
        merge = getattr(model, "merge_chunks", None)
        if len(self.chunks) > 1 and merge is None:
            raise ValueError(f"{type(model).__name__} needs merge_chunks() for interleaved 1F1B")
        self.view = merge(self.chunks) if merge is not None else self.chunks[0]
        self.first = 0 in self.ids
        self.last = (self.num_stages - 1) in self.ids
        self.n_microbatches = n_microbatches
        last_stage_loss = self.compute_loss.pipeline_loss()  # type: ignore[attr-defined]

        def scaled_loss(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
            # The schedule runs backward itself, so fp16 loss scaling happens here.
            loss = last_stage_loss(output, target)
            return self.scaler.scale(loss) if self.scaler is not None else loss

        self.schedule: Any  # a schedule of torch.distributed.pipelining
        if interleaved:
            self.schedule = ScheduleInterleaved1F1B(stages, n_microbatches, loss_fn=scaled_loss)
        else:
            cls = SCHEDULES[lay.schedule]
            self.schedule = cls(stages[0], n_microbatches, loss_fn=scaled_loss)

    def parameters(self) -> list[nn.Parameter]:
        return [p for chunk in self.chunks for p in chunk.parameters()]

    def modules(self) -> Iterator[nn.Module]:
        yield from self.chunks

    def _run(self, batch: Batch, evaluate: bool) -> torch.Tensor:
        # A pipeline's first stage takes one tensor and its last stage meets the target:
        # (inputs, target) batches (train/check.py refuses others before the run).
        x, y = batch[0], batch[-1]
        losses: list[torch.Tensor] = []
        args = (x,) if self.first else ()
        kwargs = {"target": y, "losses": losses} if self.last else {}
        with self.autocast():
            if evaluate:
                self.schedule.eval(*args, **kwargs)
            else:
                self.schedule.step(*args, **kwargs)
        if not self.last:
            return torch.zeros((), device=self.ctx.device)
        total = torch.stack([loss.detach().float() for loss in losses]).mean()
        if self.scaler is not None:
            total = total / self.scaler.get_scale()
        return total

    def train_step(self, batches: list[Batch]) -> torch.Tensor:
        loss = self._run(concat(batches), evaluate=False)
        if self.ctx.layout.dp_size > 1:
            self._average_gradients()
        return loss

    def _average_gradients(self) -> None:
        """Replicas of a stage average their gradients: one coalesced all-reduce per step."""
        grads = [p.grad for p in self.parameters() if p.grad is not None]
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat, group=self.ctx.dp_group)
        flat /= self.ctx.layout.dp_size
        offset = 0
        for g in grads:
            g.copy_(flat[offset : offset + g.numel()].view_as(g))
            offset += g.numel()

    @torch.no_grad()
    def eval_loss(self, batches: list[Batch]) -> torch.Tensor | None:
        if not batches:
            return None
        return self._run(concat(batches), evaluate=True)

    def global_mean(self, local: torch.Tensor) -> float:
        # Only last-stage ranks computed a loss: sum over everyone, divide by their number.
        value = local.detach().float().reshape(1).to(self.ctx.device)
        dist.all_reduce(value)
        return float(value.item()) / self.ctx.layout.dp_size

    def clip_grad_norm(self, max_norm: float) -> torch.Tensor:
        # Each rank holds a slice of the layers: the norm is summed over the pipeline
        # group (replicas hold identical gradients after DDP, so not over dp).
        grads = [p.grad for p in self.parameters() if p.grad is not None]
        local = torch.zeros((), device=self.ctx.device)
        if grads:
            local = torch.stack([g.detach().float().norm(2) for g in grads]).pow(2).sum()
        dist.all_reduce(local, group=self.ctx.pp_group)
        total = local.sqrt()
        coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
        for g in grads:
            g.mul_(coef.to(g.dtype))
        return total

    def state_module(self) -> nn.Module:
        return self.view

    def full_state_dict(self) -> dict[str, torch.Tensor] | None:
        # Chunks keep the original parameter names; gather one replica's chunks on rank 0.
        mine = {}
        if self.ctx.dp_rank == 0:
            for chunk in self.chunks:
                mine.update(cpu_state(chunk))
        gathered: list[dict[str, torch.Tensor] | None] = (
            [None] * dist.get_world_size() if self.ctx.is_main else []
        )
        dist.gather_object(mine, gathered if self.ctx.is_main else None, dst=0)
        if not self.ctx.is_main:
            return None
        merged: dict[str, torch.Tensor] = {}
        for part in gathered:
            merged.update(part or {})
        return merged
