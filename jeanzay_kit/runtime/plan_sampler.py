"""s.sampler(...): the toolkit's global-batch plan as a batch sampler for torch's
DataLoader, over the steps from where the run resumed (runtime/session.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from jeanzay_kit.contracts import MapDataset
from jeanzay_kit.errors import JzkError
from jeanzay_kit.runtime.batch_sampler import PlanBatchSampler
from jeanzay_kit.runtime.run import Run
from jeanzay_kit.runtime.sampler import GlobalBatchPlan
from jeanzay_kit.runtime.seeded_samples import SeededSamples


class PlanSampler(PlanBatchSampler):
    """s.sampler(...): the toolkit's batch sampler (runtime/batch_sampler.py) over the
    steps from where the run resumed on, to session(steps=...) or without end. The start
    is read when the DataLoader starts iterating: iterate after ckpt.resume().

    `dataset` is what the DataLoader reads: the dataset itself, or with
    seed_per_sample=True the dataset read by (index, position) keys, each sample's random
    numbers seeded from its global position (runtime/seeded_samples.py)."""

    def __init__(
        self,
        run: Run,
        dataset: MapDataset,
        global_batch: int,
        micro_batch: int,
        *,
        seed: int,
        accumulation: int,
        seed_per_sample: bool,
    ) -> None:
        self.run = run
        self.dataset_size, self.global_batch, self.micro_batch = (
            len(dataset),
            global_batch,
            micro_batch,
        )
        self.seed, self.accumulation_steps = seed, accumulation
        self.dataset: Any = SeededSamples(dataset, seed) if seed_per_sample else dataset
        super().__init__(self.plan(), 0, None, positions=seed_per_sample)

    def plan(self) -> GlobalBatchPlan:
        run = self.run
        return GlobalBatchPlan(
            dataset_size=self.dataset_size,
            global_batch=self.global_batch,
            micro_batch=self.micro_batch,
            dp_size=run.info.world_size,
            dp_rank=run.info.rank,
            seed=self.seed,
            start_step=run.start_step,
            start_position=run.start_position,
        )

    def first_step(self) -> int:
        return self.run.start_step

    def last_step(self) -> int | None:
        return self.run.steps

    def __iter__(self) -> Iterator[list[Any]]:
        for ckpt in self.run.checkpointers:
            if not ckpt.resumed:
                raise JzkError(
                    "the DataLoader over s.sampler(...) started before ckpt.resume(): it "
                    "would read from step 0 whatever the checkpoint. HINT: call "
                    "ckpt.resume() first, then iterate the loader"
                )
        # A generator: the check runs at the first batch, where the start is read.
        yield from super().__iter__()

    def __len__(self) -> int:
        if self.run.steps is None:
            raise TypeError("s.sampler(...) has no length without session(steps=...)")
        return super().__len__()
