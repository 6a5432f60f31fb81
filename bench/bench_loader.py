"""The toolkit's DataLoader path, measured against baselines in the same run.

    .venv/bin/python bench/bench_loader.py [--rounds 4] [--steps 20] [--decode-kb 96]

Three ratios, each the median over rounds:

* loader_vs_hand_ddp: `train()` (torch's DataLoader over the global-batch plan, DDP, 2 gloo
  ranks) step time / a hand-written DDP loop with `DataLoader` + `DistributedSampler` on
  the same map-style dataset (one `__getitem__` per sample) and model. Target <= 1.02.
  The two run in lockstep (a hand-written step before each train() step, bench_runtime.py),
  with a twin ratio of CPU time per step summed over the ranks.
* input_bound_auto_vs_0: one rank, a dataset whose `__getitem__` inflates `--decode-kb`
  KB of zlib per sample (PNG decoding, about 0.5 ms of CPU here): steps/s with
  loader.num_workers=auto / steps/s with loader.num_workers=0 (a speed-up, > 1).
* input_bound_vs_preloaded: the same run's step time with num_workers=auto / the same
  model fed from preloaded tensors (no input cost): the loader hides the input cost when
  the CPUs suffice. Target <= 1.10. These two alternate whole rounds, the order flipped
  each round.

CPU ranks with gloo; results in bench/results/loader.json.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import statistics
import sys
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset, DistributedSampler

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from bench_runtime import (  # noqa: E402
    lockstep_round,
    log_loss,
    run_workers,
    start_run,
    toolkit_step_time,
)  # noqa: E402
from common import paired, pin_rank, write_result  # noqa: E402

from jeanzay_kit.config.compose import compose_config  # noqa: E402
from jeanzay_kit.config.spec import build_job_spec  # noqa: E402
from jeanzay_kit.examples.models import MLP  # noqa: E402
from jeanzay_kit.node.local import local_rank_infos  # noqa: E402
from jeanzay_kit.train.schedule import seed_everything  # noqa: E402

MODEL = dict(in_dim=64, hidden=1024, depth=4, out_dim=8)
GLOBAL, MICRO = 64, 16


class Samples(Dataset):
    """A map-style dataset of (x, y) pairs. With `decode_kb`, each `__getitem__` first
    inflates a zlib stream of that many KB, as decoding a PNG does (zlib releases the
    GIL, as image decoders do); 0: preloaded tensors, served as they are."""

    def __init__(self, size: int = 4096, decode_kb: int = 0, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(size, MODEL["in_dim"], generator=g)
        self.y = torch.randn(size, MODEL["out_dim"], generator=g)
        pixels = np.random.default_rng(seed).integers(0, 16, decode_kb * 1024, dtype=np.uint8)
        self.encoded = zlib.compress(pixels.tobytes(), 6) if decode_kb else b""

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.encoded:
            zlib.decompress(self.encoded)
        return self.x[index], self.y[index]


def spec_for(ranks: int, steps: int, workers: str, decode_kb: int):
    cfg = compose_config(
        [
            f"resources.gpus_per_node={ranks}",
            "model=mlp",
            *(f"model.{k}={v}" for k, v in MODEL.items()),
            "data=custom",
            "data._target_=bench_loader.Samples",
            f"+data.decode_kb={decode_kb}",
            f"train.steps={steps}",
            f"train.log_every={steps}",
            "train.eval_every=0",
            f"train.global_batch_size={GLOBAL}",
            f"train.micro_batch_size={MICRO}",
            "optim.grad_clip=0",
            f"loader.num_workers={workers}",
        ]
    )
    return build_job_spec(cfg, local_cpus=os.cpu_count())


def fresh_dirs(base: Path):
    """A new run directory per call (same name on every rank): each round starts fresh."""
    count = iter(range(10**6))
    return lambda: base / f"round-{next(count)}"


def hand_ddp(ctx) -> Callable[[], None]:
    """The loop a user writes by hand, one step per call: DataLoader + DistributedSampler,
    no_sync, its loss logged every 10 steps as the toolkit's is."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    seed_everything(0)
    data = Samples()
    model = DDP(MLP(**MODEL), process_group=ctx.dp_group)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.01)
    sampler = DistributedSampler(data, seed=0, drop_last=True)
    loader = DataLoader(data, batch_size=MICRO, sampler=sampler, drop_last=True)
    accum = GLOBAL // (MICRO * dist.get_world_size())
    it = iter(loader)
    counter = itertools.count()

    def step() -> None:
        total = torch.zeros(())
        for k in range(accum):
            x, y = next(it)
            # The forward too goes under no_sync: DDP decides at forward time whether the
            # backward all-reduces.
            sync = contextlib.nullcontext() if k == accum - 1 else model.no_sync()
            with sync:
                loss = MLP.loss(model(x), y) / accum
                loss.backward()
            total += loss.detach()
        opt.step()
        opt.zero_grad(set_to_none=True)
        log_loss(next(counter), total, ctx.dp_group)

    return step


def alternate(rounds: int, sides: dict) -> dict[str, list[tuple[float, float]]]:
    """Each side's (step time, CPU time per step) per round, the order flipped each round."""
    out: dict[str, list[tuple[float, float]]] = {k: [] for k in sides}
    names = list(sides)
    for r in range(rounds):
        order = names if r % 2 == 0 else names[::-1]
        for name in order:
            dist.barrier()
            out[name].append(sides[name]())
    return out


def worker(index: int, args, port: int, out_dir: Path) -> None:
    torch.set_num_threads(max(1, args.threads))
    cores = os.sched_getaffinity(0)
    pinned = pin_rank(index, args.workers)
    args.decode_kb = int(os.environ.get("BENCH_LOADER_DECODE_KB", "96"))
    ranks = args.workers
    # (a) the loop: two ranks, no loader workers on either side (2 cores: none to spare).
    spec = spec_for(ranks, args.steps, "0", 0)
    run = start_run(spec, local_rank_infos(ranks, port)[index], out_dir / "session")
    ctx = run.ctx
    next_dir = fresh_dirs(out_dir / "ddp")
    # The toolkit's loop and the hand-written one in lockstep (bench_runtime.py): a
    # hand-written step before each train() step, a train() call per round.
    loop: dict[str, list[tuple[float, float]]] = {"toolkit": [], "hand": []}
    for _ in range(args.rounds):
        dist.barrier()
        ours, theirs = lockstep_round(spec, run, next_dir(), hand_ddp(ctx), args.steps, args.warmup)
        loop["toolkit"].append(ours)
        loop["hand"].append(theirs)
    run.close(False)
    if index != 0:
        return
    # (b) input-bound: one rank (this process), the other CPU free for a loader worker.
    os.sched_setaffinity(0, cores)  # unpinned: its loader workers inherit the affinity
    one = start_run(spec_for(1, 1, "0", 0), local_rank_infos(1, port + 1)[0], out_dir / "one")
    specs = {
        "auto": spec_for(1, args.steps, "auto", args.decode_kb),
        "zero": spec_for(1, args.steps, "0", args.decode_kb),
        "preloaded": spec_for(1, args.steps, "0", 0),
    }
    dirs = {k: fresh_dirs(out_dir / k) for k in specs}
    bound = alternate(
        args.rounds,
        {
            k: (lambda k=k: toolkit_step_time(specs[k], one, dirs[k](), args.steps, args.warmup))
            for k in specs
        },
    )
    one.close(False)
    report(loop, bound, specs["auto"].loader.num_workers, args, pinned)


def report(loop: dict, bound: dict, auto_workers: int, args, pinned: bool) -> None:
    def wall(side: str) -> list[float]:
        return [w for w, _ in {**loop, **bound}[side]]

    def cpu(side: str) -> list[float]:
        return [c for _, c in {**loop, **bound}[side]]

    result: dict = {
        "loader_vs_hand_ddp": paired(wall("toolkit"), wall("hand")),
        # CPU time per step, both ranks (issue 59 point 4): a busy neighbour moves it less.
        "loader_vs_hand_ddp_cpu": paired(cpu("toolkit"), cpu("hand")),
        "input_bound_auto_vs_0": paired(wall("zero"), wall("auto")),  # steps/s ratio
        "input_bound_vs_preloaded": paired(wall("auto"), wall("preloaded")),
    }
    result["step_s"] = {k: statistics.median(wall(k)) for k in {**loop, **bound}}
    result["cpu_s"] = {k: statistics.median(cpu(k)) for k in loop}
    result["setup"] = {
        "ranks_loop": args.workers,
        "pinned_loop": pinned,
        "auto_workers": auto_workers,
        "decode_kb_per_sample": args.decode_kb,
        "micro_batch": MICRO,
        "global_batch": GLOBAL,
        "steps": args.steps,
        "warmup": args.warmup,
        "rounds": args.rounds,
        "cpus": os.cpu_count(),
        "model": MODEL,
        "torch": torch.__version__,
    }
    path = write_result("loader", result)
    s = result["step_s"]
    print(
        f"loop: toolkit {s['toolkit'] * 1e3:.1f} ms/step, hand DDP {s['hand'] * 1e3:.1f} ms/step\n"
        f"input-bound (inflating {args.decode_kb} KB/sample): workers=auto ({auto_workers}) "
        f"{s['auto'] * 1e3:.1f} ms/step, workers=0 {s['zero'] * 1e3:.1f} ms/step, preloaded "
        f"{s['preloaded'] * 1e3:.1f} ms/step"
    )
    for k, v in result.items():
        if "ratios" in v:
            lo, hi = v["ratio_ci"]
            rounds = ", ".join(f"{x:.3f}" for x in v["ratios"])
            print(f"{k:26s} {v['ratio_median']:.3f}  CI {lo:.3f}-{hi:.3f}  (rounds {rounds})")
    print(f"wrote {path}")


if __name__ == "__main__":
    import argparse

    extra = argparse.ArgumentParser(add_help=False)
    extra.add_argument("--decode-kb", type=int, default=96)
    known, rest = extra.parse_known_args()
    sys.argv = [sys.argv[0], *rest]
    os.environ["BENCH_LOADER_DECODE_KB"] = str(known.decode_kb)  # the spawned ranks read it
    run_workers(worker, __doc__, steps=20)
