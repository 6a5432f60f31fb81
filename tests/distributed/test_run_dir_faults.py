"""An unwritable run directory is refused at start: one line, exit 2, no worker started."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.distributed.conftest import REPO
from tests.mounts import tmpfs


def train(*overrides: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO / "train.py"), "resources.gpus_per_node=2", *overrides],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def read_only_dir(tmp_path: Path):
    """A real read-only filesystem (tmpfs mounted ro): needs root, as in CI."""
    with tmpfs(tmp_path / "ro", "ro,size=1m") as mount:
        yield mount


def _refused_at_start(result: subprocess.CompletedProcess, says: str) -> None:
    assert result.returncode == 2, result.stdout + result.stderr
    assert says in result.stderr and "HINT: set job.run_dir" in result.stderr
    assert "Traceback" not in result.stderr
    assert "jzk: rank" not in result.stdout  # no worker started


@pytest.mark.timeout(120)
def test_a_read_only_filesystem_is_refused_before_any_worker(read_only_dir: Path) -> None:
    start = time.monotonic()
    result = train(f"job.run_dir={read_only_dir / 'run'}")
    _refused_at_start(result, f"job.run_dir={read_only_dir / 'run'} is on a read-only filesystem")
    assert time.monotonic() - start < 30


@pytest.mark.timeout(120)
def test_a_file_where_the_run_dir_should_be_is_refused(tmp_path: Path) -> None:
    (tmp_path / "taken").write_text("not a folder")
    result = train(f"job.run_dir={tmp_path / 'taken' / 'run'}")
    _refused_at_start(result, "has a file where a folder should be")


@pytest.mark.timeout(120)
def test_a_sweep_into_a_read_only_filesystem_is_refused(read_only_dir: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            str(REPO / "train.py"),
            "-m",
            "hydra/launcher=basic",
            f"hydra.sweep.dir={read_only_dir / 'sweep'}",
            "optim.lr=0.1,0.01",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    assert f"hydra.sweep.dir={read_only_dir / 'sweep'} is on a read-only filesystem" in (
        result.stderr
    )


@pytest.mark.timeout(120)
def test_a_missing_dataset_path_is_refused_before_any_worker(tmp_path: Path) -> None:
    user_data = ("data._target_=tests.helpers.FileBackedRegression", "train.steps=2")
    missing = tmp_path / "no-such-data"
    result = subprocess.run(
        [sys.executable, str(REPO / "train.py"), *user_data, f"+data.path={missing}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert result.returncode == 2, result.stderr
    assert f"data.path={missing} does not exist" in result.stderr
    assert "HINT: set data.path" in result.stderr and "Traceback" not in result.stderr
    assert "jzk: rank" not in result.stdout
    # The same run with the file there trains.
    missing.write_text("2.0\n")
    ok = subprocess.run(
        [
            sys.executable,
            str(REPO / "train.py"),
            *user_data,
            f"+data.path={missing}",
            f"job.run_dir={tmp_path / 'run'}",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert ok.returncode == 0, ok.stderr[-2000:]
