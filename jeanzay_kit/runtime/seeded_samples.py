"""Random augmentation that a resume cannot change: each sample's random numbers come from
(train.seed, its global sample position), not from whichever loader worker reads it.

A dataset that draws random numbers in `__getitem__` (a random crop, a flip, masking) with
torch, numpy or Python's `random` would otherwise draw them from its worker's generators,
seeded per worker and per loader: another `loader.num_workers`, a resumed attempt (a new
loader) or another world size (other workers read the sample) would augment it otherwise,
and the resumed run would not end with the uninterrupted model. Here the loader is given
(index, position) keys (train/loader.py: PlanBatchSampler) and `SeededSamples` seeds the
three global generators from the position before it reads each sample. The position is
unique over the run (step x global batch + offset), so a sample is augmented differently
in each epoch, and identically whoever reads it.

In the training process itself (loader.num_workers=0) torch's CPU generator is put back
after each batch: the model's own random numbers (dropout) must not depend on the data.
numpy's and `random`'s are left where the last sample's seeding put them (saving and
restoring numpy's state costs about 80 us a batch, ten times the seeding; both are in
every checkpoint, so a resume stays exact). A dataset's own `__getitems__` reads a whole
micro-batch at once: it is seeded once, from the micro-batch's first position
(micro-batches are the same whatever the world size).
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, get_worker_info

from jeanzay_kit.ending.ending_rules import INDEX_NOTE

MASK64 = (1 << 64) - 1


def sample_seed(seed: int, position: int) -> int:
    """A 32-bit seed from (seed, position): splitmix64's finaliser, so that neighbouring
    positions get unrelated seeds (and it costs well under a microsecond)."""
    z = (seed * 0x9E3779B97F4A7C15 + position + 0x632BE59BD9B4E019) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return (z ^ (z >> 31)) & 0xFFFFFFFF


def seed_generators(value: int) -> None:
    """torch's CPU generator, numpy's global one and Python's `random`; not CUDA's."""
    torch.random.default_generator.manual_seed(value)
    np.random.seed(value)
    random.seed(value)


@contextmanager
def torch_generator_kept() -> Iterator[None]:
    """Put torch's CPU generator back afterwards, in the training process only (a loader
    worker's generators serve nothing else)."""
    if get_worker_info() is not None:
        yield
        return
    saved = torch.get_rng_state()
    try:
        yield
    finally:
        torch.set_rng_state(saved)


class SeededSamples(Dataset):
    """The user's map-style dataset read by (index, position) keys."""

    def __init__(self, dataset: Any, seed: int):
        self.dataset, self.seed = dataset, seed

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key: tuple[int, int]) -> Any:
        return self.__getitems__([key])[0]

    def __getitems__(self, keys: Sequence[tuple[int, int]]) -> list[Any]:
        own = getattr(self.dataset, "__getitems__", None)
        with torch_generator_kept():
            if own is not None:  # the dataset reads the batch at once: one seed for it
                seed_generators(sample_seed(self.seed, keys[0][1]))
                return own([index for index, _ in keys])
            samples = []
            for index, position in keys:
                seed_generators(sample_seed(self.seed, position))
                try:
                    samples.append(self.dataset[index])
                except Exception as err:
                    # Named in the traceback (a worker's too), so the run's record says which
                    # sample failed (ending/ending_rules.py INDEX_NOTE).
                    err.add_note(f"{INDEX_NOTE}{index}")
                    raise
            return samples


def keys(indices: np.ndarray, positions: np.ndarray) -> list[tuple[int, int]]:
    """(dataset index, global position) pairs, as the loader's batch sampler yields them."""
    return list(zip(indices.tolist(), positions.tolist(), strict=True))


class IndexedSamples(Dataset):
    """The user's dataset read by (index, position) keys without seeding: evaluation, where
    nothing is resumed mid-way and every microsecond per sample shows. Read in the training
    process (a small evaluation forks no worker: train/loader.py eval_workers), a sample's
    random numbers leave torch's CPU generator where it was, as in training."""

    def __init__(self, dataset: Any):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key: tuple[int, int]) -> Any:
        return self.dataset[key[0]]

    def __getitems__(self, keys: Sequence[tuple[int, int]]) -> list[Any]:
        own = getattr(self.dataset, "__getitems__", None)
        indices = [index for index, _ in keys]
        with torch_generator_kept():
            return own(indices) if own is not None else [self.dataset[i] for i in indices]
