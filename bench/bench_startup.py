"""Time to first step: `python train.py` against a bare torchrun of a minimal DDP script.

    .venv/bin/python bench/bench_startup.py [--rounds 5]

Both start 2 CPU workers with gloo and train the default example's model (an MLP); the
clock runs from starting the command to the first step being done: train.py's first
record in metrics.jsonl, bench/minimal_ddp.py's marker file. What the toolkit adds:
Hydra's composition, validation, the run directory, the data path check, the
checkpoint look-up, metrics and heartbeat set-up. Rounds alternate which side goes
first; the ratio is the median of the per-round ratios (a single start here varies by
+-20 %). Results are printed and written to bench/results/startup.json.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO, logged_steps, time_to_marker, train_py, write_result  # noqa: E402


def ours(folder: Path) -> float:
    run_dir = folder / "train-py"
    argv = train_py(
        "resources.gpus_per_node=2",
        "train.log_every=1",
        "train.steps=1000000",
        "resume=never",
        f"hydra.run.dir={run_dir}",
    )
    return time_to_marker(argv, lambda: bool(logged_steps(run_dir / "metrics.jsonl")))


def bare(folder: Path) -> float:
    marker = folder / "bare-first-step"
    argv = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        str(REPO / "bench" / "minimal_ddp.py"),
        str(marker),
    ]
    return time_to_marker(argv, marker.exists)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    train_s, bare_s = [], []
    for r in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="jzk-bench-start-") as tmp:
            for side in ("ours", "bare") if r % 2 == 0 else ("bare", "ours"):
                (train_s if side == "ours" else bare_s).append(
                    ours(Path(tmp)) if side == "ours" else bare(Path(tmp))
                )
        print(f"round {r}: train.py {train_s[-1]:.2f} s, bare torchrun {bare_s[-1]:.2f} s")
    ratios = [a / b for a, b in zip(train_s, bare_s, strict=True)]
    report = {
        "train_py_s": train_s,
        "bare_torchrun_s": bare_s,
        "ratios": ratios,
        "ratio_median": statistics.median(ratios),
        "setup": {"workers": 2, "rounds": args.rounds, "model": "default mlp, gloo, CPU"},
    }
    path = write_result("startup", report)
    print(
        f"time to first step: train.py {statistics.median(train_s):.2f} s, bare torchrun "
        f"{statistics.median(bare_s):.2f} s, ratio {report['ratio_median']:.2f}"
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
