"""Toolkit overhead, measured against hand-written PyTorch in the same run.

    .venv/bin/python bench/bench_runtime.py [--steps 90] [--rounds 6] [--workers 2]

Two ratios, each the median over rounds:

* ddp:      jeanzay_kit's loop (`train()` with parallel.mode=ddp) step time
            / a hand-written DDP loop (no_sync accumulation, AdamW, same model, data, batch)
* pipeline: jeanzay_kit's pipeline strategy (1F1B) step time
            / raw torch.distributed.pipelining (PipelineStage + Schedule1F1B) on the same split

Target <= 1.02 each. CPU workers with gloo unless --device cuda. Both loops log their
loss every 10 steps. Results are printed and written to bench/results/runtime.json.

The two loops run in lockstep in the same processes (common.Lockstep): before each step of
`train()`, one step of the hand-written loop, so that the machine's slow drift hits both
alike. A round is one `train()` call; each round gives a wall-time ratio (rank 0) and a
ratio of CPU time per step (every rank's process, all threads, summed over the ranks),
and each ratio comes with a 95 % bootstrap interval of the median over rounds.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import statistics
import sys
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.utils.data import default_collate

from jeanzay_kit.rundir.run_directory import RunDir  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from common import Lockstep, paired, pin_rank, write_result  # noqa: E402

from jeanzay_kit.config.compose import compose_config  # noqa: E402
from jeanzay_kit.config.spec import build_job_spec  # noqa: E402
from jeanzay_kit.ending.preemption import StopRequest  # noqa: E402
from jeanzay_kit.examples.datasets import StdlibText  # noqa: E402
from jeanzay_kit.examples.models import TinyGPT  # noqa: E402
from jeanzay_kit.node.local import free_port, local_rank_infos  # noqa: E402
from jeanzay_kit.runtime.run import Run  # noqa: E402
from jeanzay_kit.runtime.sampler import GlobalBatchPlan  # noqa: E402
from jeanzay_kit.train.loop import train  # noqa: E402
from jeanzay_kit.train.schedule import seed_everything  # noqa: E402

MODEL = dict(vocab_size=256, block_size=64, n_layer=4, n_embd=128, n_head=4)
LOG_EVERY = 10  # both loops: one loss all-reduce and a printed line every 10 steps


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
    run = Run.from_spec(spec, info, RunDir(run_dir), stop=StopRequest(), visible_devices="", env={})
    run.start()
    return run


def toolkit_step_time(
    spec, run: Run, run_dir: Path, steps: int, warmup: int
) -> tuple[float, float]:
    """Mean step time and rank 0's CPU time per step of jeanzay_kit's own loop alone (on
    the runtime node/worker.py starts: its run, a run directory per round), after warmup
    steps (metrics.jsonl's step_time_s and step_cpu_s)."""
    longer = replace(spec.train, steps=warmup + steps, log_every=warmup)
    run.run_dir = RunDir(run_dir)  # a fresh directory per round, one group for all
    train(replace(spec, train=longer), run)
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    # The first window holds the warmup steps; the next one(s) the measured steps.
    measured = [r for r in records if r["step"] > warmup]
    spans = list(zip(measured, [warmup] + [m["step"] for m in measured[:-1]], strict=True))
    total = sum(r["step_time_s"] * (r["step"] - prev) for r, prev in spans)
    cpu = sum(r["step_cpu_s"] * (r["step"] - prev) for r, prev in spans)
    return total / steps, cpu / steps


@contextlib.contextmanager
def interleaved(lock: Lockstep) -> Iterator[None]:
    """train()'s batches as they are, each step's fetch preceded by lock.switch() (one
    step of the baseline loop): the toolkit's step is then everything between two
    switches, its own fetch, logging and step-boundary agreement included."""
    from jeanzay_kit.train import loop

    opened = loop.open_data

    def open_data(*args, **kwargs):
        plan, batches = opened(*args, **kwargs)
        fetch = batches.next_step

        def next_step():
            lock.switch()
            return fetch()

        batches.next_step = next_step
        return plan, batches

    loop.open_data = open_data
    try:
        yield
    finally:
        loop.open_data = opened


def lockstep_round(
    spec, run: Run, run_dir: Path, baseline: Callable[[], None], steps: int, warmup: int
) -> tuple[tuple[float, float], tuple[float, float]]:
    """One round: `train()` (a fresh run directory, the same group) with a baseline step
    before each of its steps. Returns (ours, theirs), each (wall s, CPU s summed over the
    ranks) per step after warmup. train() runs one step more than it times: its last one
    ends in the final save, and has no next switch to close it."""
    lock = Lockstep(baseline)
    longer = replace(spec.train, steps=warmup + steps + 1, log_every=LOG_EVERY)
    run.run_dir = RunDir(run_dir)
    with interleaved(lock):
        train(replace(spec, train=longer), run)
    ours, theirs = lock.means(warmup)
    cpu = torch.tensor([ours[1], theirs[1]], dtype=torch.float64)
    dist.all_reduce(cpu)
    return (ours[0], float(cpu[0])), (theirs[0], float(cpu[1]))


def log_loss(step: int, loss: torch.Tensor, group=None) -> None:
    """What a hand-written loop does every LOG_EVERY steps: the mean loss over the ranks
    (one all-reduce), printed by rank 0."""
    if (step + 1) % LOG_EVERY:
        return
    mean = loss.detach().clone()
    dist.all_reduce(mean, group=group)
    if dist.get_rank() == 0:
        print(f"step {step + 1} loss {mean.item() / dist.get_world_size(group):.4f}", flush=True)


def hand_ddp(spec, ctx) -> Callable[[], None]:
    """The loop a user would write by hand with DDP, one step per call."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    seed_everything(0)
    data = StdlibText(block_size=64, max_bytes=400000)
    model = DDP(TinyGPT(**MODEL), process_group=ctx.dp_group)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.01)
    plan = GlobalBatchPlan(len(data), 32, 8, spec.layout.dp_size, ctx.dp_rank, 0)
    counter = itertools.count()

    def step() -> None:
        i = next(counter)
        micro = [default_collate(data.__getitems__(j.tolist())) for j in plan.step_indices(i)]
        total = torch.zeros(())
        for k, (x, y) in enumerate(micro):
            sync = model.no_sync() if k < len(micro) - 1 else contextlib.nullcontext()
            with sync:
                loss = TinyGPT.loss(model(x), y) / len(micro)
                loss.backward()
            total += loss.detach()
        opt.step()
        opt.zero_grad(set_to_none=True)
        log_loss(i, total, ctx.dp_group)

    return step


def raw_pipeline(spec, ctx) -> Callable[[], None]:
    """torch.distributed.pipelining used directly: two stages, 1F1B, 4 x accum
    micro-batches, one step per call."""
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
    counter = itertools.count()

    def step() -> None:
        i = next(counter)
        micro = [default_collate(data.__getitems__(j.tolist())) for j in plan.step_indices(i)]
        x = torch.cat([m[0] for m in micro])
        y = torch.cat([m[1] for m in micro])
        losses: list[torch.Tensor] = []
        if rank == 0:
            schedule.step(x)
        else:
            schedule.step(target=y, losses=losses)
        opt.step()
        opt.zero_grad(set_to_none=True)
        # The last stage holds the loss; the first adds nothing to the sum.
        log_loss(i, torch.stack(losses).mean() if losses else torch.zeros(()), ctx.pp_group)

    return step


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
            dist.barrier()
            baseline = hand_ddp(spec, ctx) if mode == "ddp" else raw_pipeline(spec, ctx)
            side, base = lockstep_round(spec, run, run_dir, baseline, args.steps, args.warmup)
            ours.append(side)
            theirs.append(base)
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
            "interleaving": "lockstep: a hand-written step before each train() step",
            "cpu": "process CPU time per step, summed over the ranks",
            "log_every": LOG_EVERY,
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
            _then_exit,
            args=(worker, args, free_port(), Path(tmp)),
            nprocs=args.workers,
            start_method="spawn",
        )


def _then_exit(index: int, worker, args, port: int, tmp: Path) -> None:
    """The worker, then an exit without the interpreter's finalization: a gloo thread can
    abort a process while Python shuts down (pytorch/pytorch#190489, "terminate called
    without an active exception"), and spawn would then kill the rank still writing the
    results (rank 1 of bench_loader.py ends before rank 0's part b)."""
    worker(index, args, port, tmp)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def main() -> None:
    run_workers(worker, __doc__, steps=60)


if __name__ == "__main__":
    main()
