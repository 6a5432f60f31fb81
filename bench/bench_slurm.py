"""Submission and start-up costs on a real Slurm cluster (the local one by default).

    .venv/bin/pip install -e '.[bench]'          # hydra-submitit-launcher, the baseline
    sudo .venv/bin/python bench/bench_slurm.py [--points 100] [--rounds 3]

Two measurements, each against a baseline taken in the same run on the same cluster:

* sweep submit: wall time of `python train.py -m ... optim.lr=<N values>` with our
  launcher (hydra/launcher=jeanzay, returns once queued) vs hydra-submitit-launcher
  (hydra/launcher=submitit_slurm), counted until its sbatch call returns (it then waits for
  the jobs, which the bench cancels). sbatch calls per sweep are counted by a logging
  `sbatch` placed first on PATH.
* time to first step: submission -> first metrics.jsonl record, for `jzk submit` (sbatch,
  the rendered script, srun) vs a bare `srun python train.py` of the same config.

Without SLURM_CONF set, a cluster is started with scripts/slurm-local (needs root) and
stopped at the end. Results go to stdout and bench/results/slurm.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable
JZK = str(Path(PY).parent / "jzk")
sys.path.insert(0, str(REPO / "bench"))

from common import write_result  # noqa: E402


def sbatch_shim(directory: Path) -> Path:
    """An `sbatch` that logs each call (start, end) and runs the real one."""
    real = shutil.which("sbatch")
    if real is None:
        sys.exit("bench_slurm: sbatch not found (apt-get install slurm-client)")
    log = directory / "sbatch-calls.log"
    shim = directory / "sbatch"
    shim.write_text(
        "#!/bin/bash\n"
        f'start=$(date +%s.%N); "{real}" "$@"; rc=$?\n'
        f'echo "$start $(date +%s.%N)" >> "{log}"; exit $rc\n'
    )
    shim.chmod(0o755)
    return log


def cancel_all(env: dict[str, str]) -> None:
    subprocess.run(["scancel", "--me"], env=env, capture_output=True, timeout=60)
    for _ in range(120):
        out = subprocess.run(
            ["squeue", "--me", "-h", "-o", "%i"], env=env, capture_output=True, text=True
        ).stdout
        if not out.strip():
            return
        time.sleep(0.5)


def sweep_submit(env: dict[str, str], work: Path, launcher: str, points: int) -> dict:
    shim_dir = work / f"shim-{launcher}"
    work.mkdir(parents=True, exist_ok=True)
    shim_dir.mkdir(parents=True)
    log = sbatch_shim(shim_dir)
    run_env = dict(env, PATH=f"{shim_dir}:{env['PATH']}")
    lrs = ",".join(f"{1e-4 * (i + 1):.6g}" for i in range(points))
    argv = [
        PY,
        "train.py",
        "-m",
        "cluster=slurm_local",
        f"optim.lr={lrs}",
        "train.steps=5",
        f"job.python={PY}",
        f"hydra.sweep.dir={work / ('sweep-' + launcher)}",
        f"hydra/launcher={launcher}",
    ]
    if launcher == "submitit_slurm":
        # The same resources as our launcher asks for (slurm_local, 1 task of 1 CPU).
        argv += ["hydra.launcher.partition=debug", "hydra.launcher.timeout_min=60"]
    # The output goes to a file: a 1000-point sweep logs more than a pipe holds, and an
    # unread pipe would stop the launcher mid-way.
    output = open(work / f"{launcher}-{points}.log", "w+b")  # noqa: SIM115
    start = time.time()
    proc = subprocess.Popen(argv, cwd=REPO, env=run_env, stdout=output, stderr=subprocess.STDOUT)
    # hydra-submitit-launcher blocks until its jobs end: stop it once sbatch has returned.
    while proc.poll() is None:
        if launcher == "submitit_slurm" and log.exists() and log.read_text().strip():
            time.sleep(0.5)
            proc.kill()
            break
        time.sleep(0.05)
    returned = time.time()
    proc.wait()
    calls = [tuple(map(float, line.split())) for line in log.read_text().splitlines()]
    cancel_all(env)
    if not calls:
        output.seek(0)
        sys.exit(f"bench_slurm: {launcher} made no sbatch call: {output.read().decode()[-2000:]}")
    output.close()
    return {
        "sbatch_calls": len(calls),
        "until_sbatch_done_s": round(max(end for _, end in calls) - start, 3),
        "until_command_returned_s": round(returned - start, 3) if launcher == "jeanzay" else None,
    }


def first_step(env: dict[str, str], work: Path, how: str) -> float:
    run_dir = work / f"first-{how}"
    common = ["cluster=slurm_local", "train.steps=5", "train.log_every=1", f"job.python={PY}"]
    start = time.time()
    if how == "jzk_submit":
        proc = subprocess.Popen(
            [
                JZK,
                "submit",
                *common,
                f"job.entry={REPO / 'train.py'}",
                "job.entry_kind=toolkit",
                f"job.run_dir={run_dir}",
            ],
            cwd=work,
            env=env,
            stdout=subprocess.DEVNULL,
        )
    else:  # the same training, started by a bare srun (1 task, like the job)
        proc = subprocess.Popen(
            ["srun", "-N1", "-n1", PY, str(REPO / "train.py"), *common, f"hydra.run.dir={run_dir}"],
            cwd=work,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    metrics = run_dir / "metrics.jsonl"
    deadline = start + 180
    while time.time() < deadline:
        if metrics.exists() and metrics.read_text().strip():
            elapsed = time.time() - start
            proc.wait(timeout=120)
            cancel_all(env)
            return elapsed
        time.sleep(0.02)
    cancel_all(env)
    sys.exit(f"bench_slurm: no first step for {how} within 180 s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--points", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--big-points",
        type=int,
        default=1000,
        help="also time one sweep of this many points per round, ours only (0: skip)",
    )
    args = parser.parse_args()
    try:
        import hydra_plugins.hydra_submitit_launcher  # noqa: F401
    except ImportError:
        sys.exit(
            "bench_slurm: the baseline needs hydra-submitit-launcher: pip install -e '.[bench]'"
        )

    env = dict(os.environ)
    state = None
    if "SLURM_CONF" not in env:
        state = Path(tempfile.mkdtemp(prefix="jzk-bench-slurm-"))
        subprocess.run([str(REPO / "scripts" / "slurm-local"), "up", str(state)], check=True)
        env["SLURM_CONF"] = str(state / "etc" / "slurm.conf")
    results: dict = {"points": args.points, "rounds": []}
    try:
        for r in range(args.rounds):
            work = Path(tempfile.mkdtemp(prefix="jzk-bench-round-"))
            order = ["jeanzay", "submitit_slurm"] if r % 2 == 0 else ["submitit_slurm", "jeanzay"]
            rnd = {name: sweep_submit(env, work, name, args.points) for name in order}
            hows = ["jzk_submit", "bare_srun"] if r % 2 == 0 else ["bare_srun", "jzk_submit"]
            rnd["first_step_s"] = {how: round(first_step(env, work, how), 3) for how in hows}
            if args.big_points:
                big = sweep_submit(env, work / "big", "jeanzay", args.big_points)
                rnd["big_sweep_s"] = big["until_command_returned_s"]
            results["rounds"].append(rnd)
            print(json.dumps(rnd), flush=True)
            shutil.rmtree(work, ignore_errors=True)
    finally:
        if state is not None:
            subprocess.run([str(REPO / "scripts" / "slurm-local"), "down", str(state)], check=False)

    def med(f):
        return statistics.median(f(r) for r in results["rounds"])

    ours = med(lambda r: r["jeanzay"]["until_sbatch_done_s"])
    theirs = med(lambda r: r["submitit_slurm"]["until_sbatch_done_s"])
    job = med(lambda r: r["first_step_s"]["jzk_submit"])
    bare = med(lambda r: r["first_step_s"]["bare_srun"])
    big = [r["big_sweep_s"] for r in results["rounds"] if "big_sweep_s" in r]
    results["summary"] = {
        "big_sweep_points": args.big_points,
        "big_sweep_ours_s": statistics.median(big) if big else None,
        "sweep_submit_ours_s": ours,
        "sweep_submit_hydra_submitit_s": theirs,
        "sweep_submit_ratio": round(ours / theirs, 3),
        "sbatch_calls_ours": results["rounds"][0]["jeanzay"]["sbatch_calls"],
        "sbatch_calls_hydra_submitit": results["rounds"][0]["submitit_slurm"]["sbatch_calls"],
        "command_returned_ours_s": med(lambda r: r["jeanzay"]["until_command_returned_s"]),
        "first_step_job_s": job,
        "first_step_bare_srun_s": bare,
        "first_step_ratio": round(job / bare, 3),
    }
    print(json.dumps(results["summary"], indent=2))
    write_result("slurm", results)


if __name__ == "__main__":
    main()
