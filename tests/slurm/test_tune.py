"""`jzk tune` on the local Slurm cluster, as a user runs it from a folder of their own: one
job array whose tasks each ask the study for a trial, run it as a job step, tell its value
and ask again, with nothing left running where it was submitted; a task signalled in the
middle of a trial saves, is requeued, and takes the same trial again from its checkpoint."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from tests.slurm.cluster import JZK, PYTHON, run, wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(420)]

SPACE = 'tune.params={optim.lr: "tag(log, interval(0.001, 0.1))"}'


def load(study_dir: Path):  # noqa: ANN201 - optuna's Study
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    storage = JournalStorage(JournalFileBackend(str(study_dir / "study.journal")))
    return optuna.load_study(study_name="jzk", storage=storage)


def wait_for_trial_step(study_dir: Path, step: int, timeout: float = 180) -> Path:
    """The run directory of the first trial that logged `step`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for metrics in study_dir.glob("trial-*/metrics.jsonl"):
            lines = metrics.read_text().splitlines()
            steps = [json.loads(x).get("step", 0) for x in lines if x.endswith("}")]
            if steps and max(steps) >= step:
                return metrics.parent
        time.sleep(0.5)
    pytest.fail(f"no trial reached step {step} in {timeout} s")


def test_a_study_runs_as_one_array_and_a_signalled_trial_resumes(slurm, tmp_path: Path) -> None:
    sub = run(
        [
            JZK,
            "tune",
            "cluster=slurm_local",
            "resources.gpus_per_node=1",
            "resources.cpus_per_task=1",
            f"job.python={PYTHON}",
            SPACE,
            "tune.n_trials=4",
            "tune.tasks=2",
            "tune.objective=train_loss",
            "tune.seed=5",
            "train.steps=1500",
            "train.log_every=50",
            "checkpoint.every_steps=1000",
        ],
        slurm,
        tmp_path,
        timeout=200,
    )
    assert sub.returncode == 0, sub.stderr[-3000:]
    job_id = re.search(r"submitted job array (\d+)", sub.stdout).group(1)
    study_dir = tmp_path / "tune" / "jzk"
    assert (study_dir / "study.journal").exists()  # the study exists before any task runs

    # A trial under way: its task is signalled as Slurm warns before a time limit.
    running = wait_for_trial_step(study_dir, 100)
    number = int(running.name.removeprefix("trial-"))
    task = next(
        t.user_attrs["jzk_task"] for t in load(study_dir).get_trials() if t.number == number
    )
    index = task.removeprefix("task-")
    signalled = run(["scancel", "--signal=USR1", f"{job_id}_{index}"], slurm)
    assert signalled.returncode == 0, signalled.stderr

    wait_for(job_id, slurm, timeout=380)
    study = load(study_dir)
    trials = study.get_trials()
    assert [t.state.name for t in trials] == ["COMPLETE"] * 4, [t.state for t in trials]
    for trial in trials:
        result = json.loads(Path(trial.user_attrs["jzk_run_dir"], "result.json").read_text())
        assert trial.value == result["value"]
    # The signalled trial saved, its task was requeued and took it again from there.
    log = (study_dir / "logs" / f"trial-{number}.log").read_text()
    tasks = "".join(p.read_text() for p in sorted((tmp_path / "logs").glob("*.out")))
    saved = re.search(r"SIGUSR1 received: saved (step-\d+)", log)
    assert saved and f"requeued job {job_id}_{index}" in log, log[-1000:] + tasks
    assert f"{saved.group(1)} (step" in log.split("resumed from", 1)[1][:300], log[-1000:]
    assert f"{task}: trial {number} saved and stopped" in tasks
    assert f"{task} resumes trial {number}" in tasks  # the same trial, not a new one
    assert {t.user_attrs["jzk_task"] for t in trials} == {"task-0", "task-1"}
