"""The token-file examples' data (jeanzay_kit/examples/tokens.py): nanoGPT's format, a
memory map, windows of block_size + 1 tokens."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

from jeanzay_kit.examples.tokens import TokenDicts, TokenWindows, main


def test_a_token_file_holds_the_texts_bytes_as_uint16(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_bytes(b"hello ")
    (tmp_path / "b.txt").write_bytes(b"world\xff")
    assert main([str(tmp_path / "t.bin"), str(tmp_path / "a.txt"), str(tmp_path / "b.txt")]) == 0
    ids = np.fromfile(tmp_path / "t.bin", dtype=np.uint16)
    assert bytes(ids.astype(np.uint8)) == b"hello world\xff" and ids.max() == 255


def test_windows_in_order_and_at_random(tmp_path: Path) -> None:
    np.arange(100, dtype=np.uint16).tofile(tmp_path / "t.bin")
    ordered = TokenWindows(str(tmp_path / "t.bin"), block_size=8, random_windows=False)
    assert len(ordered) == 12  # (100 - 1) // 8 windows side by side
    x, y = ordered[2]
    assert x.tolist() == list(range(16, 24)) and y.tolist() == list(range(17, 25))
    # A memmap is not pickled into loader workers: each opens the file itself.
    assert pickle.loads(pickle.dumps(ordered))._tokens is None
    randomly = TokenWindows(str(tmp_path / "t.bin"), block_size=8)
    np.random.seed(3)
    first = randomly[0][0]
    np.random.seed(3)
    assert first.tolist() == randomly[5][0].tolist()  # the window comes from numpy's draw
    assert (first[1:] - first[:-1]).eq(1).all()
    batch = TokenDicts(str(tmp_path / "t.bin"), block_size=8, random_windows=False)[1]
    assert batch["input_ids"].tolist() == batch["labels"].tolist() == list(range(8, 16))
    assert batch["attention_mask"].sum() == 8


def test_a_file_shorter_than_a_window_is_refused(tmp_path: Path) -> None:
    np.arange(5, dtype=np.uint16).tofile(tmp_path / "t.bin")
    with pytest.raises(ValueError, match="holds 5 tokens, fewer than one window"):
        TokenWindows(str(tmp_path / "t.bin"), block_size=8)
