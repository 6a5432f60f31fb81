"""Example datasets that need no download: synthetic regression and Python stdlib text.

Each is a map-style `torch.utils.data.Dataset` (`__getitem__`, `__len__`) whose samples are
(inputs, target) pairs. They also implement torch's batched fetch, `__getitems__`: the
DataLoader then gathers a micro-batch with one indexing operation instead of one call
per sample. Replace them through `_target_` in conf/data/ (docs/your-model-and-data.md).
"""

from __future__ import annotations

import sysconfig
from pathlib import Path

import torch
from torch.utils.data import Dataset


class SyntheticRegression(Dataset):
    """y = tanh(x A) B + noise: a smooth target an MLP learns in a few hundred steps."""

    def __init__(
        self,
        size: int = 8192,
        in_dim: int = 32,
        out_dim: int = 8,
        noise: float = 0.01,
        seed: int = 1234,
    ):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(size, in_dim, generator=g)
        a = torch.randn(in_dim, 64, generator=g) / in_dim**0.5
        b = torch.randn(64, out_dim, generator=g) / 8.0
        self.y = torch.tanh(self.x @ a) @ b + noise * torch.randn(size, out_dim, generator=g)
        self.tokens_per_sample = 0

    def __len__(self) -> int:
        return self.x.shape[0]

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[index], self.y[index]

    def __getitems__(self, indices: list[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        idx = torch.as_tensor(indices, dtype=torch.long)
        return list(zip(self.x[idx].unbind(0), self.y[idx].unbind(0), strict=True))


class StdlibText(Dataset):
    """Byte-level language modelling on the Python standard library's own sources.

    Every machine with Python has this text, so nothing is downloaded. Sample i is the
    window of block_size + 1 bytes starting at i * stride.
    """

    def __init__(
        self,
        block_size: int = 64,
        max_bytes: int = 2_000_000,
        stride: int | None = None,
        root: str | None = None,
    ):
        base = Path(root or sysconfig.get_paths()["stdlib"])
        chunks, total = [], 0
        for path in sorted(base.glob("*.py")):
            data = path.read_bytes()
            chunks.append(data)
            total += len(data)
            if total >= max_bytes:
                break
        raw = b"".join(chunks)[:max_bytes]
        if len(raw) < 2 * (block_size + 1):
            raise ValueError(f"only {len(raw)} bytes of text under {base}")
        self.data = torch.frombuffer(bytearray(raw), dtype=torch.uint8).long()
        self.block_size = block_size
        self.stride = stride or block_size
        self.tokens_per_sample = block_size

    def __len__(self) -> int:
        return (len(self.data) - self.block_size - 1) // self.stride + 1

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        start = index * self.stride
        window = self.data[start : start + self.block_size + 1]
        return window[:-1], window[1:]

    def __getitems__(self, indices: list[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        starts = torch.as_tensor(indices, dtype=torch.long) * self.stride
        offsets = torch.arange(self.block_size + 1)
        windows = self.data[starts[:, None] + offsets[None, :]]
        return list(zip(windows[:, :-1].unbind(0), windows[:, 1:].unbind(0), strict=True))
