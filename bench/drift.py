"""Why the overhead benchmarks run their two loops in lockstep: the machine's drift.

    .venv/bin/python bench/drift.py [--steps 600] [--pairs 45] [--rounds 8]

One process, one thread, the TinyGPT of bench_runtime.py (4 micro-batches and an AdamW
step per step). Two measurements, printed:

1. Per-step CPU time over `--steps` steps: its spread, its autocorrelation at a few
   lags, and how far two segments of 1, 5 or 30 steps run one after the other differ
   (the standard deviation of their ratio). A slow drift shows as an autocorrelation
   that stays high at long lags, and as segments that differ by as much at 30 steps as
   at 5.
2. Two copies of the model in lockstep (bench/common.py Lockstep, a step of one before
   each step of the other), `--rounds` rounds of `--pairs` pairs: the ratio of each
   round's CPU time per step, copy B / copy A. Both run the same code, so it should be 1;
   its spread is what lockstep leaves of the drift.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from bench_runtime import MODEL  # noqa: E402
from common import Lockstep  # noqa: E402

from jeanzay_kit.examples.models import TinyGPT  # noqa: E402


def stepper(seed: int):
    torch.manual_seed(seed)
    model = TinyGPT(**MODEL)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randint(0, MODEL["vocab_size"], (8, MODEL["block_size"]))
    y = torch.randint(0, MODEL["vocab_size"], (8, MODEL["block_size"]))

    def step() -> None:
        for _ in range(4):
            TinyGPT.loss(model(x), y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def cpu_of(step) -> float:
    c0 = time.process_time()
    step()
    return time.process_time() - c0


def drift(steps: int) -> None:
    step = stepper(0)
    for _ in range(5):
        step()
    cpu = [cpu_of(step) for _ in range(steps)]
    mean = statistics.mean(cpu)
    dev = [c - mean for c in cpu]
    var = sum(d * d for d in dev)
    print(f"{steps} steps: {mean * 1e3:.1f} ms CPU/step, sd {statistics.stdev(cpu) / mean:.1%}")
    for lag in (1, 2, 5, 10, 30):
        acf = sum(dev[i] * dev[i + lag] for i in range(steps - lag)) / var
        print(f"  autocorrelation at lag {lag:2d}: {acf:.2f}")
    for size in (1, 5, 30):
        seg = [statistics.mean(cpu[i : i + size]) for i in range(0, steps - size + 1, size)]
        ratios = [seg[i] / seg[i + 1] for i in range(0, len(seg) - 1, 2)]
        if len(ratios) < 2:
            continue  # too few steps for segments this long
        spread = statistics.stdev(ratios)
        print(f"  two {size:2d}-step segments one after the other: ratio sd {spread:.2%}")


def lockstep(pairs: int, rounds: int) -> None:
    a, b = stepper(0), stepper(1)
    lock = Lockstep(a)
    for _ in range(5):
        lock.switch()
        b()
    ratios = []
    for _ in range(rounds):
        lock = Lockstep(a)
        for _ in range(pairs + 1):
            lock.switch()
            b()
        ours, theirs = lock.means(0)
        ratios.append(ours[1] / theirs[1])
    print(
        f"lockstep, {rounds} rounds of {pairs} pairs: B/A CPU ratio mean "
        f"{statistics.mean(ratios):.4f}, sd {statistics.stdev(ratios):.2%} "
        f"({', '.join(f'{r:.3f}' for r in ratios)})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--pairs", type=int, default=45)
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args()
    torch.set_num_threads(1)
    drift(args.steps)
    lockstep(args.pairs, args.rounds)


if __name__ == "__main__":
    main()
