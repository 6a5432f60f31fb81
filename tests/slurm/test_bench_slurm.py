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

from tests.bench.test_run import RUN, load_run_module

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(400)]


def test_the_slurm_bench_measures_its_figures_on_the_suites_cluster(slurm, tmp_path: Path) -> None:
    argv = [sys.executable, str(RUN.parent / "bench_slurm.py")]
    argv += ["--rounds", "1", "--points", "3", "--big-points", "5"]
    done = subprocess.run(
        argv, cwd=tmp_path, env=slurm, capture_output=True, text=True, timeout=380
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads((RUN.parent / "results" / "slurm.json").read_text())
    bench = next(b for b in load_run_module().BENCHES if b.name == "slurm")
    figures = {f.key: f.value for f in bench.figures(result)}
    assert sorted(figures) == sorted(bench.keys), figures
    assert all(isinstance(v, int | float) and v > 0 for v in figures.values()), figures
    # One array for the sweep of 3 points (one resource shape): one sbatch call.
    assert figures["sbatch_calls_per_sweep"] == 1, figures
