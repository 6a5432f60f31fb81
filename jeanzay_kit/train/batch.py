"""Batches of any nesting: move them to the device leaf by leaf, split them into the
model's inputs and the target, join micro-batches, and describe them in one line."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

import torch


def to_device(batch: Any, device: torch.device, non_blocking: bool = False) -> Any:
    """Every tensor leaf on `device` (non_blocking from pinned memory); other leaves
    (strings, numbers, None) as they are."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=non_blocking)
    if isinstance(batch, Mapping):
        moved = {k: to_device(v, device, non_blocking) for k, v in batch.items()}
        if type(batch) is dict:
            return moved
        try:  # a dict subclass such as transformers' BatchEncoding keeps its type
            return cast(Any, type(batch))(moved)
        except TypeError:
            return moved
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # a namedtuple
        return type(batch)(*(to_device(v, device, non_blocking) for v in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_device(v, device, non_blocking) for v in batch)
    return batch


def split_batch(
    batch: Any, target_key: str | None = None
) -> tuple[Sequence[Any], Mapping[str, Any], Any]:
    """(positional inputs, keyword inputs, target) of a batch.

    A tuple/list: the last element is the target, the others the inputs; a mapping:
    keyword inputs (without `target_key`, which is the target when given); a tensor:
    the only input, no target."""
    if isinstance(batch, Mapping):
        kwargs = dict(batch)
        target = kwargs.pop(target_key) if target_key is not None else None
        return (), kwargs, target
    if isinstance(batch, (list, tuple)):
        if len(batch) < 2:
            return tuple(batch), {}, None
        return tuple(batch[:-1]), {}, batch[-1]
    return (batch,), {}, None


def concat(batches: list[Any]) -> Any:
    """Micro-batches joined along the first dimension, leaf by leaf (a pipeline cuts the
    whole step's share into its own micro-batches)."""
    first = batches[0]
    if isinstance(first, torch.Tensor):
        return torch.cat(batches)
    if isinstance(first, Mapping):
        return {k: concat([b[k] for b in batches]) for k in first}
    if isinstance(first, (list, tuple)):
        return type(first)(concat(list(parts)) for parts in zip(*batches, strict=True))
    return first


def describe(value: Any, depth: int = 0) -> str:
    """One line: `tuple(Tensor[32, 1, 8, 8] float32, Tensor[32] int64)`."""
    if isinstance(value, torch.Tensor):
        dtype = str(value.dtype).removeprefix("torch.")
        return f"Tensor[{', '.join(map(str, value.shape))}] {dtype}"
    if depth > 3:
        return type(value).__name__
    if isinstance(value, Mapping):
        inner = ", ".join(f"{k}: {describe(v, depth + 1)}" for k, v in list(value.items())[:8])
        return f"{type(value).__name__}({inner})"
    if isinstance(value, (list, tuple)):
        inner = ", ".join(describe(v, depth + 1) for v in list(value)[:8])
        return f"{type(value).__name__}({inner}{', ...' if len(value) > 8 else ''})"
    return type(value).__name__
