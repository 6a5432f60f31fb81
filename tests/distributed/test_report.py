"""`jzk report` on a real local sweep, and TensorBoard event files from a real run."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.distributed.conftest import REPO

JZK = str(Path(sys.executable).parent / "jzk")
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.mark.timeout(400)
def test_report_on_a_three_point_local_sweep(tmp_path: Path) -> None:
    # A user's local sweep, from a directory where nothing was prepared.
    sweep = subprocess.run(
        [
            sys.executable,
            str(REPO / "train.py"),
            "-m",
            "hydra/launcher=basic",
            "optim.lr=0.01,0.001,0.0001",
            "train.steps=20",
            "train.log_every=5",
            "train.eval_every=10",
            "resources.gpus_per_node=1",
            "metrics.tensorboard=true",
            "job.name=lr",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert sweep.returncode == 0, sweep.stderr[-3000:]
    sweep_dir = tmp_path / "multirun" / "lr"

    report = subprocess.run(
        [JZK, "report", str(sweep_dir)], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert report.returncode == 0, report.stderr
    out = sweep_dir / "report"
    for name in ("loss.png", "throughput.png", "step_time.png"):
        data = (out / name).read_bytes()
        assert data.startswith(PNG) and len(data) > 10_000, name
    # One row per run, labelled by its override, best eval loss first: the order of the
    # runs' own last eval records.
    best = {}
    for lr in ("0.01", "0.001", "0.0001"):
        records = [json.loads(x) for x in (point(sweep_dir, lr) / "metrics.jsonl").open()]
        best[f"optim.lr={lr}"] = min(r["eval_loss"] for r in records if "eval_loss" in r)
    rows = list(csv.reader((out / "summary.csv").open()))
    assert rows[0][:4] == ["RUN", "STEPS", "FINAL LOSS", "BEST EVAL"]
    assert [r[0] for r in rows[1:]] == sorted(best, key=best.get)
    assert [float(r[3]) for r in rows[1:]] == pytest.approx(sorted(best.values()), abs=1e-4)
    assert all(r[1] == "20" for r in rows[1:])
    table, verdicts = report.stdout.split("\ninput:\n")
    printed = [line.split()[0] for line in table.splitlines() if "optim.lr=" in line]
    assert printed == [r[0] for r in rows[1:]]
    # Each run's input verdict (this MLP on preloaded data waits little).
    said = [line.split(":")[0].strip() for line in verdicts.splitlines() if "input-bound" in line]
    assert said == printed, verdicts
    assert (out / "data_wait.png").read_bytes().startswith(PNG)

    # metrics.tensorboard=true: the same train losses, readable by TensorBoard.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    board = EventAccumulator(str(point(sweep_dir, "0.01") / "tensorboard"))
    board.Reload()
    records = [json.loads(x) for x in (point(sweep_dir, "0.01") / "metrics.jsonl").open()]
    logged = board.Scalars("loss/train")
    assert [e.step for e in logged] == [r["step"] for r in records] == [5, 10, 15, 20]
    assert [e.value for e in logged] == pytest.approx([r["loss"] for r in records], rel=1e-6)
    assert [e.step for e in board.Scalars("loss/eval")] == [10, 20]


def test_report_refuses_a_directory_without_runs(tmp_path: Path) -> None:
    result = subprocess.run(
        [JZK, "report", str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode != 0
    assert "no manifest.jsonl, no metrics.jsonl" in result.stderr and "HINT" in result.stderr
    assert "Traceback" not in result.stderr


def point(sweep_dir: Path, lr: str) -> Path:
    """The sweep point that ran optim.lr=`lr` (points are named by their config), found
    from Hydra's record of its overrides."""
    (found,) = [
        d
        for d in sweep_dir.iterdir()
        if (d / ".hydra" / "overrides.yaml").exists()
        and f"optim.lr={lr}\n" in (d / ".hydra" / "overrides.yaml").read_text()
    ]
    return found
