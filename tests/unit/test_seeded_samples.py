"""A sample's random numbers come from (seed, position), whoever reads it
(runtime/seeded_samples.py), and the training process's own generators are left alone."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from torch.utils.data import Dataset

from jeanzay_kit.config.sections import LoaderSettings
from jeanzay_kit.runtime.seeded_samples import IndexedSamples, SeededSamples, keys, sample_seed
from jeanzay_kit.train.loader import build_loader


class Draws(Dataset):
    """Each read draws from torch, numpy and random, as augmentation code does."""

    def __len__(self) -> int:
        return 32

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.tensor([index, torch.rand(()).item(), np.random.rand(), random.random()])


class BatchDraws(Draws):
    def __getitems__(self, indices: list[int]) -> list[torch.Tensor]:
        return [self[i] for i in indices]


def read(dataset: Dataset, workers: int, batches: list[list[tuple[int, int]]]) -> torch.Tensor:
    settings = LoaderSettings(workers, False, False, None, None)
    loader = build_loader(dataset, batches, settings, workers=workers, device_type="cpu", seed=7)
    return torch.cat(list(loader))


BATCHES = [keys(np.array([3, 1, 4, 1]), np.arange(0, 4)), keys(np.array([5, 9]), np.arange(4, 6))]


@pytest.mark.parametrize("dataset", [Draws(), BatchDraws()], ids=["getitem", "getitems"])
def test_the_same_keys_draw_the_same_numbers_whoever_reads_them(dataset: Dataset) -> None:
    alone = read(dataset, 0, BATCHES)
    assert torch.equal(alone, read(dataset, 2, BATCHES))  # two worker processes
    assert torch.equal(alone, read(dataset, 1, BATCHES))
    # Index 1 at positions 1 and 3 (another epoch, say): augmented otherwise.
    assert not torch.equal(alone[1, 1:], alone[3, 1:])
    # The seed (train.seed) changes every draw.
    settings = LoaderSettings(0, False, False, None, None)
    other = torch.cat(
        list(build_loader(dataset, BATCHES, settings, workers=0, device_type="cpu", seed=8))
    )
    assert not torch.equal(alone[:, 1:], other[:, 1:])


@pytest.mark.parametrize("read_by", [lambda d: SeededSamples(d, 0), IndexedSamples])
@pytest.mark.parametrize("dataset", [Draws(), BatchDraws()], ids=["getitem", "getitems"])
def test_the_training_process_torch_generator_is_left_where_it_was(read_by, dataset) -> None:
    """Dropout draws from it: the data must not move it, a training batch's (seeded) or an
    evaluation's read in the training process (IndexedSamples). numpy's and random's are
    left seeded by the last sample: restoring numpy's would cost ten times the seeding."""
    torch.manual_seed(1)
    expected = torch.rand(3)
    torch.manual_seed(1)
    read_by(dataset).__getitems__(BATCHES[0])
    assert torch.equal(expected, torch.rand(3))


def test_seeds_differ_between_neighbours_and_fit_32_bits() -> None:
    seeds = {sample_seed(0, p) for p in range(10_000)} | {sample_seed(1, p) for p in range(100)}
    assert len(seeds) == 10_100
    assert all(0 <= s < 2**32 for s in seeds)
