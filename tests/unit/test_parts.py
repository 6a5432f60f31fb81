"""Built once (train/parts.py): the start-of-run check tries the dataset, model and loss
training then uses, and gives them back as built: weights and buffers, no gradients, the
random state right after the build."""

from __future__ import annotations

import random

import numpy as np
import torch

from jeanzay_kit.config.compose import compose_config
from jeanzay_kit.config.spec import build_job_spec
from jeanzay_kit.train.check import check_and_keep
from jeanzay_kit.train.parts import build_parts

NORMED = (
    "model=custom",
    "model._target_=tests.helpers.NormedMLP",
    "loss=criterion",
    "loss.criterion._target_=torch.nn.MSELoss",
    "loader.num_workers=0",
)


def spec(*overrides: str):
    return build_job_spec(compose_config(list(overrides)))


def draws() -> tuple[float, float, float]:
    return random.random(), float(np.random.rand()), float(torch.rand(()))


def test_the_checked_parts_are_the_built_parts_and_training_starts_as_after_a_build() -> None:
    job = spec(*NORMED)
    fresh = build_parts(job, warn=False)
    expected_draws = draws()

    found, parts = check_and_keep(job, torch.device("cpu"), "fp32")
    # It tried these very parts: forward, loss and backward ran on this model.
    assert found.loss > 0 and found.parameters == sum(p.numel() for p in parts.model.parameters())
    # The check moved BatchNorm's statistics and left gradients; they are given back.
    for (name, kept), (_, built) in zip(
        parts.model.state_dict().items(), fresh.model.state_dict().items(), strict=True
    ):
        assert torch.equal(kept, built), name
    assert all(p.grad is None for p in parts.model.parameters())
    parts.random.restore()
    assert draws() == expected_draws


def test_a_forward_in_train_mode_changes_the_model_so_the_restore_is_needed() -> None:
    """The counterpart: without `tried`, the same forward/backward leaves the model
    changed (otherwise the test above could not fail)."""
    job = spec(*NORMED)
    parts, fresh = build_parts(job, warn=False), build_parts(job, warn=False)
    parts.model.train(True)
    parts.model(torch.randn(8, 32)).sum().backward()
    changed = [
        name
        for (name, a), (_, b) in zip(
            parts.model.state_dict().items(), fresh.model.state_dict().items(), strict=True
        )
        if not torch.equal(a, b)
    ]
    assert "body.1.running_mean" in changed
