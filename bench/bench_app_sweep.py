"""Submitting your own Hydra app's sweep: `hydra/launcher=jeanzay` vs hydra-submitit-launcher.

    .venv/bin/pip install -e '.[bench]'          # hydra-submitit-launcher, the baseline
    .venv/bin/python bench/bench_app_sweep.py [--points 100] [--rounds 3]

The same `@hydra.main` app (Hydra's submitit example: `submitit.JobEnvironment()` logged
by the task function), the same N-point sweep `lr=<N values>` and the same request (1
node, 1 task, 1 GPU, 60 minutes, partition debug), once per launcher, the config's
launcher line the only difference: `override hydra/launcher: jeanzay` (the app's
function pickled, every point checked against the profile slurm_local, the code frozen,
manifest.jsonl) or `submitit_slurm`. Timed from the command's start to the return of its
last sbatch call. Both submit through a stand-in `sbatch` first on PATH, which records
the call and answers a job id: no cluster is needed, and the figure is the launchers'
own work. hydra-submitit-launcher then waits for its jobs (which never run): it is
stopped once its sbatch call has returned. Rounds alternate which launcher goes first.
Results: stdout and bench/results/app_sweep.json.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable
sys.path.insert(0, str(REPO / "bench"))

from common import write_result  # noqa: E402

APP = """
import logging
import os

import hydra
import submitit
from omegaconf import DictConfig

log = logging.getLogger(__name__)


@hydra.main(version_base=None, config_path=".", config_name="config")
def my_app(cfg: DictConfig) -> float:
    env = submitit.JobEnvironment()
    log.info(f"Process ID {os.getpid()} executing task {cfg.task}, with {env}")
    return cfg.lr


if __name__ == "__main__":
    my_app()
"""

CONFIG = """defaults:
  - override hydra/launcher: {launcher}
task: 1
lr: 0.1
"""

# A stand-in sbatch: one line per call (start, end) and a job id, as the real one answers.
SBATCH = """#!/bin/bash
start=$(date +%s.%N)
n=$(( $(wc -l < "{log}" 2>/dev/null || echo 0) + 1000 ))
echo "Submitted batch job $n"
echo "$start $(date +%s.%N)" >> "{log}"
"""

REQUEST = {
    "submitit_slurm": [
        "hydra.launcher.partition=debug",
        "hydra.launcher.timeout_min=60",
        "hydra.launcher.gpus_per_node=1",
    ],
    "jeanzay": [
        "hydra.launcher.cluster=slurm_local",
        "hydra.launcher.partition=debug",
        "hydra.launcher.timeout_min=60",
        "hydra.launcher.gpus_per_node=1",
    ],
}


def submit(work: Path, launcher: str, points: int) -> float:
    """Seconds from the command's start to the return of its last sbatch call."""
    project = work / f"app-{launcher}"
    project.mkdir(parents=True)
    (project / "my_app.py").write_text(APP)
    (project / "config.yaml").write_text(CONFIG.format(launcher=launcher))
    shim = work / f"bin-{launcher}"
    shim.mkdir()
    log = work / f"sbatch-{launcher}.log"
    (shim / "sbatch").write_text(SBATCH.format(log=log))
    (shim / "sbatch").chmod(0o755)
    lrs = ",".join(f"{1e-4 * (i + 1):.6g}" for i in range(points))
    argv = [PY, "my_app.py", "-m", *REQUEST[launcher], f"lr={lrs}"]
    argv.append(f"hydra.sweep.dir={work / ('sweep-' + launcher)}")
    env = {**os.environ, "PATH": f"{shim}:{os.environ['PATH']}"}
    output = open(work / f"{launcher}.out", "w+b")  # noqa: SIM115
    start = time.time()
    proc = subprocess.Popen(argv, cwd=project, env=env, stdout=output, stderr=subprocess.STDOUT)
    while proc.poll() is None:
        if launcher == "submitit_slurm" and log.exists() and log.read_text().strip():
            proc.kill()  # it now waits for jobs that never run
            break
        time.sleep(0.02)
    proc.wait()
    lines = log.read_text().splitlines() if log.exists() else []
    calls = [tuple(map(float, line.split())) for line in lines]
    if not calls or (launcher == "jeanzay" and proc.returncode != 0):
        output.seek(0)
        sys.exit(f"bench_app_sweep: {launcher} failed: {output.read().decode()[-3000:]}")
    return max(end for _, end in calls) - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--points", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rounds = []
    for i in range(args.rounds):
        order = ["jeanzay", "submitit_slurm"] if i % 2 == 0 else ["submitit_slurm", "jeanzay"]
        with tempfile.TemporaryDirectory(prefix="jzk-app-sweep-") as tmp:
            got = {name: submit(Path(tmp) / name, name, args.points) for name in order}
        got["ratio"] = got["jeanzay"] / got["submitit_slurm"]
        print(
            f"round {i + 1}: ours {got['jeanzay']:.2f} s, hydra-submitit-launcher "
            f"{got['submitit_slurm']:.2f} s, ratio {got['ratio']:.3f}",
            flush=True,
        )
        rounds.append({k: round(v, 3) for k, v in got.items()})
    summary = {
        "ours_s": statistics.median(r["jeanzay"] for r in rounds),
        "hydra_submitit_s": statistics.median(r["submitit_slurm"] for r in rounds),
        "ratio": statistics.median(r["ratio"] for r in rounds),
    }
    print(f"median: {summary}")
    path = write_result("app_sweep", {"points": args.points, "rounds": rounds, "summary": summary})
    print(f"-> {path}")


if __name__ == "__main__":
    main()
