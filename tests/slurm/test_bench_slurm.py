"""bench/bench_slurm.py on the suite's local cluster (SLURM_CONF set: it starts none of
its own), one round of its smallest sizes: each of its figures comes out a number, so
none silently stops being measured (issue 71 point 4; no value is judged here, the
figures' targets are bench/run.py's). tests/bench/test_run.py runs the benches that need
no cluster."""

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
