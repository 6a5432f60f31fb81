"""What your code must provide: every contract the toolkit's training meets, in one place.

Each is torch's own where torch has one (a map-style `Dataset`, an `nn.Module`, a criterion)
and a small optional extra where it needs one (a pipeline split, FSDP's blocks). They are
Protocols: nothing to inherit, any object with the methods fits. `jzk check` (train/check.py)
tries them on one real micro-batch and names the first that breaks, before any job is
queued; docs/your-model-and-data.md shows each with an example.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import torch
from torch import nn


@runtime_checkable
class MapDataset(Protocol):
    """`data._target_`: any map-style `torch.utils.data.Dataset`.

    `__getitem__(i)` returns one sample: a tensor, a tuple/list, a dict, or any nesting of
    them with tensors at the leaves (numbers and strings are fine: the collate function
    turns them into tensors or lists). The toolkit's batch sampler asks for indices in
    `range(len(dataset))`. Optional, torch's batched fetch: `__getitems__(indices)`
    returning the list of those samples in one call (a vectorised dataset is then as
    fast as slicing a tensor). Optional, for the throughput line: `tokens_per_sample`.
    """

    def __len__(self) -> int: ...

    def __getitem__(self, index: int) -> Any: ...


class Criterion(Protocol):
    """`loss=criterion`: `criterion(output, target)` returns a scalar tensor, as
    `torch.nn.CrossEntropyLoss()` and every `torch.nn` loss with its default reduction."""

    def __call__(self, output: Any, target: Any) -> torch.Tensor: ...


@runtime_checkable
class ModelWithLoss(Protocol):
    """`loss=model`: the model has `loss(output, target)` returning a scalar tensor (the
    shipped examples do)."""

    def loss(self, output: Any, target: Any) -> torch.Tensor: ...


class LossOutput(Protocol):
    """`loss=output`: what `model(...)` returns holds the loss: a scalar tensor, an object
    with a `.loss` scalar tensor, or a mapping with a "loss" entry (Hugging Face models
    given labels return one)."""

    loss: torch.Tensor


# How a batch reaches the model (train/batch.py):
#   a tuple/list (x, ..., target): model(x, ...), the last element is the target;
#   a dict: model(**batch), no target (loss=output), or the entry `loss.target_key`
#   taken out of it for a criterion;
#   a tensor: model(batch), no target.
Batch = Any
Inputs = tuple[Sequence[Any], Mapping[str, Any]]


@runtime_checkable
class PipelineSplittable(Protocol):
    """`parallel.mode=pipeline|pipeline_ddp`: `pipeline_chunk(index, count)` returns the
    module stage `index` of `count` runs (a tensor in, a tensor out), keeping the original
    parameter names so checkpoints are the same whatever the mode. Interleaved schedules
    also need `merge_chunks(chunks)`: one module viewing several chunks."""

    def pipeline_chunk(self, index: int, count: int) -> nn.Module: ...


class BlockSharded(Protocol):
    """`parallel.mode=fsdp` shards block by block when the model has `blocks`, an
    `nn.ModuleDict` or `nn.ModuleList` of its repeated layers (one block unsharded at a
    time: the memory FSDP saves); without it the whole model is one unit."""

    blocks: nn.ModuleDict | nn.ModuleList


class ActivationCheckpointable(Protocol):
    """`train.activation_checkpointing=true` sets this attribute; the model recomputes its
    blocks' activations in backward when it is true (examples/models.py shows how)."""

    activation_checkpointing: bool


class CountsFlops(Protocol):
    """Optional, for the MFU column: training FLOPs (forward and backward) of one sample.
    A language model may state `flops_per_token()` instead, multiplied by the dataset's
    `tokens_per_sample`."""

    def flops_per_sample(self) -> float: ...
