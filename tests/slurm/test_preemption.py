"""Preemption and time limits on the real local cluster: the job is requeued, resumes from
its newest complete checkpoint and ends with exactly the model of an uninterrupted run."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from tests.slurm.cluster import (
    JZK,
    PYTHON,
    REPO,
    Reference,
    launch_sweep,
    manifest_records,
    metric_steps,
    run,
    sacct_states,
    sbatch,
    wait_for,
    wait_until_step,
)

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(420)]


def wait_for_text(log: Path, text: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if log.exists() and text in log.read_text():
            return
        time.sleep(0.5)
    pytest.fail(f"{text!r} not in {log} after {timeout} s: {log.read_text()[-2000:]}")


def set_time_limit(job_id: str, limit: str, env: dict[str, str]) -> None:
    done = run(["scontrol", "update", f"JobId={job_id}", f"TimeLimit={limit}"], env)
    assert done.returncode == 0, done.stderr


def warn_now(job_id: str, env: dict[str, str]) -> None:
    """Shorten the job's limit so that Slurm's time-limit warning is due at once: two
    whole minutes past its elapsed time (limits are whole minutes), so 61 to 120 s are
    left, within the 120 s lead. slurmctld checks limits every 30 s (PERIODIC_TIMEOUT):
    the warning comes at its next check, with at least 30 s left to save and requeue.
    One minute past (1 to 60 s left) lost the race on CI: with under 30 s left, the
    next check found the limit reached and ended the job with SIGTERM, no warning."""
    elapsed = run(["squeue", "-h", "-j", job_id, "-o", "%M"], env).stdout.strip()
    seconds = 0
    for part in elapsed.replace("-", ":").split(":"):
        seconds = seconds * 60 + int(part)
    set_time_limit(job_id, str(seconds // 60 + 2), env)


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
            "job.entry_kind=toolkit",  # train.py is the toolkit's Hydra app
        ],
        slurm,
        tmp_path,
    )
    assert sub.returncode == 0, sub.stderr
    (run_dir,) = (tmp_path / "outputs").glob("low-*")  # outputs/<job.name>-<config hash>
    (record,) = manifest_records(run_dir)
    job_id, log = record["job_id"], Path(record["log"])
    wait_until_step(run_dir, 100, log)

    # A high-priority job that needs both nodes: Slurm preempts (requeues) the low one.
    high = tmp_path / "high.sbatch"
    high.write_text("#!/bin/bash\n#SBATCH -p high -N 2 -n 2 -o /dev/null\nsleep 3\n")
    high_id = sbatch(high, slurm, tmp_path)
    # Computed while the preempted job waits to start again (cluster.py Reference).
    reference = Reference(["resources.gpus_per_node=4", *training], tmp_path / "reference")
    wait_for(high_id, slurm, timeout=120)
    wait_for(job_id, slurm, timeout=240)

    out = log.read_text()
    err = log.with_suffix(".err").read_text()
    assert sacct_states(job_id, slurm, duplicates=True) == ["PREEMPTED", "COMPLETED"], err[-2000:]
    assert "SIGTERM received: saved step-" in out
    assert f"resumed from {run_dir / 'checkpoints'}/step-" in out
    assert "done: 600 steps" in out, err[-2000:]
    assert_each_step_logged_once(run_dir, 600, 25)
    assert (run_dir / "model_final.sha256").read_text().strip() == reference.digest()


@pytest.mark.timeout(600)
def test_time_limit_signal_requeues_the_array_task_and_resumes_exactly(
    slurm, tmp_path: Path
) -> None:
    # sbatch(1): the --signal warning "may be sent up to 60 seconds earlier than specified"
    # (slurmctld checks time limits periodically), so a job's real limit cannot time it:
    # on a slow machine runs got it during start-up, again and again. Instead each array
    # task starts with 10 minutes; once it trains, the test shortens its limit so that
    # the warning is due at once (warn_now, as an admin would with scontrol): Slurm's own
    # warning comes within ~30 s, while the run still trains; once the task has requeued
    # itself, the limit goes back to 10 minutes so the resumed run finishes.
    # The run must outlast that window on any machine, so its steps wait on the data
    # (SlowRegression: 20 ms a micro-batch, at least 60 s for 3000 steps, 10 s to step
    # 500, where both tasks have logged) rather than on the CPU: 10000 compute-bound
    # steps once took the suite's two cores for two minutes and still ended in 50 s on a
    # fast machine. The requeued attempt reads at full speed (delay_on_restart=false: it
    # spent two minutes waiting on the data, and the samples are the same).
    # No evaluation: an evaluation step is a logged step too, and this test counts the
    # logged steps at train.log_every.
    training = [
        "train.steps=3000",
        "checkpoint.every_steps=2500",
        "train.eval_every=0",
        "data._target_=tests.helpers.SlowRegression",
        "+data.delay=0.02",
        "+data.delay_on_restart=false",
    ]
    sweep_dir = tmp_path / "sweep"
    launched = launch_sweep(
        slurm,
        sweep_dir,
        "resources.gpus_per_node=2",
        "resources.time=00:10:00",
        "preemption.lead_seconds=120",  # warn_now counts on it
        *training,
        # Two runs (an array, so the requeue names A_i) that compute the same model: each
        # is stopped at its own step, and both must end exactly alike.
        "train.log_every=500,250",
    )
    assert launched.returncode == 0, launched.stderr[-3000:]
    records = manifest_records(sweep_dir)
    for rec in records:
        wait_until_step(Path(rec["run_dir"]), 500, Path(rec["log"]))
        warn_now(rec["job_id"], slurm)
    for rec in records:
        wait_for_text(Path(rec["log"]), f"requeued job {rec['job_id']};", timeout=150)
        set_time_limit(rec["job_id"], "00:10:00", slurm)
    wait_for(records[0]["array_job_id"], slurm, timeout=300)

    digests = []
    for rec, every in zip(records, (500, 250), strict=True):
        run_dir, log = Path(rec["run_dir"]), Path(rec["log"])
        out = log.read_text()
        states = sacct_states(rec["job_id"], slurm, duplicates=True)
        assert states[-1] == "COMPLETED" and "REQUEUED" in states, (states, out[-2000:])
        assert "SIGUSR1 received: saved step-" in out
        assert "resumed from" in out and "done: 3000 steps" in out
        assert f"train.log_every={every}" in rec["overrides"]
        assert_each_step_logged_once(run_dir, 3000, every)
        digests.append((run_dir / "model_final.sha256").read_text().strip())
    stopped_at = [
        re.findall(r"SIGUSR1 received: saved step-(\d+)", Path(r["log"]).read_text())
        for r in records
    ]
    assert digests[0] == digests[1], stopped_at
