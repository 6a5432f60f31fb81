"""The DCP storage of ckpt/raw_storage.py: tensors as raw bytes, read back exactly.

One process, no process group (DCP's no_dist mode): what every rank does with its part.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint.api import CheckpointException

from jeanzay_kit.ckpt.raw_storage import RawReader, RawWriter
from jeanzay_kit.ckpt.store import checksum_file


def _state() -> dict:
    g = torch.Generator().manual_seed(0)
    base = torch.randn(8, 6, generator=g)
    return {
        "f32": torch.randn(5, 7, generator=g),
        "bf16": torch.randn(33, generator=g).to(torch.bfloat16),
        "f16": torch.randn(2, 3, 4, generator=g).to(torch.float16),
        "i64": torch.arange(-5, 12),
        "bool": torch.tensor([True, False, True]),
        "scalar": torch.tensor(3.25),
        "empty": torch.empty(0, 4),
        "transposed": base.t(),  # not contiguous
        "slice": base[2:5],  # a view into a bigger storage
        "lr": 0.003,  # not a tensor: DCP's own BYTE_IO item
        "betas": (0.9, 0.95),
        "nested": {"w": torch.randn(3, 3, generator=g)},
    }


def _zeros_like(state: dict) -> dict:
    out = {}
    for key, value in state.items():
        if isinstance(value, dict):
            out[key] = _zeros_like(value)
        elif torch.is_tensor(value):
            out[key] = torch.zeros_like(value, memory_format=torch.contiguous_format)
        else:
            out[key] = None
    return out


def _save(state: dict, path: Path, threads: int = 2) -> RawWriter:
    writer = RawWriter(path, threads)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.save(state, storage_writer=writer, no_dist=True)
    return writer


def _load(state: dict, reader) -> None:  # noqa: ANN001 - any DCP storage reader
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.load(state, storage_reader=reader, no_dist=True)


def _assert_same(expected: dict, got: dict) -> None:
    assert expected.keys() == got.keys()
    for key, value in expected.items():
        if isinstance(value, dict):
            _assert_same(value, got[key])
        elif torch.is_tensor(value):
            assert got[key].dtype == value.dtype and torch.equal(got[key], value), key
        else:
            assert got[key] == value, key


@pytest.mark.parametrize("threads", [1, 3])
def test_every_dtype_and_layout_comes_back_bit_for_bit(tmp_path: Path, threads: int) -> None:
    state = _state()
    writer = _save(state, tmp_path, threads)
    loaded = _zeros_like(state)
    _load(loaded, RawReader(tmp_path))
    _assert_same(state, loaded)
    # The checksums taken on the way to disk are those of the files as written.
    data_files = sorted(p for p in tmp_path.glob("*.distcp"))
    assert len(data_files) == threads
    for path in data_files:
        record = writer.fs.records[str(path)]
        assert record.size == path.stat().st_size
        assert record.checksum == checksum_file(path)


def test_a_non_contiguous_target_is_filled_through_a_copy(tmp_path: Path) -> None:
    state = {"w": torch.randn(4, 3)}
    _save(state, tmp_path)
    target = {"w": torch.zeros(3, 4).t()}  # shape (4, 3), not contiguous
    _load(target, RawReader(tmp_path))
    assert torch.equal(target["w"], state["w"])


def test_checkpoints_in_dcp_own_format_still_load(tmp_path: Path) -> None:
    state = _state()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.save(state, storage_writer=FileSystemWriter(str(tmp_path)), no_dist=True)
    loaded = _zeros_like(state)
    _load(loaded, RawReader(tmp_path))
    _assert_same(state, loaded)


def test_dcp_own_reader_refuses_raw_entries_instead_of_misreading_them(tmp_path: Path) -> None:
    _save({"w": torch.randn(4, 3)}, tmp_path)
    with pytest.raises(CheckpointException, match="jzk-raw"):
        _load({"w": torch.zeros(4, 3)}, FileSystemReader(str(tmp_path)))


def test_a_truncated_file_is_an_error_not_zeros(tmp_path: Path) -> None:
    _save({"w": torch.randn(64, 64)}, tmp_path, threads=1)
    data = next(tmp_path.glob("*.distcp"))
    data.write_bytes(data.read_bytes()[:-100])
    with pytest.raises(CheckpointException, match="ends inside"):
        _load({"w": torch.zeros(64, 64)}, RawReader(tmp_path))
