"""bench/bench_slurm.py and bench/bench_tune.py on the suite's local cluster (SLURM_CONF
set: they start none of their own), one round of their smallest sizes: each of their
figures comes out a number, so none silently stops being measured (issue 71 point 4; no
value is judged here, the figures' targets are bench/run.py's and docs/performance.md's).
tests/bench/test_run.py runs the benches that need no cluster."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bench.test_run import RUN, assert_every_figure_measured

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(400)]


def test_the_slurm_bench_measures_its_figures_on_the_suites_cluster(slurm, tmp_path: Path) -> None:
    written = RUN.parent / "results" / "slurm.json"
    written.unlink(missing_ok=True)  # an earlier run's figures never pass for this one's
    argv = [sys.executable, str(RUN.parent / "bench_slurm.py")]
    argv += ["--rounds", "1", "--points", "3", "--big-points", "5"]
    done = subprocess.run(
        argv, cwd=tmp_path, env=slurm, capture_output=True, text=True, timeout=380
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(written.read_text())
    assert_every_figure_measured("slurm", result)
    # One array for the sweep of 3 points (one resource shape): one sbatch call.
    assert result["summary"]["sbatch_calls_ours"] == 1, result["summary"]


@pytest.mark.timeout(900)  # run alone, it builds the sweeper's venv first (pip)
def test_the_tune_bench_measures_its_figures_on_the_suites_cluster(
    slurm, tmp_path: Path, optuna_sweeper_python: str
) -> None:
    """`jzk tune` against Hydra's Optuna sweeper, 2 trials of 100 or 200 steps each, in
    the venv of the sweeper the suite built once (its own pins: tests/conftest.py)."""
    written = RUN.parent / "results" / "tune.json"
    written.unlink(missing_ok=True)
    argv = [sys.executable, str(RUN.parent / "bench_tune.py"), "--trials", "2", "--tasks", "1"]
    argv += ["--steps", "100,200", "--python", optuna_sweeper_python]
    done = subprocess.run(
        argv, cwd=tmp_path, env=slurm, capture_output=True, text=True, timeout=380
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(written.read_text())
    assert result["ours"]["states"] == {"COMPLETE": 2}, result["ours"]
    for side in ("ours", "theirs"):
        assert result[side]["wall_s"] > 0 and isinstance(result[side]["best_value"], float)
    assert result["summary"]["study_wall_ratio"] > 0, result["summary"]
    # One task ran both trials: one hand-over between them, measured.
    assert len(result["ours"]["hand_over_s"]) == 1 and result["ours"]["hand_over_s"][0] >= 0
