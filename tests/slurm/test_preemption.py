"""Preemption and time limits on the real local cluster: the job is requeued, resumes from
its newest complete checkpoint and ends with exactly the model of an uninterrupted run."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.slurm.cluster import (
    JZK,
    PYTHON,
    REPO,
    launch_sweep,
    local_digest,
    manifest_records,
    metric_steps,
    run,
    sacct_states,
    sbatch,
    wait_for,
)

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(420)]


def wait_until_step(run_dir: Path, step: int, log: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        steps = metric_steps(run_dir)
        if steps and steps[-1] >= step:
            return
        time.sleep(0.5)
    pytest.fail(f"the job did not reach step {step}: {log.read_text()[-2000:]}")


def assert_each_step_logged_once(run_dir: Path, last: int, every: int) -> None:
    assert metric_steps(run_dir) == list(range(every, last + 1, every))


def test_low_job_preempted_by_high_job_is_requeued_and_resumes_exactly(
    slurm, tmp_path: Path
) -> None:
    training = ["train.steps=600", "train.log_every=25", "checkpoint.every_steps=50"]
    sub = run(
        [
            JZK,
            "submit",
            "cluster=slurm_local",
            "resources.partition=low",
            "resources.nodes=2",
            "resources.gpus_per_node=2",  # 2 tasks x 1 CPU: both nodes full
            "job.name=low",
            *training,
            f"job.python={PYTHON}",
            f"job.entry={REPO / 'train.py'}",
        ],
        slurm,
        tmp_path,
    )
    assert sub.returncode == 0, sub.stderr
    run_dir = tmp_path / "outputs" / "low"
    (record,) = manifest_records(run_dir)
    job_id, log = record["job_id"], Path(record["log"])
    wait_until_step(run_dir, 100, log)

    # A high-priority job that needs both nodes: Slurm preempts (requeues) the low one.
    high = tmp_path / "high.sbatch"
    high.write_text("#!/bin/bash\n#SBATCH -p high -N 2 -n 2 -o /dev/null\nsleep 3\n")
    high_id = sbatch(high, slurm, tmp_path)
    wait_for(high_id, slurm, timeout=120)
    wait_for(job_id, slurm, timeout=240)

    out = log.read_text()
    err = log.with_suffix(".err").read_text()
    assert sacct_states(job_id, slurm, duplicates=True) == ["PREEMPTED", "COMPLETED"], err[-2000:]
    assert "SIGTERM received: saved step-" in out
    assert f"resumed from {run_dir / 'checkpoints'}/step-" in out
    assert "done: 600 steps" in out, err[-2000:]
    assert_each_step_logged_once(run_dir, 600, 25)
    reference = local_digest(["resources.gpus_per_node=4", *training], tmp_path / "reference")
    assert (run_dir / "model_final.sha256").read_text().strip() == reference


def test_time_limit_signal_requeues_the_array_task_and_resumes_exactly(
    slurm, tmp_path: Path
) -> None:
    # Two minutes with the USR1 warning 75 s before the end: slurmctld looks at time
    # limits periodically and may send it up to ~30 s early, so it comes 15-45 s into
    # each run. The training needs ~50 s: at least one requeue.
    training = ["train.steps=5500", "train.log_every=500", "checkpoint.every_steps=1000"]
    sweep_dir = tmp_path / "sweep"
    launched = launch_sweep(
        slurm,
        sweep_dir,
        "resources.gpus_per_node=2",
        "resources.time=00:02:00",
        "preemption.lead_seconds=75",
        *training,
        "optim.lr=0.001,0.002",  # two runs: an array, so the requeue names A_i
    )
    assert launched.returncode == 0, launched.stderr[-3000:]
    records = manifest_records(sweep_dir)
    wait_for(records[0]["array_job_id"], slurm, timeout=400)

    for rec in records:
        run_dir, log = Path(rec["run_dir"]), Path(rec["log"])
        out = log.read_text()
        states = sacct_states(rec["job_id"], slurm, duplicates=True)
        assert states[-1] == "COMPLETED" and "REQUEUED" in states, (states, out[-2000:])
        assert f"requeued job {rec['job_id']}; it resumes from step-" in out
        assert "resumed from" in out and "done: 5500 steps" in out
        assert_each_step_logged_once(run_dir, 5500, 500)
    assert "optim.lr=0.001" in records[0]["overrides"]
    reference = local_digest(
        ["resources.gpus_per_node=2", *training, "optim.lr=0.001"], tmp_path / "reference"
    )
    assert (Path(records[0]["run_dir"]) / "model_final.sha256").read_text().strip() == reference
