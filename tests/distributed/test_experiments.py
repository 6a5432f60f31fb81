"""Two experiments started one after the other, as a new user does, from a fresh directory."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.distributed.conftest import REPO

SHORT = ("train.steps=4", "train.log_every=2", "train.eval_every=0", "resources.gpus_per_node=2")


def train(cwd: Path, *overrides: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO / "train.py"), *SHORT, *overrides],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=240,
    )


@pytest.mark.timeout(600)
def test_default_run_dirs_separate_experiments_and_keep_a_rerun_together(tmp_path: Path) -> None:
    first = train(tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    # Another model and data set: before, this met the first run's checkpoints in
    # outputs/jzk and was refused after starting its workers.
    other = train(tmp_path, "model=gpt", "data=stdlib_text")
    assert other.returncode == 0, other.stderr[-3000:]
    dirs = sorted(p.name for p in (tmp_path / "outputs").iterdir())
    assert len(dirs) == 2 and all(d.startswith("jzk-") for d in dirs), dirs
    # The same experiment trained longer: same run directory, resumed from its checkpoint.
    longer = train(tmp_path, "train.steps=6")
    assert longer.returncode == 0, longer.stderr[-3000:]
    assert "resumed from" in longer.stdout and "(step 4)" in longer.stdout, longer.stdout
    assert sorted(p.name for p in (tmp_path / "outputs").iterdir()) == dirs


@pytest.mark.timeout(300)
def test_a_changed_config_in_a_used_run_dir_is_refused_before_any_worker(tmp_path: Path) -> None:
    run_dir = tmp_path / "shared"
    first = train(tmp_path, f"job.run_dir={run_dir}")
    assert first.returncode == 0, first.stderr[-3000:]
    changed = train(tmp_path, f"job.run_dir={run_dir}", "optim.lr=0.1")
    assert changed.returncode == 2
    assert "jzk: rank" not in changed.stdout  # no worker was started
    assert "Traceback" not in changed.stderr
    err = changed.stderr
    assert f"the config changed since {run_dir}/checkpoints/step-4 was saved" in err, err
    assert "optim.lr: 0.003 -> 0.1" in err
    # The way out is named: another run dir, start over, or resume anyway.
    assert "job.run_dir" in err and "resume=never" in err and "allow_config_change" in err
    # resume=never starts over in the same directory (test_resume.py had a run of its own
    # for it: suite time).
    again = train(tmp_path, f"job.run_dir={run_dir}", "optim.lr=0.1", "resume=never")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "resumed from" not in again.stdout


def _digest(proc: subprocess.CompletedProcess) -> str:
    return proc.stdout.split("model digest ")[1].split(",")[0]


@pytest.mark.timeout(400)
def test_auto_micro_batch_trains_as_its_choice_and_gpu_switches_keep_the_run(
    tmp_path: Path,
) -> None:
    """micro_batch_size=auto on two CPU ranks: rank 0 chooses (on the CPU: 8 or the
    largest valid size below it), both ranks take it, the run records it and trains as a
    run configured with it; its resume takes the recorded size, and turning the GPU
    defaults off (what a user debugging a run does) keeps the run directory."""
    batch = "train.global_batch_size=36"  # 18 per replica: auto takes 6
    auto = train(tmp_path, "train.micro_batch_size=auto", batch, "job.name=auto")
    assert auto.returncode == 0, auto.stderr[-3000:]
    assert "train.micro_batch_size=auto: 6 on the CPU" in auto.stderr, auto.stderr
    (run_dir,) = (tmp_path / "outputs").glob("auto-*")
    assert '"micro_batch_size": 6' in (run_dir / "micro_batch.json").read_text()
    fixed = train(tmp_path, "train.micro_batch_size=6", batch, "job.name=fixed")
    assert fixed.returncode == 0, fixed.stderr[-3000:]
    assert _digest(auto) == _digest(fixed)
    off = ("train.compile=false", "optim.fused=false", "train.tf32=false")
    longer = train(
        tmp_path, "train.micro_batch_size=auto", batch, "job.name=auto", "train.steps=6", *off
    )
    assert longer.returncode == 0, longer.stderr[-3000:]
    assert "(step 4)" in longer.stdout, longer.stdout
    assert "6, as chosen at the run's start" in longer.stderr, longer.stderr
