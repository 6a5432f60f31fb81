"""Language modelling data in nanoGPT's format: a flat array of uint16 token ids on disk.

The file is read through `np.memmap`, never loaded whole: a sample is one window of
`block_size + 1` tokens, inputs the first `block_size`, targets the same shifted by one.
With `random_windows` (training, as nanoGPT does) each read draws the window's start with
numpy's global generator, which the toolkit seeds per sample from its position in the
run (runtime/seeded_samples.py), so a resumed run reads the same windows. Without it
(validation) window i starts at token i x block_size, so every evaluation reads the same
text.

Write a token file from text files (byte-level ids: 0..255, the vocabulary of
`model=gpt`):

    python -m jeanzay_kit.examples.tokens OUT.bin FILE [FILE ...]
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

TOKEN_DTYPE = np.uint16  # nanoGPT's: vocabularies up to 65,536 (GPT-2's is 50,257)


def write_token_file(out: Path, texts: Iterable[Path]) -> int:
    """Byte-level token ids of the texts, one after the other, as uint16; the count."""
    ids = np.concatenate(
        [np.frombuffer(Path(p).read_bytes(), dtype=np.uint8) for p in texts] or [np.array([])]
    ).astype(TOKEN_DTYPE)
    tmp = out.with_name(out.name + ".tmp")
    ids.tofile(tmp)
    os.replace(tmp, out)  # a reader never meets half a file
    return len(ids)


class TokenWindows(Dataset):
    """(inputs, targets) windows of a uint16 token file: `block_size` tokens each."""

    def __init__(
        self,
        path: str,
        block_size: int = 64,
        random_windows: bool = True,
        samples: int | None = None,
    ):
        self.path, self.block_size, self.random_windows = str(path), block_size, random_windows
        self.n_tokens = os.path.getsize(self.path) // np.dtype(TOKEN_DTYPE).itemsize
        if self.n_tokens < block_size + 1:
            raise ValueError(
                f"{self.path} holds {self.n_tokens} tokens, fewer than one window of "
                f"block_size + 1 = {block_size + 1}"
            )
        # An epoch: as many windows as the file holds side by side (or `samples`).
        self.count = samples or (self.n_tokens - 1) // block_size
        self.tokens_per_sample = block_size  # tokens/s in the progress line
        self._tokens: np.memmap | None = None

    def tokens(self) -> np.memmap:
        # Opened in the process that reads (a loader worker maps the file itself rather
        # than receiving a pickled copy of it).
        if self._tokens is None:
            self._tokens = np.memmap(self.path, dtype=TOKEN_DTYPE, mode="r")
        return self._tokens

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_tokens": None}

    def __len__(self) -> int:
        return self.count

    def window(self, index: int) -> torch.Tensor:
        last = self.n_tokens - self.block_size - 1
        if self.random_windows:
            start = int(np.random.randint(0, last + 1))
        else:
            start = min(index * self.block_size, last)
        chunk = self.tokens()[start : start + self.block_size + 1]
        return torch.from_numpy(chunk.astype(np.int64))

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        chunk = self.window(index)
        return chunk[:-1], chunk[1:]


class TokenDicts(TokenWindows):
    """The same windows as a Hugging Face-style batch: `input_ids`, `attention_mask` and
    `labels` (the same ids: the model shifts them itself)."""

    # Another sample shape on purpose (a dict, as Hugging Face models take): the same
    # windows, not a drop-in for a loop that expects pairs.
    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:  # type: ignore[override]
        ids = self.window(index)[:-1]
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Write a nanoGPT-format token file (uint16, byte-level ids) from text files."
    )
    parser.add_argument("out", type=Path)
    parser.add_argument("texts", type=Path, nargs="+")
    args = parser.parse_args(argv)
    count = write_token_file(args.out, args.texts)
    print(f"wrote {args.out}: {count} tokens")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
