"""Toolkit overhead, measured against hand-written PyTorch in the same run.

    .venv/bin/python bench/bench_runtime.py [--steps 30] [--rounds 3] [--workers 2]

Two ratios, each the median over rounds that alternate which side runs first, so that
machine noise and warm caches hit both sides alike:

* ddp:      jeanzay_kit's loop (`train()` with parallel.mode=ddp) step time
            / a hand-written DDP loop (no_sync accumulation, AdamW, same model, data, batch)
* pipeline: jeanzay_kit's pipeline strategy (1F1B) step time
            / raw torch.distributed.pipelining (PipelineStage + Schedule1F1B) on the same split

Target <= 1.02 each. CPU workers with gloo unless --device cuda. Results are printed and
written to bench/results/runtime.json.

Wall time on a shared 2-core machine spreads by +-15 % between rounds, so each round also
records rank 0's CPU time per step (its process, all threads: `time.process_time`), which
a busy neighbour moves much less; its ratio comes with a 95 % bootstrap confidence
interval of the median over rounds (`cpu_ratio_ci`): an overhead is told from noise when
the interval excludes it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.utils.data import default_collate

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from common import paired, pin_rank, write_result  # noqa: E402

from jeanzay_kit.config.compose import compose_config  # noqa: E402
from jeanzay_kit.config.spec import build_job_spec  # noqa: E402
from jeanzay_kit.examples.datasets import StdlibText  # noqa: E402
from jeanzay_kit.examples.models import TinyGPT  # noqa: E402
from jeanzay_kit.node.local import free_port, local_rank_infos  # noqa: E402
from jeanzay_kit.runtime.preemption import StopRequest  # noqa: E402
from jeanzay_kit.runtime.run import Run  # noqa: E402
from jeanzay_kit.runtime.sampler import GlobalBatchPlan  # noqa: E402
from jeanzay_kit.train.loop import train  # noqa: E402
from jeanzay_kit.train.schedule import seed_everything  # noqa: E402

MODEL = dict(vocab_size=256, block_size=64, n_layer=4, n_embd=128, n_head=4)


def overrides(mode: str, workers: int, steps: int) -> list[str]:
    extra = ["parallel.pipeline_stages=2", "parallel.microbatches=4"] if mode == "pipeline" else []
    return [
        f"parallel={mode}",
        f"resources.gpus_per_node={workers}",
        "model=gpt",
        "data=stdlib_text",
        "data.max_bytes=400000",
        f"train.steps={steps}",
        f"train.log_every={steps}",
        "train.eval_every=0",
        "train.global_batch_size=32",
        "train.micro_batch_size=8",
        "optim.grad_clip=0",
        *extra,
    ]


def start_run(spec, info, run_dir: Path) -> Run:
    """The runtime node/worker.py starts for the toolkit's loop (the group with the job's
    mesh as run.ctx, heartbeats, the watchdog), on the CPU (gloo) whatever the
    machine has: no GPU is visible to it."""
    run = Run.from_spec(spec, info, run_dir, stop=StopRequest(), visible_devices="", env={})
    run.start()
    return run


def toolkit_step_time(
    spec, run: Run, run_dir: Path, steps: int, warmup: int
) -> tuple[float, float]:
    """Mean step time and rank 0's CPU time per step of jeanzay_kit's own loop (on the
    runtime node/worker.py starts: its run, here one per mode, a run directory per round),
    after warmup steps (metrics.jsonl's step_time_s and step_cpu_s)."""
    longer = replace(spec.train, steps=warmup + steps, log_every=warmup)
    run.run_dir = run_dir  # a fresh directory per round, one group for all
    train(replace(spec, train=longer), run)
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    # The first window holds the warmup steps; the next one(s) the measured steps.
    measured = [r for r in records if r["step"] > warmup]
    spans = list(zip(measured, [warmup] + [m["step"] for m in measured[:-1]], strict=True))
    total = sum(r["step_time_s"] * (r["step"] - prev) for r, prev in spans)
    cpu = sum(r["step_cpu_s"] * (r["step"] - prev) for r, prev in spans)
    return total / steps, cpu / steps


def hand_ddp_step_time(spec, ctx, steps: int, warmup: int) -> tuple[float, float]:
    """The loop a user would write by hand with DDP."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    seed_everything(0)
    data = StdlibText(block_size=64, max_bytes=400000)
    model = DDP(TinyGPT(**MODEL), process_group=ctx.dp_group)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.01)
    plan = GlobalBatchPlan(len(data), 32, 8, spec.layout.dp_size, ctx.dp_rank, 0)
    t0 = c0 = 0.0
    for step in range(warmup + steps):
        if step == warmup:
            t0, c0 = time.perf_counter(), time.process_time()
        micro = [default_collate(data.__getitems__(i.tolist())) for i in plan.step_indices(step)]
        for k, (x, y) in enumerate(micro):
            if k < len(micro) - 1:
                with model.no_sync():
                    (TinyGPT.loss(model(x), y) / len(micro)).backward()
            else:
                (TinyGPT.loss(model(x), y) / len(micro)).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return (time.perf_counter() - t0) / steps, (time.process_time() - c0) / steps


def raw_pipeline_step_time(spec, ctx, steps: int, warmup: int) -> tuple[float, float]:
    """torch.distributed.pipelining used directly: two stages, 1F1B, 4 x accum micro-batches."""
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B

    seed_everything(0)
    data = StdlibText(block_size=64, max_bytes=400000)
    full = TinyGPT(**MODEL)
    rank, n = ctx.pp_rank, spec.layout.pp_size
    chunk = full.pipeline_chunk(rank, n)
    stage = PipelineStage(chunk, rank, n, ctx.device, group=ctx.pp_group)
    accum = spec.train.grad_accum_steps
    schedule = Schedule1F1B(stage, spec.layout.microbatches * accum, loss_fn=TinyGPT.loss)
    opt = torch.optim.AdamW(chunk.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.01)
    plan = GlobalBatchPlan(len(data), 32, 8, 1, 0, 0)
    t0 = c0 = 0.0
    for step in range(warmup + steps):
        if step == warmup:
            t0, c0 = time.perf_counter(), time.process_time()
        micro = [default_collate(data.__getitems__(i.tolist())) for i in plan.step_indices(step)]
        x = torch.cat([m[0] for m in micro])
        y = torch.cat([m[1] for m in micro])
        if rank == 0:
            schedule.step(x)
        else:
            schedule.step(target=y, losses=[])
        opt.step()
        opt.zero_grad(set_to_none=True)
    return (time.perf_counter() - t0) / steps, (time.process_time() - c0) / steps


def worker(index: int, args, port: int, out_dir: Path) -> None:
    torch.set_num_threads(max(1, args.threads))
    pinned = pin_rank(index, args.workers)
    results: dict[str, dict[str, list[tuple[float, float]]]] = {}
    for mode in ("ddp", "pipeline"):
        spec = build_job_spec(compose_config(overrides(mode, args.workers, args.steps)))
        run = start_run(spec, local_rank_infos(args.workers, port)[index], out_dir / mode)
        ctx = run.ctx
        ours, theirs = [], []
        for r in range(args.rounds):
            run_dir = out_dir / f"{mode}-{r}"
            if ctx.is_main:
                run_dir.mkdir(parents=True, exist_ok=True)
            # Alternate which side goes first, so warm caches or a busy neighbour do not
            # always favour the same side.
            order = ("ours", "theirs") if r % 2 == 0 else ("theirs", "ours")
            for side in order:
                dist.barrier()
                if side == "ours":
                    ours.append(toolkit_step_time(spec, run, run_dir, args.steps, args.warmup))
                elif mode == "ddp":
                    theirs.append(hand_ddp_step_time(spec, ctx, args.steps, args.warmup))
                else:
                    theirs.append(raw_pipeline_step_time(spec, ctx, args.steps, args.warmup))
            dist.barrier()
        results[mode] = {"toolkit": ours, "baseline": theirs}
        run.close(False)
        port += 1
    if index == 0:
        report = {}
        for mode, r in results.items():
            pairs = list(zip(r["toolkit"], r["baseline"], strict=True))
            wall = paired([a[0] for a, _ in pairs], [b[0] for _, b in pairs])
            cpu = paired([a[1] for a, _ in pairs], [b[1] for _, b in pairs])
            report[mode] = {
                "toolkit_step_s": statistics.median(a[0] for a, _ in pairs),
                "baseline_step_s": statistics.median(b[0] for _, b in pairs),
                **wall,
                "toolkit_cpu_s": statistics.median(a[1] for a, _ in pairs),
                "baseline_cpu_s": statistics.median(b[1] for _, b in pairs),
                "cpu_ratio_median": cpu["ratio_median"],
                "cpu_ratios": cpu["ratios"],
                "cpu_ratio_ci": cpu["ratio_ci"],
                "cpu_ratio_ci_half_width": cpu["ratio_ci_half_width"],
            }
        report["setup"] = {
            "workers": args.workers,
            "threads_per_worker": args.threads,
            "pinned": pinned,
            "steps": args.steps,
            "warmup": args.warmup,
            "rounds": args.rounds,
            "device": "cpu/gloo",
            "model": MODEL,
            "torch": torch.__version__,
        }
        path = write_result("runtime", report)
        for mode in ("ddp", "pipeline"):
            m = report[mode]
            print(
                f"{mode:9s} toolkit {m['toolkit_step_s'] * 1e3:7.1f} ms/step   baseline "
                f"{m['baseline_step_s'] * 1e3:7.1f} ms/step   ratio {m['ratio_median']:.3f} "
                f"(target <= 1.02; rounds {', '.join(f'{x:.3f}' for x in m['ratios'])})\n"
                f"{'':9s} CPU per step ratio {m['cpu_ratio_median']:.3f}, 95 % CI "
                f"{m['cpu_ratio_ci'][0]:.3f}-{m['cpu_ratio_ci'][1]:.3f} (wall: "
                f"{m['ratio_ci'][0]:.3f}-{m['ratio_ci'][1]:.3f})"
            )
        print(f"wrote {path}")


def run_workers(worker, doc: str, steps: int) -> None:
    """Parse the bench options and run `worker(index, args, port, tmp_dir)` on each rank."""
    import tempfile

    parser = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=steps)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        mp.start_processes(
            worker, args=(args, free_port(), Path(tmp)), nprocs=args.workers, start_method="spawn"
        )


def main() -> None:
    run_workers(worker, __doc__, steps=30)


if __name__ == "__main__":
    main()
