"""What `jzk validate` says a job writes: files per checkpoint and run, bytes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from jeanzay_kit.launch.footprint import Footprint, describe
from jeanzay_kit.values import human_bytes


@pytest.mark.parametrize(
    ("ranks", "keep", "snapshot", "checkpoint_files", "total"),
    [
        (2, 3, 0, 14, 2 + 14 + 2 + 3 * 14),  # the README job: 10 files seen at 2 threads
        (16, 2, 373, 84, 14 + 16 + 2 * 84 + 2 + 373),
    ],
)
def test_files(ranks: int, keep: int, snapshot: int, checkpoint_files: int, total: int) -> None:
    fp = Footprint(
        runs=1, ranks=ranks, keep_last=keep, snapshot_files=snapshot, checkpoint_bytes=None
    )
    assert fp.checkpoint_files == checkpoint_files
    assert fp.total_files == total


def test_bytes_measured_first_then_counted() -> None:
    fp = Footprint(1, 2, 3, 0, checkpoint_bytes=None, params=1_000_000)
    assert fp.estimated_checkpoint_bytes == 12_000_000  # fp32 weights + AdamW's two states
    assert "12.0 MB each (fp32 weights + optimizer states), 36.0 MB kept" in describe(fp)[1]
    fp = Footprint(1, 2, 3, 0, checkpoint_bytes=1_131_619, params=1_000_000)
    assert "1.1 MB each (measured" in describe(fp)[1]
    assert "--sizes" in describe(Footprint(1, 2, 3, 0, None))[1]
    assert human_bytes(999) == "999 B" and human_bytes(2.5e12) == "2.5 TB"


def test_validate_measures_the_run_dirs_newest_checkpoint(tmp_path: Path) -> None:
    step = tmp_path / "run" / "checkpoints" / "step-7"
    step.mkdir(parents=True)
    (step / "rank-0.pt").write_bytes(b"x" * 3000)
    (step / "manifest.json").write_text("{}")
    (tmp_path / "run" / "checkpoints" / "step-9").mkdir()  # incomplete: not measured
    jzk = str(Path(sys.executable).parent / "jzk")
    out = subprocess.run(
        [jzk, "validate", f"job.run_dir={tmp_path / 'run'}"], capture_output=True, text=True
    ).stdout
    assert "checkpoints     3.0 KB each (measured on the run's newest checkpoint)" in out, out
    assert "writes          at most 60 files" in out


def test_fewer_writer_threads_are_fewer_files_per_checkpoint() -> None:
    # Per rank a DCP file per thread and its rank-<r>.pt; once: 4 shared files.
    most = Footprint(runs=1, ranks=8, keep_last=3, snapshot_files=0, checkpoint_bytes=None)
    one = Footprint(
        runs=1, ranks=8, keep_last=3, snapshot_files=0, checkpoint_bytes=None, writer_threads=1
    )
    assert (most.checkpoint_files, one.checkpoint_files) == (8 * 5 + 4, 8 * 2 + 4)
    assert "8 rank(s) x up to 2 + 4" in describe(one)[0]
