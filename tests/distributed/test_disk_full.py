"""A save that meets a full filesystem (a real tmpfs, mounted by the test as root): no
partial checkpoint counts, the previous one is kept and verifies, and the run resumes
from it once there is space again."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.distributed.conftest import REPO
from tests.mounts import tmpfs

JZK = str(Path(sys.executable).parent / "jzk")
# Two workers, a save every 5 steps: each checkpoint is ~1.1 MB, so a 3 MiB filesystem
# holds step-5 and step-10 and runs out during step-15.
RUN = (
    "resources.gpus_per_node=2",
    "train.steps=30",
    "train.log_every=5",
    "checkpoint.every_steps=5",
    "checkpoint.keep_last=10",
)


@pytest.fixture
def small_fs(tmp_path: Path):
    with tmpfs(tmp_path / "small", "size=3m") as mount:
        yield mount


def train(run_dir: Path, *overrides: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO / "train.py"), *RUN, *overrides, f"job.run_dir={run_dir}"],
        capture_output=True,
        text=True,
        timeout=240,
    )


def checkpoints(run_dir: Path) -> list[str]:
    return sorted(p.name for p in (run_dir / "checkpoints").iterdir())


@pytest.mark.timeout(600)
def test_a_full_disk_stops_cleanly_keeps_the_previous_checkpoint_and_resumes(
    small_fs: Path, tmp_path: Path
) -> None:
    reference = train(tmp_path / "reference")
    assert reference.returncode == 0, reference.stderr[-3000:]

    run_dir = small_fs / "run"
    full = train(run_dir)
    assert full.returncode == 2, full.stderr[-3000:]  # a refusal: not restarted, not requeued
    assert "restarting" not in full.stderr
    err = full.stderr
    assert f"checkpoint step-15 could not be written to {run_dir}/checkpoints/.tmp-step-15" in err
    assert "No space left on device" in err
    assert "It needs about 1.1 MB (the size of step-10)" in err and "MB free there" in err
    assert "the newest complete checkpoint step-10 is kept" in err
    assert "Traceback" not in err
    # Nothing partial is left, and what is there verifies.
    assert checkpoints(run_dir) == ["step-10", "step-5"]
    verify = subprocess.run([JZK, "ckpt", "verify", str(run_dir)], capture_output=True, text=True)
    assert verify.returncode == 0, verify.stdout + verify.stderr

    # Space again: the same command resumes from step-10 and ends with the model of the
    # run that never met a full disk.
    subprocess.run(["mount", "-o", "remount,size=64m", str(small_fs)], check=True)
    resumed = train(run_dir)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "(step 10)" in resumed.stdout, resumed.stdout
    digest = (run_dir / "model_final.sha256").read_text()
    assert digest == (tmp_path / "reference" / "model_final.sha256").read_text()


@pytest.mark.timeout(300)
def test_on_write_error_continue_warns_and_trains_on(small_fs: Path) -> None:
    run_dir = small_fs / "run"
    result = train(run_dir, "checkpoint.on_write_error=continue", "checkpoint.async=true")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "WARNING: checkpoint step-15 could not be written" in result.stderr
    assert "checkpoint.on_write_error=continue" in result.stderr
    assert "done: 30 steps" in result.stdout
    assert not [n for n in checkpoints(run_dir) if not n.startswith("step-")]  # no .tmp left
    verify = subprocess.run([JZK, "ckpt", "verify", str(run_dir)], capture_output=True, text=True)
    assert verify.returncode == 0, verify.stdout + verify.stderr
