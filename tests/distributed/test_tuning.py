"""A run's result reaches a search (issue 35): Hydra's own Optuna sweeper
(hydra/sweeper=optuna, from hydra-optuna-sweeper, installed as a user would) drives
`python train.py -m` on local workers and reads each trial's tune.objective."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.distributed.conftest import REPO

SMALL = ["train.steps=10", "train.log_every=5", "eval.every_steps=5"]


def sweep(python: str, sweep_dir: Path, *overrides: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            python,
            "train.py",
            "-m",
            "hydra/sweeper=optuna",
            *SMALL,
            *overrides,
            f"hydra.sweep.dir={sweep_dir}",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=400,
    )


@pytest.mark.timeout(900)
def test_hydras_optuna_sweeper_reads_each_runs_objective(
    optuna_sweeper_python: str, tmp_path: Path
) -> None:
    sweep_dir = tmp_path / "search"
    done = sweep(
        optuna_sweeper_python,
        sweep_dir,
        "hydra.sweeper.n_trials=2",
        "hydra.sweeper.sampler.seed=1",
        "optim.lr=interval(0.0001,0.01)",
        "tune.objective=train_loss",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # Each trial's folder is named by its config (two learning rates, two folders).
    points = sorted(p.parent for p in sweep_dir.glob("*/result.json"))
    assert len(points) == 2
    results = [json.loads((p / "result.json").read_text()) for p in points]
    for record, point in zip(results, points, strict=True):
        assert record["objective"] == "train_loss" and record["direction"] == "minimize"
        # The value is the run's own final loss, the one its last line printed.
        log = (point / "train.log").read_text() + done.stdout
        assert record["step"] == 10 and record["value"] == record["train_loss"]
        assert f"final loss {record['value']:.4f}" in log
    best = yaml.safe_load((sweep_dir / "optimization_results.yaml").read_text())
    assert best["best_value"] == min(r["value"] for r in results)
    assert re.search(r"Best value: [0-9.]+", done.stdout + done.stderr)
