"""The global sample stream: world-size invariant, resumable, every sample once per epoch."""

from __future__ import annotations

import numpy as np
import pytest

from jeanzay_kit.runtime.sampler import GlobalBatchPlan


def plans(dp: int, micro: int, size: int = 100, gbs: int = 16, seed: int = 3):
    return [GlobalBatchPlan(size, gbs, micro, dp, r, seed) for r in range(dp)]


def step_samples(dp: int, micro: int, step: int) -> list[int]:
    """Every sample of the step, in global-batch order, gathered from all ranks."""
    per_rank = [p.step_indices(step) for p in plans(dp, micro)]
    out = []
    for a in range(len(per_rank[0])):
        for r in range(dp):
            out.extend(per_rank[r][a].tolist())
    return out


@pytest.mark.parametrize(("dp", "micro"), [(1, 16), (1, 4), (2, 4), (4, 4), (4, 2), (8, 2)])
def test_a_step_sees_the_same_samples_whatever_the_world_size(dp: int, micro: int) -> None:
    for step in range(9):  # crosses epoch boundaries (100 samples, 16 per step)
        assert step_samples(dp, micro, step) == step_samples(1, 16, step)


def test_each_epoch_visits_every_sample_once() -> None:
    plan = plans(1, 4)[0]
    stream = plan.stream(0, 300)
    for epoch in range(3):
        assert sorted(stream[epoch * 100 : (epoch + 1) * 100].tolist()) == list(range(100))
    assert not np.array_equal(stream[:100], stream[100:200])  # reshuffled each epoch


def test_resuming_from_the_sample_position_continues_the_stream() -> None:
    plan = plans(2, 4)[1]
    pos = plan.sample_position(7)
    assert pos == 7 * 16
    assert np.array_equal(plan.stream(pos, 16), plan.stream(0, 200)[pos : pos + 16])


def test_a_resume_on_another_world_size_reads_on_from_the_recorded_position() -> None:
    # Saved at step 5 on 4 ranks, resumed on 2: steps 5.. read the positions the
    # uninterrupted 4-rank run would have read (a change of global batch, allowed only
    # with checkpoint.allow_config_change, would still read on from the recorded index).
    saved = plans(4, 2)
    resumed = [
        GlobalBatchPlan(100, 16, 4, 2, r, 3, start_step=5, start_position=80) for r in (0, 1)
    ]
    for step in range(5, 12):
        straight = sorted(np.concatenate([a for p in saved for a in p.step_indices(step)]))
        again = sorted(np.concatenate([a for p in resumed for a in p.step_indices(step)]))
        assert again == straight
    bigger = GlobalBatchPlan(100, 32, 4, 2, 0, 3, start_step=5, start_position=80)
    assert bigger.sample_position(6) == 112


def test_accumulation_steps() -> None:
    assert plans(2, 4)[0].accumulation_steps == 2
    assert plans(1, 16)[0].accumulation_steps == 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            dict(dataset_size=0, global_batch=8, micro_batch=4, dp_size=1, dp_rank=0, seed=0),
            "empty",
        ),
        (
            dict(dataset_size=10, global_batch=10, micro_batch=4, dp_size=1, dp_rank=0, seed=0),
            "not divisible",
        ),
        (
            dict(dataset_size=10, global_batch=8, micro_batch=4, dp_size=2, dp_rank=2, seed=0),
            "outside",
        ),
    ],
)
def test_bad_plans_are_refused(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        GlobalBatchPlan(**kwargs)
