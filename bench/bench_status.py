"""`jzk status` over sweeps of 10, 100 and 1000 runs: time and Slurm calls per refresh.

    .venv/bin/python bench/bench_status.py [--sizes 10 100 1000] [--rounds 3]

Each size is a sweep directory of N runs (a manifest of N array tasks, each run
directory with its metrics.jsonl and one heartbeat), and stand-ins for `squeue` and
`sacct` on PATH that answer for every task and count their calls. What is measured: the
wall time of `jzk status --json DIR` (median of the rounds) and how many times each
command ran in one refresh. The claims (issue 43): one squeue and one sacct call whatever
the size, and a cost per run that does not grow with the number of runs (the ratio of
the per-run time at the largest size to the smallest, the start-up of `jzk` excluded by
subtracting the time of a 1-run sweep). Results: bench/results/status.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO, write_result  # noqa: E402

JZK = str(Path(sys.executable).parent / "jzk")
STAND_IN = """#!/bin/bash
echo "$0" >> "{calls}"
case "$(basename "$0")" in
  squeue) for i in $(seq 0 {last}); do echo "77_$i|RUNNING|1:00|10:00|n1"; done ;;
  sacct) for i in $(seq 0 {last}); do
           echo "77_$i|RUNNING|00:01:00|0:0|n1|60|cpu=2,gres/gpu=4,node=1"; done ;;
esac
"""


def make_sweep(root: Path, runs: int) -> Path:
    sweep = root / f"sweep-{runs}"
    lines = []
    now = time.time()
    for i in range(runs):
        run_dir = sweep / str(i)
        (run_dir / "heartbeat").mkdir(parents=True)
        metrics = [{"step": s, "loss": 1.0 / s, "eta_s": 10.0} for s in range(10, 110, 10)]
        (run_dir / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
        beat = {"rank": 0, "host": "n1", "pid": 1, "job_id": f"77_{i}", "step": 100,
                "total_steps": 1000, "phase": "forward_backward", "progress_time": now,
                "wall_time": now, "token": "t", "interval_s": 2.0}  # fmt: skip
        (run_dir / "heartbeat" / "rank-0.json").write_text(json.dumps(beat))
        record = {"job_id": f"77_{i}", "array_job_id": "77", "run_dir": str(run_dir),
                  "log": str(sweep / f"77_{i}.out"), "overrides": [f"optim.lr={i}"]}  # fmt: skip
        lines.append(json.dumps(record))
    (sweep / "manifest.jsonl").write_text("\n".join(lines) + "\n")
    return sweep


def refresh(sweep: Path, bin_dir: Path, calls: Path, runs: int) -> tuple[float, dict[str, int]]:
    for name in ("squeue", "sacct"):
        script = bin_dir / name
        script.write_text(STAND_IN.format(calls=calls, last=runs - 1))
        script.chmod(0o755)
    calls.write_text("")
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}")
    start = time.perf_counter()
    done = subprocess.run(
        [JZK, "status", "--json", str(sweep)], env=env, capture_output=True, text=True, check=False
    )
    took = time.perf_counter() - start
    if done.returncode != 0 or len(done.stdout.splitlines()) != runs:
        raise SystemExit(f"jzk status failed on {runs} runs: {done.stderr[-2000:]}")
    names = [Path(line).name for line in calls.read_text().split()]
    return took, {n: names.count(n) for n in ("squeue", "sacct")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    report: dict = {"sizes": {}}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        bin_dir, calls = root / "bin", root / "calls.txt"
        bin_dir.mkdir()
        for runs in [1, *args.sizes]:
            sweep = make_sweep(root, runs)
            times, counted = [], {}
            for _ in range(args.rounds):
                took, counted = refresh(sweep, bin_dir, calls, runs)
                times.append(took)
            report["sizes"][str(runs)] = {"seconds": statistics.median(times), "calls": counted}
            print(f"{runs:5d} runs: {statistics.median(times):6.2f} s, calls {counted}")
    base = report["sizes"]["1"]["seconds"]
    small, large = min(args.sizes), max(args.sizes)
    per_run = {n: (report["sizes"][str(n)]["seconds"] - base) / n for n in (small, large)}
    # Below the noise of a start (+-0.1 s here) a per-run cost is no figure: None.
    report["per_run_s"] = {str(n): v for n, v in per_run.items()}
    report["per_run_growth"] = (
        per_run[large] / per_run[small] if min(per_run.values()) * small > 0.1 else None
    )
    report["calls_per_refresh_constant"] = all(
        v["calls"] == {"squeue": 1, "sacct": 1} for v in report["sizes"].values()
    )
    report["repo"] = str(REPO)
    growth = report["per_run_growth"]
    print(
        f"per run: {per_run[small] * 1000:.2f} ms at {small} runs, {per_run[large] * 1000:.2f} ms "
        f"at {large} (ratio {'below noise' if growth is None else f'{growth:.2f}'}); "
        f"one squeue and one sacct per refresh: {report['calls_per_refresh_constant']}"
    )
    write_result("status", report)


if __name__ == "__main__":
    main()
