"""A small CNN: a plain nn.Module, trained with a criterion (loss=criterion)."""

import torch
from torch import nn


class SmallCNN(nn.Module):
    def __init__(self, channels: int = 8, classes: int = 4):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, channels, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2)
        )
        self.head = nn.Linear(channels * 4 * 4, classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(images).flatten(1))
