"""Your dataset, model and loss for one attempt, built once per process: rank 0's
start-of-run check (train/check.py) tries the very objects its training then uses.

Training begins from the same state whether the parts were only built or checked first.
The check reads a micro-batch (which draws from the random generators) and runs forward
and backward (which leave gradients and move a BatchNorm's running statistics), so
`tried` gives back the weights and buffers the model was built with, no gradients, a
stream's position (where it has a state_dict) and the random state right after the
build. Every rank builds with the same seed in the same order, so rank 0's checked model
equals the model the other ranks build.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from jeanzay_kit.config.spec import JobSpec
from jeanzay_kit.train import components as build
from jeanzay_kit.train.loss import ComputeLoss
from jeanzay_kit.train.schedule import seed_everything

# How a build is guarded: (config key, what it builds, the builder, its config node).
Guard = Callable[[str, str, Callable[[], Any], Mapping[str, Any]], Any]


@dataclass(frozen=True)
class RandomState:
    """Python's, NumPy's and torch's generators (the device's too, on a GPU)."""

    python: Any
    numpy: Any
    torch_cpu: torch.Tensor
    device: torch.device | None  # a CUDA device whose generator is kept
    torch_device: torch.Tensor | None

    @classmethod
    def now(cls, device: torch.device | None = None) -> RandomState:
        cuda = device if device is not None and device.type == "cuda" else None
        return cls(
            python=random.getstate(),
            numpy=np.random.get_state(),
            torch_cpu=torch.get_rng_state(),
            device=cuda,
            torch_device=torch.cuda.get_rng_state(cuda) if cuda is not None else None,
        )

    def restore(self) -> None:
        random.setstate(self.python)
        np.random.set_state(self.numpy)
        torch.set_rng_state(self.torch_cpu)
        if self.device is not None and self.torch_device is not None:
            torch.cuda.set_rng_state(self.torch_device, self.device)


@dataclass(frozen=True)
class Parts:
    """What `build_parts` built, and the random state training starts from."""

    dataset: Any
    model: nn.Module
    compute_loss: ComputeLoss
    random: RandomState


def _unguarded(key: str, what: str, make: Callable[[], Any], node: Mapping[str, Any]) -> Any:
    return make()


def build_parts(
    spec: JobSpec,
    *,
    warn: bool,
    device: torch.device | None = None,
    guard: Guard = _unguarded,
) -> Parts:
    """Seed, then build the dataset, the model and the loss, in that order (every rank
    alike). guard: how a builder's failure is said (the check names the key); device: a
    CUDA device whose random state is kept with the others."""
    seed_everything(spec.train.seed)
    dataset = guard("data", "dataset", lambda: build.build_dataset(spec), spec.data)
    model = guard("model", "model", lambda: build.build_model(spec, warn=warn), spec.model)
    compute_loss = build.build_loss(spec, model)
    return Parts(dataset, model, compute_loss, RandomState.now(device))


def for_training(checked: Parts | None, spec: JobSpec, *, warn: bool) -> Parts:
    """What an attempt trains: the parts rank 0's check tried, the random state put back
    as right after their build (the check drew from it), or new ones."""
    if checked is None:
        return build_parts(spec, warn=warn)
    checked.random.restore()
    return checked


@contextmanager
def tried(parts: Parts) -> Iterator[Parts]:
    """Use the parts inside the block (to(device), forward, backward, a read); they leave
    it as built: weights and buffers, no gradients, a stream's state, the random state."""
    kept = {k: v.detach().to("cpu", copy=True) for k, v in parts.model.state_dict().items()}
    stream = parts.dataset if callable(getattr(parts.dataset, "state_dict", None)) else None
    position = stream.state_dict() if stream is not None else None
    try:
        yield parts
    finally:
        parts.model.load_state_dict(kept)  # copied into the tensors it has now
        parts.model.zero_grad(set_to_none=True)
        if stream is not None and callable(getattr(stream, "load_state_dict", None)):
            stream.load_state_dict(position)
        parts.random.restore()
