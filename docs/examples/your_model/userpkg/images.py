"""A map-style dataset of small images with integer labels, written against torch only."""

import torch
from torch.utils.data import Dataset


class RandomImages(Dataset):
    """`size` single-channel 8x8 noise images; the label is the quadrant made brighter."""

    def __init__(self, size: int = 2000, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        self.images = torch.rand(size, 1, 8, 8, generator=g)
        self.labels = torch.randint(0, 4, (size,), generator=g)
        for i, label in enumerate(self.labels.tolist()):
            row, col = divmod(label, 2)
            self.images[i, 0, 4 * row : 4 * row + 4, 4 * col : 4 * col + 4] += 0.5

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return self.images[index], int(self.labels[index])
