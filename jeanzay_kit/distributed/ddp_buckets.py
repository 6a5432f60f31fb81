"""DDP's gradient buckets laid out on a resumed run as on the uninterrupted one.

DDP's first synchronised backward puts every gradient in one bucket; the next forward
rebuilds the buckets in the order the gradients became ready. The layout sets where each
gradient sits in the all-reduced buffer, and a ring all-reduce over 3+ ranks sums each
position in a different rank order: a run resumed at step N would sum step N's gradients
in another order than the uninterrupted run (which rebuilt after its step 1), 1e-8 apart
and growing. One throw-away backward, with the random generators, the gradients and the
buffers put back, triggers the same rebuild. The toolkit's loop does it with its own loss
(train/strategies/ddp.py); a session's model with the sum of its outputs, at its first
forward after a resume (runtime/session.py): the order gradients become ready is the
model's, whatever the loss. Two ranks need none of it: a + b is b + a.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from torch import nn


def throwaway_backward(
    model: nn.Module, backward: Callable[[], None], device: torch.device
) -> None:
    """Run `backward` (a forward and a backward of `model`) and leave no trace of it: the
    random generators (dropout), the parameters' gradients and the buffers (BatchNorm's
    running statistics, which a forward in training mode moves) are as before."""
    devices = [device] if device.type == "cuda" else []
    buffers = [buffer.detach().clone() for buffer in model.buffers()]
    grads = [None if p.grad is None else p.grad.detach().clone() for p in model.parameters()]
    with torch.random.fork_rng(devices=devices):
        backward()
    for param, grad in zip(model.parameters(), grads, strict=True):
        param.grad = grad
    with torch.no_grad():
        for buffer, saved in zip(model.buffers(), buffers, strict=True):
            buffer.copy_(saved)


class RebuildOnResume:
    """A forward pre-hook (with_kwargs) of a session's DDP model: on the first forward
    with gradients once the run has resumed (`resumed()`: its start step is past 0), the
    throw-away backward, synchronised even under no_sync (the all-reduce is what records
    the order), before the forward goes on as the user called it."""

    def __init__(self, resumed: Callable[[], bool], device: torch.device) -> None:
        self.resumed = resumed
        self.device = device
        self.pending = True

    def __call__(self, ddp: Any, args: tuple, kwargs: dict) -> None:
        # Not before the resume: a warm-up forward of the user's before ckpt.resume()
        # would otherwise use up the one rebuild.
        if not self.pending or not torch.is_grad_enabled() or not self.resumed():
            return
        self.pending = False  # the throw-away forward below calls this hook again

        def backward() -> None:
            out = ddp(*args, **kwargs)
            parts = [t.float().sum() for t in _tensors(out) if t.requires_grad]
            if parts:
                torch.stack(parts).sum().backward()

        synced = ddp.require_backward_grad_sync
        ddp.require_backward_grad_sync = True
        try:
            throwaway_backward(ddp, backward, self.device)
        finally:
            ddp.require_backward_grad_sync = synced


def _tensors(value: object) -> Iterator[torch.Tensor]:
    """The tensors of a model's output: a tensor, or nested in tuples, lists and dicts
    (Hugging Face's ModelOutput is a dict)."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _tensors(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _tensors(item)
