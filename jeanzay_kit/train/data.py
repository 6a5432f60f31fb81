"""Example datasets that need no download: synthetic regression and Python stdlib text.

A dataset here is a map-style object with `__len__` and `batch(indices) -> (inputs,
targets)` returning whole tensors, so a micro-batch is built in one vectorised call.
Replace them through `_target_` in conf/data/.
"""

from __future__ import annotations

import sysconfig
from pathlib import Path

import numpy as np
import torch


class SyntheticRegression:
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

    def batch(self, indices: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        idx = torch.from_numpy(np.asarray(indices, dtype=np.int64))
        return self.x[idx], self.y[idx]


class StdlibText:
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

    def batch(self, indices: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        starts = torch.from_numpy(np.asarray(indices, dtype=np.int64)) * self.stride
        offsets = torch.arange(self.block_size + 1)
        windows = self.data[starts[:, None] + offsets[None, :]]
        return windows[:, :-1], windows[:, 1:]
