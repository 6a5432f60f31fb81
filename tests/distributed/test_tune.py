"""`jzk tune` as a user runs it, here (cluster=local), from a folder where nothing was
prepared: an Optuna study whose tasks each ask for a trial, train it as a run of its own,
tell its value, and ask again; a signal to the whole tree stops it with every finished
trial kept, and the same command resumes the stopped trial from its checkpoint."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.mounts import read_only_view

JZK = str(Path(sys.executable).parent / "jzk")
SPACE = 'tune.params={optim.lr: "tag(log, interval(0.001, 0.1))"}'
COMMON = ("train.log_every=10", "tune.objective=train_loss", "tune.seed=3")


def tune(cwd: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [JZK, "tune", SPACE, *COMMON, *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a terminal gives it
    )


def optuna_study(database: Path):  # noqa: ANN201 - optuna's Study
    import optuna

    return optuna.load_study(study_name="jzk", storage=f"sqlite:///{database}")


def load(study_dir: Path):  # noqa: ANN201 - optuna's Study
    """The study as Optuna's own tools read it: the journal file, nothing of ours."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    storage = JournalStorage(JournalFileBackend(str(study_dir / "study.journal")))
    return optuna.load_study(study_name="jzk", storage=storage)


def result(run_dir: Path) -> dict:
    return json.loads((run_dir / "result.json").read_text())


def wait_for_step(run_dir: Path, step: int, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        try:
            lines = (run_dir / "metrics.jsonl").read_text().splitlines()
            steps = [json.loads(line).get("step", 0) for line in lines]
        except (OSError, ValueError):
            steps = []
        if steps and max(steps) >= step:
            return
        time.sleep(0.2)
    raise AssertionError(f"{run_dir} never reached step {step}")


@pytest.mark.timeout(400)
def test_a_stopped_study_resumes_its_trial_from_the_checkpoint(tmp_path: Path) -> None:
    study_dir = tmp_path / "tune" / "jzk"
    args = ("train.steps=150", "checkpoint.every_steps=1000", "tune.n_trials=2")  # 300 before
    proc = tune(tmp_path, *args)
    wait_for_step(study_dir / "trial-1", 20, proc)  # the second trial, under way
    os.killpg(proc.pid, signal.SIGUSR1)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 3, err[-3000:]
    assert "run the same command again to resume the study" in out
    states = {t.number: t.state.name for t in load(study_dir).get_trials()}
    assert states == {0: "COMPLETE", 1: "RUNNING"}  # the finished trial is kept

    again = tune(tmp_path, *args)
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0, err[-3000:]
    assert "task-0 resumes trial 1" in out
    trials = load(study_dir).get_trials()
    assert [t.state.name for t in trials] == ["COMPLETE", "COMPLETE"]  # not counted twice
    log = (study_dir / "logs" / "trial-1.log").read_text()
    assert "resumed from" in log and "step-" in log
    # `jzk logs STUDY --trial N` is that log; --rank 1 the trial's rank 1 of each start.
    shown = subprocess.run(
        [JZK, "logs", str(study_dir), "--trial", "1"], capture_output=True, text=True
    )
    assert shown.stdout == log, shown.stderr
    ranks = subprocess.run(
        [JZK, "logs", str(study_dir), "--trial", "1", "--rank", "1"], capture_output=True, text=True
    )
    assert ranks.stdout.count("jzk: rank 1/2") == 2, ranks.stderr  # one line per start
    # The resumed trial ends as a run of its values that was never stopped.
    lr = trials[1].params["optim.lr"]
    straight = subprocess.run(
        [JZK, "train", *args[:2], *COMMON, f"optim.lr={lr!r}", f"job.run_dir={tmp_path / 's'}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=200,
    )
    assert straight.returncode == 0, straight.stderr[-3000:]
    digest = straight.stdout.split("model digest ")[1].split(",")[0]
    assert f"model digest {digest}" in log
    assert trials[1].value == result(tmp_path / "s")["value"]


# Optuna's RandomSampler with this seed (per trial: tune/study.py trial_seed) draws the
# first of two choices for trial 0 and the second for trial 1.
FIRST_THEN_SECOND = ("tune.sampler=random", "tune.seed=8", "tune.n_trials=2")


def tune_with(cwd: Path, space: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [JZK, "tune", space, "train.log_every=50", "tune.objective=train_loss", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=280,
    )


@pytest.mark.timeout(300)
def test_a_trial_trailing_the_median_is_pruned_after_a_save(tmp_path: Path) -> None:
    # The study is kept in a database (tune.storage, any RDB URL Optuna takes): the
    # study's folder is made and says where the study is, so `jzk status` and `jzk
    # report` below read it (issue 45: a FileNotFoundError before, and no study seen).
    database = tmp_path / "studies.sqlite3"
    done = tune_with(
        tmp_path,
        'tune.params={optim.lr: "choice(0.003, 0.000001)"}',
        *FIRST_THEN_SECOND,
        "tune.prune_after_trials=1",
        # The slow trial may be pruned from step 50 on (the default warm-up would be a
        # quarter of train.steps), at the task's next look at its values (each second):
        # 550 steps of room (1125 with the 1500 steps before: the suite's time).
        "tune.prune_warmup_steps=50",
        "train.steps=600",
        f"tune.storage=sqlite:///{database}",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    study_dir = tmp_path / "tune" / "jzk"
    assert database.is_file() and not (study_dir / "study.journal").exists()
    assert (study_dir / "storage.json").stat().st_mode & 0o077 == 0  # may hold a password
    good, slow = optuna_study(database).get_trials()
    assert (good.params["optim.lr"], slow.params["optim.lr"]) == (0.003, 0.000001)
    assert (good.state.name, slow.state.name) == ("COMPLETE", "PRUNED")
    # Its values went to the study as it trained, and the pruner stopped it early: the
    # run saved where it stood and ended (no result: it did not finish).
    last = max(slow.intermediate_values)
    assert 0 < last < 600 and len(slow.intermediate_values) == last // 50
    run_dir = tmp_path / "tune" / "jzk" / "trial-1"
    saved = sorted(
        int(p.name.removeprefix("step-")) for p in (run_dir / "checkpoints").glob("step-*")
    )
    assert saved and last <= saved[-1] < 600
    assert not (run_dir / "result.json").exists()
    assert "1 complete, 1 pruned" in done.stdout
    # jzk status and jzk report read the study from its folder.
    status = subprocess.run([JZK, "status", str(study_dir)], capture_output=True, text=True)
    assert status.returncode == 0, status.stderr
    row = rf"^1 +PRUNED +[0-9.]+ +{last} +task-0 +1e-06$"  # its last reported value
    assert re.search(row, status.stdout, re.M), status.stdout
    report = subprocess.run([JZK, "report", str(study_dir)], capture_output=True, text=True)
    assert report.returncode == 0, report.stderr
    for name in ("optimization_history", "param_importances", "parallel_coordinate"):
        assert (tmp_path / "tune" / "jzk" / "report" / f"{name}.png").stat().st_size > 1000


@pytest.mark.timeout(200)
def test_a_failed_trial_is_recorded_with_its_reason_and_the_study_goes_on(tmp_path: Path) -> None:
    done = tune_with(
        tmp_path,
        'tune.params={train.micro_batch_size: "choice(4, 0)"}',
        *FIRST_THEN_SECOND,
        "train.steps=20",
        "tune.objective=[train_loss,eval_loss]",  # after tune_with's: the last one wins
    )
    assert done.returncode == 0, done.stderr[-3000:]
    ok, failed = load(tmp_path / "tune" / "jzk").get_trials()
    assert (ok.state.name, failed.state.name) == ("COMPLETE", "FAIL")
    # Two objectives of the toolkit's loop: result.json lists both, the study has both.
    record = result(tmp_path / "tune" / "jzk" / "trial-0")
    assert record["objectives"] == ["train_loss", "eval_loss"]
    assert ok.values == record["values"] == [record["train_loss"], record["eval_loss"]]
    reason = failed.user_attrs["jzk_reason"]
    assert "exit code 2" in reason and "train.micro_batch_size" in reason, reason
    assert f"trial 1 failed: {reason}" in done.stdout


# A user's own script as the objective: its options searched (`--lr`, `--width` in
# tune.params), two values written to result.json in tune.objective's order. Nothing in it
# knows the toolkit but the documented JZK_RUN_DIR.
SCRIPT = """
import argparse, json, os

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, required=True)
parser.add_argument("--width", type=int, required=True)
parser.add_argument("--out_dir", required=True)
args = parser.parse_args()
assert args.out_dir == os.environ["JZK_RUN_DIR"], (args.out_dir, os.environ["JZK_RUN_DIR"])
loss = (args.lr - 0.01) ** 2 + 1.0 / args.width  # a wider model fits better...
with open(os.path.join(os.environ["JZK_RUN_DIR"], "result.json"), "w") as out:
    json.dump({"values": [loss, args.width]}, out)  # ...and costs more
"""


@pytest.mark.timeout(300)
def test_a_scripts_options_are_searched_for_two_objectives_and_a_pareto_front(
    tmp_path: Path,
) -> None:
    (tmp_path / "search.py").write_text(SCRIPT)
    search = [
        "tune",
        "job.entry=search.py",
        "job.args=['--out_dir=${job.run_dir}']",
        'tune.params={--lr: "tag(log, interval(1e-3, 1e-1))", --width: "choice(8, 64, 512)"}',
        "tune.objective=[loss,width]",
        "tune.sampler=nsga2",
        "tune.seed=5",
        "resources.gpus_per_node=1",
    ]
    done = jzk_in(tmp_path, *search, "tune.n_trials=3")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "(minimize/minimize loss/width)" in done.stdout, done.stdout
    assert re.search(r"starts trial 0: --lr=[0-9.e-]+ --width=(8|64|512)\n", done.stdout)
    study = load(tmp_path / "tune" / "jzk")  # plain Optuna
    assert study.metric_names == ["loss", "width"]
    trials = study.get_trials()
    assert [t.state.name for t in trials] == ["COMPLETE"] * 3
    for trial in trials:
        lr, width = trial.params["--lr"], trial.params["--width"]
        assert trial.values == [(lr - 0.01) ** 2 + 1.0 / width, width]
    front = sorted(t.number for t in study.best_trials)
    assert f"Pareto front: {len(front)} trial(s) (minimize loss, minimize width)" in done.stdout
    shown = re.findall(r"jzk tune:   trial (\d+): values", done.stdout)
    assert sorted(map(int, shown)) == front, done.stdout

    # The same study where it cannot be written (a read-only mount: an archive, a
    # colleague's project): jzk status reads it; what would write there says so in one
    # line, before anything runs, and a report goes where --out says.
    with read_only_view(tmp_path, tmp_path.parent / f"{tmp_path.name}-ro") as view:
        study_view = view / "tune" / "jzk"
        status = jzk_in(tmp_path, "status", str(study_view))
        assert status.returncode == 0, status.stderr[-2000:]
        assert f"Pareto front: {len(front)} trial(s)" in status.stdout, status.stdout
        refused = jzk_in(tmp_path, "report", str(study_view))
        assert refused.returncode != 0 and "read-only filesystem" in refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
        report = jzk_in(tmp_path, "report", str(study_view), f"--out={tmp_path / 'report'}")
        assert report.returncode == 0, report.stderr[-2000:]
        assert (tmp_path / "report" / "pareto_front.png").stat().st_size > 0
        extended = jzk_in(view, *search, "tune.n_trials=4")
        assert extended.returncode != 0 and "read-only filesystem" in extended.stderr
        assert len(extended.stderr.strip().splitlines()) == 1, extended.stderr
    assert len(load(tmp_path / "tune" / "jzk").get_trials()) == 3  # nothing asked


def jzk_in(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [JZK, *args], cwd=cwd, capture_output=True, text=True, timeout=280, check=False
    )


@pytest.mark.timeout(300)
def test_two_tasks_run_trials_as_runs_of_their_own_and_a_killed_ones_trial_fails(
    tmp_path: Path,
) -> None:
    """Two tasks take trials as they end theirs; one is killed (SIGKILL: it cannot tell
    the study) in the middle of a trial: that trial is told FAIL by the other task once
    the study has no trial left to hand out, and the other trials complete."""
    study_dir = tmp_path / "tune" / "jzk"
    # 300 steps (500 before, suite time): trial 1 is killed at step 100, mid-trial.
    args = ("train.steps=300", "train.log_every=50", "tune.n_trials=3", "tune.tasks=2")
    proc = tune(tmp_path, *args)
    wait_for_step(study_dir / "trial-1", 100, proc)
    victim = next(t for t in load(study_dir).get_trials() if t.number == 1)
    owner = victim.user_attrs["jzk_owner"]  # pid:<host>:<pid> of the task running it
    os.kill(int(owner.rsplit(":", 1)[1]), signal.SIGKILL)
    out, err = proc.communicate(timeout=280)
    assert proc.returncode == 1, err[-3000:]
    assert f"{victim.user_attrs['jzk_task']} ended: killed by SIGKILL" in err
    study = load(study_dir)
    trials = study.get_trials()
    assert [t.state.name for t in trials] == ["COMPLETE", "FAIL", "COMPLETE"], out + err
    assert "killed" in trials[1].user_attrs["jzk_reason"]
    # Its run did not train on for nobody: it was stopped when its task died.
    assert "SIGTERM received" in (study_dir / "logs" / "trial-1.log").read_text()
    assert not (study_dir / "trial-1" / "result.json").exists()
    # Each finished trial is a normal run with its own directory, its value the run's own.
    lrs = set()
    for trial in (trials[0], trials[2]):
        run_dir = Path(trial.user_attrs["jzk_run_dir"])
        assert run_dir == study_dir / f"trial-{trial.number}"
        assert trial.value == result(run_dir)["value"] == result(run_dir)["train_loss"]
        lrs.add(trial.params["optim.lr"])
        assert 0.001 <= trial.params["optim.lr"] <= 0.1
    assert len(lrs | {victim.params["optim.lr"]}) == 3, "two tasks with one seed drew alike"
    assert {t.user_attrs["jzk_task"] for t in trials} == {"task-0", "task-1"}
    assert f"best: trial {study.best_trial.number}, value {study.best_value:.6g}" in out
