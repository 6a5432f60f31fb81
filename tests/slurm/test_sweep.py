"""`python train.py -m` with the jeanzay launcher, and `jzk submit` / `jzk status`, on the
real local cluster."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.slurm.cluster import (
    JZK,
    PYTHON,
    REPO,
    launch_sweep,
    manifest_records,
    metric_steps,
    run,
    sacct_states,
    sweep_from,
    wait_for,
)

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(300)]


def test_three_point_sweep_is_one_array_job(slurm, tmp_path: Path) -> None:
    sweep_dir = tmp_path / "sweep"
    lrs = ["0.1", "0.01", "0.001"]
    launched = launch_sweep(
        slurm,
        sweep_dir,
        f"optim.lr={','.join(lrs)}",
        "train.steps=20",
        "train.log_every=5",
    )
    assert launched.returncode == 0, launched.stderr[-3000:]

    records = manifest_records(sweep_dir)
    assert [r["num"] for r in records] == [0, 1, 2]
    assert len({r["array_job_id"] for r in records}) == 1  # one sbatch call, one array
    assert [r["array_index"] for r in records] == [0, 1, 2]
    assert [r["job_id"] for r in records] == [f"{records[0]['array_job_id']}_{i}" for i in range(3)]
    assert all(f"optim.lr={lr}" in r["overrides"] for r, lr in zip(records, lrs, strict=True))
    # Each point is named by its config (<job.name>-<hash>), as a single run is.
    assert all(Path(r["run_dir"]).parent == sweep_dir for r in records)
    assert all(Path(r["run_dir"]).name.startswith("jzk-") for r in records)
    assert len({r["run_dir"] for r in records}) == 3

    array_id = records[0]["array_job_id"]
    wait_for(array_id, slurm)
    assert sacct_states(array_id, slurm, expected=3) == ["COMPLETED"] * 3

    finals = set()
    for rec, lr in zip(records, lrs, strict=True):
        run_dir = Path(rec["run_dir"])
        assert metric_steps(run_dir) == [5, 10, 15, 20], Path(rec["log"]).read_text()[-2000:]
        assert (run_dir / "checkpoints" / "step-20" / "manifest.json").exists()
        # The config each run trained with was frozen at submission, with its own lr.
        frozen = json.loads((run_dir / "checkpoints" / "step-20" / "config.json").read_text())
        assert frozen["optim"]["lr"] == float(lr)
        assert frozen["job"]["run_dir"] == rec["run_dir"]
        finals.add((run_dir / "model_final.sha256").read_text())
    assert len(finals) == 3  # three different learning rates, three different models

    # Finished jobs have left squeue (MinJobAge=5): the states come from sacct.
    status = run([JZK, "status", str(sweep_dir)], slurm)
    assert status.returncode == 0, status.stderr
    lines = status.stdout.splitlines()
    for rec in records:
        row = next(line for line in lines if line.startswith(rec["job_id"] + " "))
        assert "COMPLETED" in row and "step-20" in row and rec["run_dir"] in row
    assert "3 COMPLETED" in status.stdout

    # `jzk report` on the sweep: its PNGs, and one summary row per run, best eval first.
    report = run([JZK, "report", str(sweep_dir)], slurm)
    assert report.returncode == 0, report.stderr
    for name in ("loss.png", "throughput.png", "step_time.png"):
        assert (sweep_dir / "report" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = [line for line in report.stdout.splitlines() if line.startswith("optim.lr=")]
    assert sorted(r.split()[0] for r in rows) == sorted(f"optim.lr={lr}" for lr in lrs)
    evals = [float(r.split()[3]) for r in rows]
    assert evals == sorted(evals)


def test_a_bad_sweep_point_submits_nothing(slurm, tmp_path: Path) -> None:
    sweep_dir = tmp_path / "sweep"
    launched = launch_sweep(
        slurm,
        sweep_dir,
        "resources.gpus_per_node=2,8",  # a slurm_local node has 4 GPUs
    )
    assert launched.returncode == 2
    assert "train.py: error: nothing was submitted" in launched.stderr
    assert "Traceback" not in launched.stderr
    assert "resources.gpus_per_node=8" in launched.stderr
    assert not (sweep_dir / "manifest.jsonl").exists()


def test_a_value_hydra_refuses_is_listed_with_the_other_points(slurm, tmp_path: Path) -> None:
    # Points share one composition (launch/point_configs.py): a refused value must not
    # stop the check of the points after it, nor leave its value in them.
    sweep_dir = tmp_path / "sweep"
    launched = launch_sweep(slurm, sweep_dir, "train.steps=5,many,7", "resources.gpus_per_node=8")
    assert launched.returncode == 2
    assert "Traceback" not in launched.stderr
    assert "nothing was submitted" in launched.stderr
    assert "#1 (cluster=slurm_local train.steps=many" in launched.stderr
    assert "train.steps=many is not a whole number" in launched.stderr
    for num in (0, 2):  # both other points checked, each with its own problem
        line = next(x for x in launched.stderr.splitlines() if x.startswith(f"#{num} "))
        assert f"train.steps={5 if num == 0 else 7}" in line
    assert launched.stderr.count("resources.gpus_per_node=8 but slurm_local nodes") == 2
    assert not (sweep_dir / "manifest.jsonl").exists()


def test_jzk_submit_then_status(slurm, tmp_path: Path) -> None:
    overrides = [
        "cluster=slurm_local",
        "job.name=submitted",
        "train.steps=10",
        f"job.python={PYTHON}",
        f"job.entry={REPO / 'train.py'}",
        "job.entry_kind=toolkit",  # train.py is the toolkit's Hydra app
    ]
    sub = run([JZK, "submit", *overrides], slurm, tmp_path)
    assert sub.returncode == 0, sub.stderr
    (run_dir,) = (tmp_path / "outputs").glob("submitted-*")  # <job.name>-<config hash>
    (record,) = manifest_records(run_dir)
    assert record["overrides"] == overrides and record["run_dir"] == str(run_dir)
    assert f"submitted job {record['job_id']}" in sub.stdout
    assert (run_dir / "job.sbatch").read_text().startswith("#!/bin/bash")
    wait_for(record["job_id"], slurm)
    out = Path(record["log"]).read_text()
    assert "done: 10 steps" in out, Path(record["log"]).with_suffix(".err").read_text()[-2000:]

    # `jzk status` without a directory finds outputs/*/manifest.jsonl from here.
    status = run([JZK, "status"], slurm, tmp_path)
    assert status.returncode == 0, status.stderr
    assert record["job_id"] in status.stdout and "COMPLETED" in status.stdout
    assert "step-10" in status.stdout


def test_a_sweep_launched_in_batches_keeps_every_run_in_the_manifest(slurm, tmp_path: Path) -> None:
    sweep_dir = tmp_path / "sweep"
    launched = launch_sweep(
        slurm,
        sweep_dir,
        "optim.lr=0.1,0.01,0.001",
        "train.steps=5",
        "hydra.sweeper.max_batch_size=2",  # Hydra calls the launcher twice
    )
    assert launched.returncode == 0, launched.stderr[-3000:]
    records = manifest_records(sweep_dir)
    assert [r["num"] for r in records] == [0, 1, 2]
    assert len({r["array_job_id"] for r in records}) == 2  # one submission per batch
    for rec in records:
        wait_for(rec["job_id"], slurm)
        assert metric_steps(Path(rec["run_dir"]))[-1] == 5


def test_hydras_optuna_sweeper_gets_each_trials_value_through_the_launcher(
    slurm, tmp_path: Path, optuna_sweeper_python: str
) -> None:
    """hydra/sweeper=optuna on the cluster: the launcher submits each batch of trials as
    an array, waits for it (no hydra.launcher.wait given) and hands back each run's
    result.json value; the study's best is one of them."""
    sweep_dir = tmp_path / "search"
    argv = [optuna_sweeper_python, "train.py", "-m", "cluster=slurm_local"]
    done = run(
        [
            *argv,
            "hydra/sweeper=optuna",
            "hydra.sweeper.n_trials=2",
            "hydra.sweeper.n_jobs=2",
            "hydra.sweeper.sampler.seed=1",
            "optim.lr=interval(0.0001,0.01)",
            "train.steps=10",
            "eval.every_steps=5",
            "hydra.launcher.poll_seconds=1",
            f"job.python={PYTHON}",
            f"hydra.sweep.dir={sweep_dir}",
        ],
        slurm,
        REPO,
        timeout=280,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    records = manifest_records(sweep_dir)
    assert len({r["array_job_id"] for r in records}) == 1  # both trials in one array
    values = []
    for rec in records:
        result = json.loads((Path(rec["run_dir"]) / "result.json").read_text())
        assert result["objective"] == "eval_loss" and result["eval_step"] == 10
        values.append(result["value"])
    best = (sweep_dir / "optimization_results.yaml").read_text()
    assert f"best_value: {min(values)}" in best, best


def test_hydra_submitit_launcher_runs_each_point_as_a_task_of_its_job(
    slurm, tmp_path: Path
) -> None:
    """hydra/launcher=submitit_slurm (hydra-submitit-launcher, as users bring it): submitit
    pickles train.py's task function into each job, which must train as a task of its
    own job step, with the job's environment, not the one of the command that pickled it
    (it did: every point was refused as "not a task of a Slurm job step")."""
    sweep_dir = tmp_path / "submitit"
    done = run(
        [
            PYTHON,
            "train.py",
            "-m",
            "cluster=slurm_local",
            "hydra/launcher=submitit_slurm",
            "hydra.launcher.partition=debug",
            "hydra.launcher.cpus_per_task=1",
            "optim.lr=0.01,0.003",
            "train.steps=10",
            "tune.objective=train_loss",
            f"job.python={PYTHON}",
            f"hydra.sweep.dir={sweep_dir}",
        ],
        slurm,
        REPO,
        timeout=280,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    points = [d for d in sweep_dir.iterdir() if (d / "result.json").exists()]
    assert len(points) == 2  # named by their config, as single runs are
    for point in points:
        result = json.loads((point / "result.json").read_text())
        assert result["step"] == 10 and result["value"] == result["train_loss"]


FAILS_ONCE = '''
"""A user's regression model that fails once, on its 15th call (in step 3): it
stalls (fault=hang) or raises (fault=crash)."""
import time
from pathlib import Path

import torch


class FailsOnce(torch.nn.Module):
    def __init__(self, in_dim: int, out_dim: int, fault: str, marks: str) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(in_dim, 32), torch.nn.Tanh(), torch.nn.Linear(32, out_dim)
        )
        self.fault, self.mark, self.calls = fault, Path(marks) / fault, 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.calls == 15 and not self.mark.exists():
            self.mark.write_text("failed once")
            if self.fault == "hang":
                time.sleep(3600)
            raise RuntimeError("a flaky step")
        return self.net(x)
'''


def test_a_hung_or_crashed_point_of_the_toolkits_loop_is_requeued_from_its_save(
    slurm, tmp_path: Path
) -> None:
    """Sweep points of the toolkit's loop (`jzk train -m`, submitit's own task, with no
    restart step after its srun) go the way of a rendered job: the model of one stalls
    in step 3, after the save of step 2 (the watchdog names and dumps it), the other's
    raises there; task 0 requeues each point (one of preemption.max_restarts; both were
    left FAILED), and the next start goes on from step 2 to the end."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "flaky.py").write_text(FAILS_ONCE)
    sweep_dir = tmp_path / "sweep"
    launched = sweep_from(
        project, slurm, sweep_dir,
        "model=custom", "model._target_=flaky.FailsOnce", "+model.in_dim=32",
        "+model.out_dim=8", "+model.fault=hang,crash", f"+model.marks={tmp_path}",
        "loss=criterion", "loss.criterion._target_=torch.nn.MSELoss", "train.steps=20",
        "train.eval_every=0", "checkpoint.every_steps=2", "watchdog.stall_seconds=5",
        "watchdog.heartbeat_seconds=1",
    )  # fmt: skip
    assert launched.returncode == 0, launched.stderr[-3000:]
    hang, crash = manifest_records(sweep_dir)
    wait_for(hang["array_job_id"], slurm, timeout=150)
    for point, said in ((hang, "hang;"), (crash, "failure (exit 1);")):
        err = Path(point["log"]).with_suffix(".err").read_text()
        assert f"{said} requeued job {point['job_id']} (1/3)" in err, err[-3000:]
        assert sacct_states(point["job_id"], slurm)[-1] == "COMPLETED", err[-3000:]
        assert "(step 2)" in Path(point["log"]).read_text(), err[-3000:]  # resumed from it
        run_dir = Path(point["run_dir"])
        endings = [json.loads(x) for x in (run_dir / "endings.jsonl").open()]
        assert [e["retried"] for e in endings][-2:] == [True, None], endings
        assert endings[-1]["kind"] == "completed", endings
        assert (run_dir / "checkpoints" / "step-20" / "manifest.json").exists()
    (dumped,) = Path(hang["run_dir"]).glob("hang-*")
    assert "flaky.py" in (dumped / "rank-0.txt").read_text()
