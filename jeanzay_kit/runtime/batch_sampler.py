"""The one batch sampler every loop reads its data through: the toolkit's loop
(train/loop.py) and a session's (runtime/session.py `s.sampler`).

It walks this rank's micro-batches of the global-batch plan (runtime/sampler.py), step
after step, as a torch `batch_sampler`. Each micro-batch is a list of dataset indices,
or, with positions=True, of (dataset index, global sample position) keys: the position
seeds the sample's random numbers (runtime/seeded_samples.py), so an augmentation is the
same whoever reads the sample, after a resume and on another world size.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from torch.utils.data import Sampler

from jeanzay_kit.runtime.sampler import GlobalBatchPlan
from jeanzay_kit.runtime.seeded_samples import keys


class PlanBatchSampler(Sampler[list[Any]]):
    """This rank's micro-batches of steps [first_step, last_step) (last_step None: no
    end), `accumulation_steps` per step, in order."""

    def __init__(
        self,
        plan: GlobalBatchPlan,
        first_step: int,
        last_step: int | None,
        *,
        positions: bool = True,
    ) -> None:
        self._plan, self._first, self._last = plan, first_step, last_step
        self.positions = positions

    # Read at each iteration: a session's sampler takes them from the session, where
    # ckpt.resume() put the run (runtime/session.py PlanSampler).
    def plan(self) -> GlobalBatchPlan:
        return self._plan

    def first_step(self) -> int:
        return self._first

    def last_step(self) -> int | None:
        return self._last

    def __iter__(self) -> Iterator[list[Any]]:
        plan, step, last = self.plan(), self.first_step(), self.last_step()
        while last is None or step < last:
            if self.positions:
                for indices, positions in zip(
                    plan.step_indices(step), plan.step_positions(step), strict=True
                ):
                    yield keys(indices, positions)
            else:
                for indices in plan.step_indices(step):
                    yield indices.tolist()
            step += 1

    def __len__(self) -> int:
        last = self.last_step()
        if last is None:
            raise TypeError("this batch sampler has no end (no number of steps was given)")
        return max(0, last - self.first_step()) * self.plan().accumulation_steps
