"""The loss of a micro-batch, in the form `loss=` names: `compute_loss(module, batch)`.

The strategies call it for every micro-batch (train/strategies/), so a criterion, a model
that returns its own loss and a model with a `loss()` method train through the same loop.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from jeanzay_kit.config.sections import LossSettings
from jeanzay_kit.errors import ContractError
from jeanzay_kit.train.batch import split_batch


class ComputeLoss:
    """`compute_loss(module, batch)`: run `module` on the batch's inputs, then the loss.

    `module` is what the strategy calls (a DDP wrapper, an FSDP module); `owner` is the
    user's own model, whose `loss()` loss=model calls."""

    def __init__(self, settings: LossSettings, owner: nn.Module, criterion: Callable | None = None):
        self.form = settings.form
        self.target_key = settings.target_key
        self.owner = owner
        self.criterion = criterion

    def __call__(self, module: nn.Module, batch: Any) -> torch.Tensor:
        args, kwargs, target = split_batch(batch, self.target_key)
        return self.of_output(module(*args, **kwargs), target)

    def of_output(self, output: Any, target: Any) -> torch.Tensor:
        if self.form == "criterion":
            return self.criterion(output, target)  # type: ignore[misc]
        if self.form == "model":
            return self.owner.loss(output, target)  # type: ignore[operator]
        return loss_in_output(output)

    def compiled(self) -> ComputeLoss:
        """The same loss with its output -> loss part compiled too (train.compile): a
        compiled model alone leaves the loss eager, and a language model's cross-entropy
        then reads and writes its (samples x tokens x vocabulary) logits several times in
        float32 (upcast, log-softmax, its gradient); compiled, it is one fused pass each
        way. The model's own forward is compiled by the strategy."""
        twin = copy.copy(self)
        twin.of_output = torch.compile(self.of_output)  # type: ignore[method-assign]
        return twin

    def pipeline_loss(self) -> Callable[[Any, Any], torch.Tensor]:
        """(last stage's output, target) -> loss: the forms a pipeline can use (the
        loss=output refusal is config/data_rules.py's)."""
        return self.of_output


def loss_in_output(output: Any) -> torch.Tensor:
    """loss=output: the loss a model returned, as a tensor, `.loss` or `["loss"]`."""
    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, Mapping) and "loss" in output:
        return output["loss"]
    loss = getattr(output, "loss", None)
    if isinstance(loss, torch.Tensor):
        return loss
    raise ContractError(
        f"loss=output: the model returned {type(output).__name__}, which holds no loss "
        "(neither a tensor, nor .loss, nor a 'loss' entry). HINT: return the loss from "
        "forward, or compute it outside the model with loss=criterion "
        "loss.criterion._target_=torch.nn.CrossEntropyLoss"
    )
