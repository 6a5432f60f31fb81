"""A study on a real Slurm cluster (the local one by default): `jzk tune` against Hydra's
Optuna sweeper with hydra-submitit-launcher, the same trials, the same cluster.

    sudo .venv/bin/python bench/bench_tune.py [--trials 24] [--tasks 4] [--steps 100,400,1600]
        [--python VENV/bin/python]   # Hydra's sweeper's venv, if you have one (else built)

Both search the same space, in which trials are of uneven lengths (train.steps is one of
its dimensions). Hydra's sweeper asks for `n_jobs` trials, waits for the slowest of the
batch, then asks again; `jzk tune`'s tasks each take the next trial as soon as theirs ends
(and its pruner stops trials that trail). Measured: wall time from the command to the
study's last trial (ours: the job array gone from the queue), and our hand-over per trial
(a trial's end to the next one's start in the same task, from the trials' logs: ask,
start, tell). Results go to stdout and bench/results/tune.json.

Hydra's sweeper (hydra-optuna-sweeper 1.3.0) needs optuna<3, so it runs in a venv of its
own layered on this one (tests/conftest.py says why), built here unless --python names one.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable
JZK = str(Path(PY).parent / "jzk")
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO))

from common import write_result  # noqa: E402

STEPS = "100,400,1600"  # train.steps's choices: the trials' uneven lengths


def space(steps: str) -> dict[str, str]:
    return {"optim.lr": "tag(log, interval(0.0001, 0.1))", "train.steps": f"choice({steps})"}


COMMON = [
    "cluster=slurm_local",
    "resources.gpus_per_node=1",
    "resources.cpus_per_task=1",
    "train.log_every=50",
    "eval.every_steps=100",
    f"job.python={PY}",
]


def in_queue(env: dict[str, str], job_id: str) -> bool:
    """Whether the study's job array is still in the queue (its own id: on a shared
    cluster, other users' jobs are there too)."""
    argv = ["squeue", "-h", "-j", job_id, "-o", "%i"]
    out = subprocess.run(argv, env=env, capture_output=True, text=True)
    return bool(out.stdout.strip())


def ours(env: dict[str, str], work: Path, trials: int, tasks: int, steps: str) -> dict:
    params = ", ".join(f'{k}: "{v}"' for k, v in space(steps).items())
    argv = [JZK, "tune", *COMMON, f"tune.params={{{params}}}", f"tune.n_trials={trials}"]
    argv += [f"tune.tasks={tasks}", "tune.seed=0", "tune.prune_after_trials=4"]
    start = time.time()
    sub = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=300)
    if sub.returncode != 0:
        sys.exit(f"bench_tune: jzk tune failed: {sub.stderr[-2000:]}")
    submitted = re.search(r"submitted job array (\d+)", sub.stdout)
    if submitted is None:
        sys.exit(f"bench_tune: no job array in jzk tune's output: {sub.stdout[-2000:]}")
    deadline = time.monotonic() + 3000
    while in_queue(env, submitted.group(1)):
        if time.monotonic() > deadline:
            sys.exit(f"bench_tune: job array {submitted.group(1)} still queued after 3000 s")
        time.sleep(0.5)
    wall = time.time() - start
    from jeanzay_kit.tune.view import load_study_dir

    study = load_study_dir(work / "tune" / "jzk")
    states = [t.state.name for t in study.get_trials()]
    return {
        "wall_s": round(wall, 2),
        "states": {s: states.count(s) for s in set(states)},
        "best_value": study.best_value,
        "hand_over_s": hand_overs(study),
    }


def hand_overs(study) -> list[float]:  # noqa: ANN001
    """Per task, the time from a trial's run ending to the next trial's run starting, as
    the task recorded them: tell, ask, start (the run's own start-up, the same under any
    launcher, is not in it)."""
    by_task: dict[str, list] = {}
    for t in study.get_trials():
        if "jzk_run_started" in t.user_attrs and "jzk_run_ended" in t.user_attrs:
            by_task.setdefault(t.user_attrs.get("jzk_task", "?"), []).append(t.user_attrs)
    gaps = []
    for runs in by_task.values():
        runs.sort(key=lambda a: a["jzk_run_started"])
        for before, after in zip(runs, runs[1:], strict=False):
            gaps.append(round(after["jzk_run_started"] - before["jzk_run_ended"], 3))
    return gaps


def theirs(
    env: dict[str, str], work: Path, python: str, trials: int, tasks: int, steps: str
) -> dict:
    sweep_dir = work / "hydra-optuna"
    argv = [python, "train.py", "-m", *COMMON, "hydra/sweeper=optuna"]
    argv += [f"{k}={v}" for k, v in space(steps).items()]
    argv += [
        f"hydra.sweeper.n_trials={trials}",
        f"hydra.sweeper.n_jobs={tasks}",
        "hydra.sweeper.sampler.seed=0",
        "hydra/launcher=submitit_slurm",
        "hydra.launcher.partition=debug",
        "hydra.launcher.timeout_min=60",
        "hydra.launcher.cpus_per_task=1",
        f"hydra.sweep.dir={sweep_dir}",
    ]
    start = time.time()
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=3000)
    wall = time.time() - start
    if done.returncode != 0:
        sys.exit(f"bench_tune: Hydra's sweeper failed: {done.stderr[-3000:]}")
    best = re.search(r"best_value: (\S+)", (sweep_dir / "optimization_results.yaml").read_text())
    return {"wall_s": round(wall, 2), "best_value": float(best.group(1)) if best else None}


def hydra_optuna_python(root: Path) -> str:
    """A venv with hydra-optuna-sweeper layered on this one (as tests/conftest.py's)."""
    from tests.layered_venv import layered_venv

    return layered_venv(root, ["hydra-optuna-sweeper==1.3.0"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=24)
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--steps", default=STEPS, help="train.steps's choices (%(default)s)")
    parser.add_argument("--python", help="a venv's python with hydra-optuna-sweeper (else built)")
    args = parser.parse_args()
    env = dict(os.environ)
    state = None
    if "SLURM_CONF" not in env:
        state = Path(tempfile.mkdtemp(prefix="jzk-bench-tune-"))
        subprocess.run([str(REPO / "scripts" / "slurm-local"), "up", str(state)], check=True)
        env["SLURM_CONF"] = str(state / "etc" / "slurm.conf")
    work = Path(tempfile.mkdtemp(prefix="jzk-bench-tune-work-"))
    try:
        python = args.python or hydra_optuna_python(work / "venv")
        result = {"trials": args.trials, "tasks": args.tasks, "steps": args.steps}
        result["ours"] = ours(env, work, args.trials, args.tasks, args.steps)
        print(json.dumps(result["ours"]), flush=True)
        result["theirs"] = theirs(env, work, python, args.trials, args.tasks, args.steps)
        print(json.dumps(result["theirs"]), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if state is not None:
            subprocess.run([str(REPO / "scripts" / "slurm-local"), "down", str(state)], check=False)
    gaps = result["ours"]["hand_over_s"]
    result["summary"] = {
        "study_wall_ratio": round(result["ours"]["wall_s"] / result["theirs"]["wall_s"], 3),
        "hand_over_median_s": sorted(gaps)[len(gaps) // 2] if gaps else None,
        "hand_over_max_s": max(gaps) if gaps else None,
    }
    print(json.dumps(result["summary"]), flush=True)
    write_result("tune", result)


if __name__ == "__main__":
    main()
