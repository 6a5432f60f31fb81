"""One training step of the user's model traced on fake tensors, its memory counted by torch.

The model is built from the job's config inside torch's FakeTensorMode (tensors with
shapes, dtypes and devices but no storage: a 7 B-parameter model costs nothing), fed a
micro-batch of the job's own data (real samples, made fake), and run as the loop runs
it: forward under the run's autocast, backward, the optimizer's step, with activation
checkpointing where the job asks for it. torch.distributed's MemTracker (a dispatch mode
that files every tensor it sees as parameter, gradient, optimizer state, activation or
temporary, rounded as the CUDA allocator rounds) counts what is held at each moment.

This torch build may have no CUDA: the step is traced on the CPU device, and the bytes
follow from dtypes and shapes (what a GPU holds of the same tensors). The CPU's attention
kernel keeps its attention weights where a GPU's flash kernel does not: an estimate errs
on the high side there. What the traced step cannot show for a parallel mode is computed
from its sizes in config/fit_rules.py. Edge module (torch).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.distributed._tools.mem_tracker import MemTracker
from torch.utils._pytree import tree_flatten, tree_map_only

from jeanzay_kit.config.fit_rules import Traced, Usage

_KINDS = {
    "Parameter": "params",
    "Buffer": "buffers",
    "Gradient": "grads",
    "Optstate": "optimizer",
    "Activation": "activations",
    "Temp": "temporary",
    "Other": "other",
}


class PhaseTracker(MemTracker):
    """MemTracker keeping the peak of each phase of the step (backward, step) apart.

    MemTracker also keeps every module's own peaks, walking all the modules at every
    operation: 20x the cost of the trace for a 32-block model (a 7 B plan took 25 s).
    Only the whole step's peaks are needed here, so only those are kept."""

    def __init__(self) -> None:
        super().__init__()
        self.phase = "warm-up"
        self.peaks: dict[str, Usage] = {}

    def _update_peak_stats(self, peak_state: Any) -> None:
        now = self.now()
        best = self.peaks.get(self.phase)
        if best is None or now.total > best.total:
            self.peaks[self.phase] = now

    def now(self) -> Usage:
        """What is held now, summed over the devices seen."""
        counts = dict.fromkeys(_KINDS.values(), 0)
        for snap in self._curr_mem_snap.values():
            for kind, held in snap.items():
                name = _KINDS.get(getattr(kind, "value", str(kind)))
                if name:
                    counts[name] += held
        return Usage(**counts)


def _bytes(params: Iterator[nn.Parameter]) -> int:
    return sum(p.numel() * p.element_size() for p in params)


def unit_sizes(model: nn.Module) -> tuple[int, int]:
    """(parameters outside the blocks, the largest block's): FSDP's units, as
    train/strategies/fsdp.py shards them (a model without blocks is one unit)."""
    total = _bytes(model.parameters())
    blocks = getattr(model, "blocks", None)
    if not isinstance(blocks, (nn.ModuleDict, nn.ModuleList)) or not len(blocks):
        return total, 0
    each = [
        _bytes(b.parameters())
        for b in (blocks.values() if isinstance(blocks, nn.ModuleDict) else blocks)
    ]
    return total - sum(each), max(each)


def _nbytes(value: Any) -> int:
    leaves, _ = tree_flatten(value)
    return sum(t.numel() * t.element_size() for t in leaves if isinstance(t, torch.Tensor))


def trace(
    model: nn.Module,
    run: Callable[[nn.Module], torch.Tensor],
    make_optimizer: Callable[[list[nn.Parameter]], torch.optim.Optimizer],
    accumulates: bool,
) -> Traced:
    """Two steps of `run` (forward to a loss, or a stage's output) on the fake model: the
    first creates the optimizer's states, the second is the one measured. accumulates:
    gradient accumulation, whose later micro-batches run backward with every gradient
    already held."""
    model.train()
    optimizer = make_optimizer([p for p in model.parameters() if p.requires_grad])
    outputs: list[int] = []
    hook = model.register_forward_hook(lambda _m, _a, out: outputs.append(_nbytes(out)))
    tracker = PhaseTracker()
    tracker.track_external(model, optimizer)
    forward_activations = 0
    try:
        with tracker:
            for phase in ("warm-up", "measured"):
                tracker.phase = f"{phase} backward"
                out = run(model)
                forward_activations = tracker.now().activations
                # A pipeline stage's output gets its gradient from the next stage, made
                # when its backward starts (as a received buffer is).
                out.backward(None if out.dim() == 0 else torch.ones_like(out))
                del out
                tracker.phase = f"{phase} step"
                optimizer.step()
                if not accumulates or phase == "measured":
                    optimizer.zero_grad(set_to_none=True)
                tracker.reset_mod_stats()
    finally:
        hook.remove()
    params = _bytes(model.parameters())
    root, block = unit_sizes(model)
    return Traced(
        backward=tracker.peaks["measured backward"],
        step=tracker.peaks["measured step"],
        forward_activations=forward_activations,
        param_bytes=params,
        grad_bytes=sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad),
        root_bytes=root,
        block_bytes=block,
        output_bytes=outputs[-1] if outputs else 0,
    )


@contextlib.contextmanager
def fake_mode() -> Iterator[FakeTensorMode]:
    """Fake tensors for everything built inside; real tensors handed in are made fake."""
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        yield mode


def as_fake(mode: FakeTensorMode, batch: Any) -> Any:
    return tree_map_only(torch.Tensor, mode.from_tensor, batch)


def stage_inputs(chunks: list[nn.Module], first: Any) -> list[Any]:
    """What each pipeline stage receives: the batch's input for the first, the previous
    stage's output (fake, a leaf that needs its gradient) for the others."""
    inputs = [first]
    with torch.no_grad():
        for chunk in chunks[:-1]:
            out = chunk(inputs[-1])
            inputs.append(out.detach().requires_grad_(out.is_floating_point()))
    return inputs


def run_stage(
    inp: Any, target: Any, last: bool, loss: Callable[[Any, Any], torch.Tensor], autocast: Any
) -> Callable[[nn.Module], torch.Tensor]:
    """One stage's forward: the loss on the last stage; elsewhere the output, whose
    gradient trace() makes as large as the one the next stage sends back."""

    def run(chunk: nn.Module) -> torch.Tensor:
        with autocast():
            out = chunk(inp)
        return loss(out, target) if last else out

    return run
