"""One writer per run directory, tried as a user meets it: two `python train.py` with the
same job.run_dir (2 local workers each), the first still training when the second starts;
then the first killed with SIGKILL (no clean exit) and the same command run again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.distributed.conftest import REPO

# The first run lasts the whole test while hardly using the CPU: its steps wait on the
# data (50 ms a micro-batch), not on the suite's two cores.
LONG = [
    "train.steps=100000",
    "checkpoint.every_steps=20",
    "resources.gpus_per_node=2",
    "data._target_=tests.helpers.SlowRegression",
    "+data.delay=0.05",
]


def _start(run_dir: Path, *overrides: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "train.py", f"job.run_dir={run_dir}", *overrides],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its workers too, for the SIGKILL of the whole run
    )


def _wait_for_checkpoint(run_dir: Path, proc: subprocess.Popen, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
        if any((run_dir / "checkpoints").glob("step-*/manifest.json")):
            return
        time.sleep(0.2)
    pytest.fail("the first run saved no checkpoint")


def _snapshot(run_dir: Path) -> dict[str, float]:
    """What the second command could have changed: Hydra's record. (lease.json is left
    out: its holder renews it every RENEW_SECONDS.)"""
    files = list((run_dir / ".hydra").glob("*.yaml"))
    assert files
    return {str(p): p.stat().st_mtime_ns for p in files}


@pytest.mark.timeout(240)
def test_a_second_run_in_a_held_directory_is_refused_and_a_killed_holder_blocks_nothing(
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "shared run"
    first = _start(run_dir, *LONG)
    try:
        _wait_for_checkpoint(run_dir, first)
        before = _snapshot(run_dir)
        overrides_before = (run_dir / ".hydra" / "overrides.yaml").read_text()
        started = time.monotonic()
        second = subprocess.run(
            [sys.executable, "train.py", f"job.run_dir={run_dir}", "train.steps=99999"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert second.returncode == 2, second.stdout + second.stderr
        assert time.monotonic() - started < 60
        line = second.stderr.strip().splitlines()[-1]
        assert f"is being written by pid {first.pid} on {os.uname().nodename}" in line
        assert "one writer at a time" in line and "HINT:" in line
        assert "resumed" not in second.stdout and "Traceback" not in second.stderr
        # It rewrote nothing: Hydra's record is still the first run's.
        assert (run_dir / ".hydra" / "overrides.yaml").read_text() == overrides_before
        assert _snapshot(run_dir) == before
        assert first.poll() is None  # the first one trains on
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # the holder and its workers, no clean exit
        first.wait()
    lease = json.loads((run_dir / "lease.json").read_text())
    assert lease["pid"] == first.pid and not lease["released"]
    saved = max(
        int(p.parent.name[5:]) for p in (run_dir / "checkpoints").glob("step-*/manifest.json")
    )
    again = subprocess.run(
        [
            sys.executable,
            "train.py",
            f"job.run_dir={run_dir}",
            f"train.steps={saved + 20}",
            *LONG[1:],  # the same experiment: only its length changes
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"step-{saved}" in again.stdout and "resum" in again.stdout.lower()
    assert json.loads((run_dir / "lease.json").read_text())["released"]


@pytest.mark.timeout(300)
def test_a_second_sweep_runs_the_new_value_and_finds_the_unchanged_one(tmp_path: Path) -> None:
    """Sweep points are named by their config: `-m optim.lr=0.01,0.001` then `-m
    optim.lr=0.1,0.001` into one sweep folder runs lr=0.1, resumes lr=0.001's finished
    run, and leaves lr=0.01's record as it was."""
    sweep = tmp_path / "multirun" / "lr"

    def sweep_over(values: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [
                sys.executable,
                "train.py",
                "-m",
                f"optim.lr={values}",
                "train.steps=4",
                "resources.gpus_per_node=1",
                f"hydra.sweep.dir={sweep}",
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=240,
        )

    first = sweep_over("0.01,0.001")
    assert first.returncode == 0, first.stderr[-3000:]
    records = {
        p: (p / ".hydra" / "overrides.yaml").read_text()
        for p in sweep.iterdir()
        if (p / ".hydra").is_dir()
    }
    assert len(records) == 2
    second = sweep_over("0.1,0.001")
    assert second.returncode == 0, second.stderr[-3000:]
    points = {
        (p / ".hydra" / "overrides.yaml").read_text().split("\n")[0]: p
        for p in sweep.iterdir()
        if (p / ".hydra").is_dir()
    }
    assert sorted(points) == ["- optim.lr=0.001", "- optim.lr=0.01", "- optim.lr=0.1"]
    for path, text in records.items():  # nothing of the first sweep relabelled
        assert (path / ".hydra" / "overrides.yaml").read_text() == text
    assert second.stdout.count("resumed from") == 1
    assert f"resumed from {points['- optim.lr=0.001']}" in second.stdout

    # `jzk status` finds them: with no argument (from the project), or given any folder
    # `jzk report` reads; each local run with its own state, labelled by what it ran.
    jzk = str(Path(sys.executable).parent / "jzk")
    for args in ([], [str(sweep)]):
        shown = subprocess.run(
            [jzk, "status", *args], cwd=tmp_path, capture_output=True, text=True, timeout=60
        )
        assert shown.returncode == 0, shown.stderr
        rows = [line for line in shown.stdout.splitlines() if line.startswith("local ")]
        assert len(rows) == 3 and all("COMPLETED" in r for r in rows), shown.stdout
        assert "3 COMPLETED" in shown.stdout
        for lr, path in points.items():
            (row,) = [r for r in rows if path.name in r]
            assert lr[2:] in row  # "optim.lr=0.1" on the row of the folder that ran it
