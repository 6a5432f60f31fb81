"""Evaluation through the toolkit against the same evaluation written by hand, and the
cost of measuring the data wait, in the same run.

    .venv/bin/python bench/bench_eval.py [--rounds 6] [--steps 30]

* eval_vs_hand: the toolkit's `Evaluator.run` (train/evaluate.py: torch's DataLoader over
  this rank's share of the validation set, each sample once, the loss summed over samples
  and all-reduced) / a hand-written evaluation of the same model on the same 2 ranks:
  `DataLoader` + `DistributedSampler(shuffle=False)`, forward, loss x batch size, one
  all-reduce. The same map-style dataset (one `__getitem__` per sample), no loader worker
  on either side (2 cores, both ranks busy). Target <= 1.05.
* data_wait_cost: what the loop adds per step to measure its wait for batches (two
  `time.perf_counter()` calls and a sum, timed a million times) / the step time of
  `train()` on the same ranks. Target <= 0.01.

CPU ranks with gloo; results in bench/results/eval.json.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
import timeit
from dataclasses import replace
from pathlib import Path

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from bench_loader import MODEL, Samples, alternate, fresh_dirs, spec_for  # noqa: E402
from bench_runtime import run_workers, start_run, toolkit_step_time  # noqa: E402
from common import write_result  # noqa: E402

from jeanzay_kit.config.sections import EvalSettings  # noqa: E402
from jeanzay_kit.examples.models import MLP  # noqa: E402
from jeanzay_kit.node.local import local_rank_infos  # noqa: E402
from jeanzay_kit.train import components as build  # noqa: E402
from jeanzay_kit.train.evaluate import Evaluator  # noqa: E402
from jeanzay_kit.train.schedule import seed_everything  # noqa: E402

EVAL_SAMPLES, EVAL_MICRO = 4001, 16  # not a multiple of the ranks nor of the batch


def toolkit_eval_time(spec, ctx) -> float:
    seed_everything(0)
    model = MLP(**MODEL)
    compute_loss = build.build_loss(spec, model)
    strategy = build.build_strategy(spec, ctx, model, compute_loss, "fp32")
    data = Samples(size=EVAL_SAMPLES, seed=1)
    evaluator = Evaluator(spec, ctx, data, torch.arange(EVAL_SAMPLES).numpy(), compute_loss, {})
    t0 = time.perf_counter()
    evaluator.run(strategy)
    return time.perf_counter() - t0


def hand_eval_time(ctx) -> float:
    """The evaluation a user writes: DistributedSampler without shuffling, sum, reduce."""
    seed_everything(0)
    model = MLP(**MODEL)
    data = Samples(size=EVAL_SAMPLES, seed=1)
    sampler = DistributedSampler(data, shuffle=False, drop_last=False)
    loader = DataLoader(data, batch_size=EVAL_MICRO, sampler=sampler)
    t0 = time.perf_counter()
    model.eval()
    totals = torch.zeros(2, dtype=torch.float64)
    with torch.no_grad():
        for x, y in loader:
            totals += torch.tensor([float(MLP.loss(model(x), y)) * len(x), len(x)])
    dist.all_reduce(totals, group=ctx.dp_group)
    return time.perf_counter() - t0


def wait_measurement_s() -> float:
    """The loop's own lines around the fetch (train/loop.py), per step, timed alone."""
    waited, total = 0.0, 0.0

    def measured() -> None:
        nonlocal waited, total
        waited = time.perf_counter()
        total += time.perf_counter() - waited

    n = 1_000_000
    return timeit.timeit(measured, number=n) / n


def worker(index: int, args, port: int, out_dir: Path) -> None:
    torch.set_num_threads(max(1, args.threads))
    ranks = args.workers
    plain = spec_for(ranks, args.steps, "0", 0)
    spec = replace(plain, eval=EvalSettings(None, 1, None, EVAL_MICRO, {}))
    run = start_run(spec, local_rank_infos(ranks, port)[index], out_dir / "session")
    ctx = run.ctx
    sides = {"toolkit": lambda: toolkit_eval_time(spec, ctx), "hand": lambda: hand_eval_time(ctx)}
    evals = alternate(args.rounds, sides)
    next_dir = fresh_dirs(out_dir / "steps")
    # toolkit_step_time returns (wall, CPU) per step: the wait is measured against the wall.
    step_s = [
        toolkit_step_time(plain, run, next_dir(), args.steps, args.warmup)[0] for _ in range(2)
    ]
    run.close(False)
    if index != 0:
        return
    ratios = [a / b for a, b in zip(evals["toolkit"], evals["hand"], strict=True)]
    measure_s = wait_measurement_s()
    result = {
        "eval_vs_hand": {"ratio_median": statistics.median(ratios), "ratios": ratios},
        "data_wait_cost": {
            "ratio_median": measure_s / statistics.median(step_s),
            "measurement_s_per_step": measure_s,
            "step_s": step_s,
        },
        "eval_s": {k: statistics.median(v) for k, v in evals.items()},
        "setup": {
            "ranks": ranks,
            "eval_samples": EVAL_SAMPLES,
            "eval_micro_batch": EVAL_MICRO,
            "rounds": args.rounds,
            "cpus": os.cpu_count(),
            "model": MODEL,
        },
    }
    path = write_result("eval", result)
    print(
        f"eval_vs_hand {result['eval_vs_hand']['ratio_median']:.3f} "
        f"({min(ratios):.3f}-{max(ratios):.3f}); toolkit {result['eval_s']['toolkit']:.3f} s, "
        f"hand {result['eval_s']['hand']:.3f} s per evaluation of {EVAL_SAMPLES} samples"
    )
    print(
        f"data_wait_cost {result['data_wait_cost']['ratio_median']:.2e} "
        f"({measure_s * 1e9:.0f} ns per step of {statistics.median(step_s) * 1e3:.1f} ms)"
    )
    print(f"wrote {path}")


def main() -> None:
    run_workers(worker, __doc__, steps=30)


if __name__ == "__main__":
    main()
