"""Hugging Face style: samples are dicts, and the model returns an output with `.loss`
when it is given labels (loss=output)."""

from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.data import Dataset


class Regression(Dataset):
    def __init__(self, size: int = 1024, features: int = 16, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(size, features, generator=g)
        self.y = torch.tanh(self.x @ torch.randn(features, 1, generator=g) / features**0.5)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"features": self.x[index], "labels": self.y[index]}


@dataclass
class Output:
    prediction: torch.Tensor
    loss: torch.Tensor | None = None


class Regressor(nn.Module):
    def __init__(self, features: int = 16, hidden: int = 32):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(features, hidden), nn.Tanh(), nn.Linear(hidden, 1))

    def forward(self, features: torch.Tensor, labels: torch.Tensor | None = None) -> Output:
        prediction = self.net(features)
        loss = None if labels is None else nn.functional.mse_loss(prediction, labels)
        return Output(prediction, loss)
