"""A requeued compiled run on a new node: compile time resumed / cold (issue 59 point 1).

    .venv/bin/python bench/bench_warm_compile.py [--rounds 3] [--workers 2]

Each round: `jzk train train.compile=true train.steps=2` in a fresh run directory, its
process on an empty TMPDIR (torch's default cache folder: a node that never compiled this
model); then the same run resumed to step 4 on another empty TMPDIR, as a requeued job on
another node. The figure is the resumed start's compile time (its `parts.compile` in
starts.jsonl, the first step's time) over the cold start's, measured in the same round.
Target <= 0.40. Results in bench/results/warm_compile.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from common import write_result  # noqa: E402


def start(run_dir: Path, node: Path, steps: int, workers: int) -> None:
    node.mkdir()
    cmd = [
        sys.executable, "-m", "jeanzay_kit.cli", "train", "train.compile=true",
        f"train.steps={steps}", f"resources.gpus_per_node={workers}", f"job.run_dir={run_dir}",
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_CACHE_DIR"}
    env["TMPDIR"] = str(node)
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {done.returncode}:\n{done.stderr[-3000:]}")


def one_round(tmp: Path, workers: int) -> dict[str, float]:
    run_dir = tmp / "run"
    start(run_dir, tmp / "node-a", 2, workers)
    start(run_dir, tmp / "node-b", 4, workers)
    lines = [json.loads(x) for x in (run_dir / "starts.jsonl").read_text().splitlines()]
    # Not the attempts' end lines (end_step): the two starts.
    cold, warm = [line for line in lines if "start_step" in line]
    assert warm["compile_cache"] == "warm", warm
    return {
        "cold_s": cold["parts"]["compile"],
        "warm_s": warm["parts"]["compile"],
        "warm_hits": warm["compile_hits"],
        "warm_misses": warm["compile_misses"],
        "startup_cold_s": cold["startup_s"],
        "startup_warm_s": warm["startup_s"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    rounds = []
    for r in range(args.rounds):
        with tempfile.TemporaryDirectory() as tmp:
            rounds.append(one_round(Path(tmp), args.workers))
        print(f"round {r + 1}: {rounds[-1]}", flush=True)
    ratios = [x["warm_s"] / x["cold_s"] for x in rounds]
    report = {
        "ratio_median": statistics.median(ratios),
        "ratios": ratios,
        "rounds": rounds,
        "setup": {"workers": args.workers, "model": "the example MLP", "device": "cpu"},
    }
    path = write_result("warm_compile", report)
    print(f"resumed / cold compile {report['ratio_median']:.2f} (target <= 0.40); wrote {path}")


if __name__ == "__main__":
    main()
