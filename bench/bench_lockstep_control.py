"""The lockstep method checked against itself: the hand-written DDP loop of
bench_runtime.py in lockstep with a second copy of itself (an A/A test).

    .venv/bin/python bench/bench_lockstep_control.py [--rounds 12] [--steps 60]

Both sides run the same code, so their ratio of CPU time per step should be 1: how far
its median and interval stray from 1 is what the method can tell apart (its position in
the pair, the memory each copy landed in, the machine's noise left after pairing). Each
rank pinned to a core of its own, 2 gloo ranks on the CPU, rank 0's process. Results in
bench/results/lockstep_control.json.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import torch
import torch.distributed as dist

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from bench_runtime import hand_ddp, overrides, run_workers, start_run  # noqa: E402
from common import Lockstep, paired, pin_rank, write_result  # noqa: E402

from jeanzay_kit.config.compose import compose_config  # noqa: E402
from jeanzay_kit.config.spec import build_job_spec  # noqa: E402
from jeanzay_kit.node.local import local_rank_infos  # noqa: E402


def worker(index: int, args, port: int, out_dir: Path) -> None:
    torch.set_num_threads(max(1, args.threads))
    pinned = pin_rank(index, args.workers)
    spec = build_job_spec(compose_config(overrides("ddp", args.workers, args.steps)))
    run = start_run(spec, local_rank_infos(args.workers, port)[index], out_dir / "control")
    first, second = [], []
    for _ in range(args.rounds):
        dist.barrier()
        a, b = hand_ddp(spec, run.ctx), hand_ddp(spec, run.ctx)
        lock = Lockstep(a)
        for _ in range(args.warmup + args.steps + 1):
            lock.switch()
            b()
        ours, theirs = lock.means(args.warmup)
        second.append(ours[1])
        first.append(theirs[1])
    run.close(False)
    if index != 0:
        return
    cpu = paired(second, first)
    report = {
        "cpu": cpu,
        "cpu_s": statistics.median(second),
        "setup": {
            "workers": args.workers,
            "pinned": pinned,
            "steps": args.steps,
            "warmup": args.warmup,
            "rounds": args.rounds,
            "what": "hand-written DDP step / the same loop's twin stepped just before it",
            "torch": torch.__version__,
        },
    }
    path = write_result("lockstep_control", report)
    lo, hi = cpu["ratio_ci"]
    print(f"A/A CPU per step ratio {cpu['ratio_median']:.4f}, 95 % CI {lo:.4f}-{hi:.4f}")
    print(f"wrote {path}")


if __name__ == "__main__":
    run_workers(worker, __doc__, steps=60)
