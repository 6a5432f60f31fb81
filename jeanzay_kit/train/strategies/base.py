"""The one interface the training loop talks to, whatever the parallel mode."""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from jeanzay_kit.contracts import Batch
from jeanzay_kit.distributed.process_group import DistContext

# compute_loss(module, batch) -> scalar tensor: train/loss.py's ComputeLoss.
ComputeLossFn = Callable[[nn.Module, Any], torch.Tensor]


class Strategy(ABC):
    """Owns the (wrapped, sharded or split) model for one parallel mode.

    train_step runs forward and backward over one optimizer step's micro-batches and
    leaves the averaged gradients in the parameters; the loop then clips and steps.
    """

    name = "?"

    def __init__(
        self,
        ctx: DistContext,
        compute_loss: ComputeLossFn,
        autocast: Callable[[], contextlib.AbstractContextManager],
        scaler: torch.amp.GradScaler | None,
    ):
        self.ctx = ctx
        self.compute_loss = compute_loss
        self.autocast = autocast
        self.scaler = scaler

    @classmethod
    def from_job(cls, model: nn.Module, spec: Any, *, compiled: bool, **common: Any) -> Strategy:
        """This mode's strategy for a validated job (config/modes.py names the class):
        `common` is what every strategy takes; a mode that needs more of the job takes
        it here. compiled: whether train.compile applies (config/modes.py compiles)."""
        return cls(model, **common)  # type: ignore[arg-type]  # a subclass takes the model first

    def compile_loss(self) -> None:
        """Compile the loss with the model (train/loss.py: ComputeLoss.compiled)."""
        compiled = getattr(self.compute_loss, "compiled", None)
        if callable(compiled):
            self.compute_loss = compiled()

    @abstractmethod
    def parameters(self) -> list[nn.Parameter]:
        """The parameters this rank's optimizer updates."""

    @abstractmethod
    def train_step(self, batches: list[Batch]) -> torch.Tensor:
        """Forward/backward over this rank's micro-batches; returns its mean loss (detached)."""

    @abstractmethod
    def eval_loss(self, batches: list[Batch]) -> torch.Tensor | None:
        """Mean loss on this rank's share of the eval batches (None where not computed)."""

    @abstractmethod
    def state_module(self) -> nn.Module:
        """The module whose parameters are the optimizer's, with the original names:
        what checkpoints save and load."""

    @abstractmethod
    def full_state_dict(self) -> dict[str, torch.Tensor] | None:
        """The whole model's parameters on rank 0 (a collective: every rank calls it)."""

    def before_resumed_steps(self, batch: Batch) -> None:  # noqa: B027 (optional hook)
        """Called once before the first step of a resumed run (nothing to do by default)."""

    def agree_buffers(self) -> None:  # noqa: B027 (optional hook)
        """Collective, at a step boundary before an evaluation or a save: make the
        model's buffers the same on every data-parallel rank (nothing by default)."""

    def clip_grad_norm(self, max_norm: float) -> torch.Tensor:
        """Clip the gradients; their total norm, left on the device (reading it would
        make the host wait for the backward pass, every step)."""
        norm = torch.nn.utils.clip_grad_norm_(self.parameters(), max_norm)
        return norm.full_tensor() if hasattr(norm, "full_tensor") else norm

    def train(self, mode: bool = True) -> None:  # noqa: FBT001
        for module in self.modules():
            module.train(mode)

    @abstractmethod
    def modules(self) -> Iterator[nn.Module]: ...

    def backward(self, loss: torch.Tensor) -> None:
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()

    def global_mean(self, local: torch.Tensor) -> float:
        """Average a per-rank scalar over every rank (each computed one)."""
        value = local.detach().float().reshape(1).to(self.ctx.device)
        dist.all_reduce(value)
        return float(value.item()) / dist.get_world_size()


def cpu_state(module: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().to("cpu", copy=True) for k, v in module.state_dict().items()}


class ReplicatedStrategy(Strategy):
    """Modes where each rank runs the whole model on its micro-batches (ddp, fsdp,
    dataparallel): they differ only in how gradients are synchronised."""

    model: nn.Module  # what the forward pass calls

    def sync_gradients(self, last: bool) -> contextlib.AbstractContextManager:
        """Context for one micro-batch's backward; `last` is the step's final one."""
        return contextlib.nullcontext()

    def eval_module(self) -> nn.Module:
        return self.model

    def train_step(self, batches: list[Batch]) -> torch.Tensor:
        total = torch.zeros((), device=self.ctx.device)
        n = len(batches)
        for i, batch in enumerate(batches):
            with self.sync_gradients(last=i == n - 1):
                with self.autocast():
                    loss = self.compute_loss(self.model, batch)
                # Each micro-batch weighs 1/n: the step's gradient is the mean over it.
                self.backward(loss / n)
            total += loss.detach()
        return total / n

    @torch.no_grad()
    def eval_loss(self, batches: list[Batch]) -> torch.Tensor | None:
        losses = []
        for batch in batches:
            with self.autocast():
                losses.append(self.compute_loss(self.eval_module(), batch).float())
        return torch.stack(losses).mean() if losses else None
