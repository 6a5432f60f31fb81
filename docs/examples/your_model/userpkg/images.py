"""A map-style dataset of small images with integer labels, written against torch only."""

import random

import numpy as np
import torch
from torch.utils.data import Dataset


class RandomImages(Dataset):
    """`size` single-channel 8x8 noise images; the label is the quadrant made brighter.

    augment=True: each read flips the image left-right half of the time (the label
    follows), adds a little noise and blanks a pixel now and then, drawing from torch,
    numpy and `random` as augmentation code does."""

    def __init__(self, size: int = 2000, seed: int = 0, augment: bool = False):
        g = torch.Generator().manual_seed(seed)
        self.images = torch.rand(size, 1, 8, 8, generator=g)
        self.labels = torch.randint(0, 4, (size,), generator=g)
        for i, label in enumerate(self.labels.tolist()):
            row, col = divmod(label, 2)
            self.images[i, 0, 4 * row : 4 * row + 4, 4 * col : 4 * col + 4] += 0.5
        self.augment = augment

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        image, label = self.images[index], int(self.labels[index])
        if not self.augment:
            return image, label
        if torch.rand(()) < 0.5:  # a horizontal flip moves the bright quadrant
            image, label = image.flip(-1), label ^ 1
        image = image + torch.from_numpy(np.random.normal(0, 0.05, image.shape)).float()
        if random.random() < 0.25:
            image = image.clone()
            image[0, random.randrange(8), random.randrange(8)] = 0.0
        return image, label
