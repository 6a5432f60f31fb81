"""The two loops of bench/bench_session.py, run by torchrun (2 CPU workers, gloo):
a hand-written DDP loop and the same loop through the session API, in lockstep inside one
launch (a hand-written step before each session step, bench/common.py Lockstep) so that
both see the same machine, each rank pinned to a core of its own when there are enough.
Rank 0 writes each round's mean step time and CPU time per step (every rank's process,
summed) to argv[1] (JSON).

    python -m torch.distributed.run --standalone --nproc_per_node 2 \\
        bench/session_loops.py OUT.json [--steps 40] [--rounds 5]
"""

import argparse
import itertools
import json
import os
import tempfile
from collections.abc import Callable

import torch
import torch.distributed as dist
from common import Lockstep  # bench/, the script's folder
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from jeanzay_kit import session

WARMUP = 5
BATCH = 32  # per rank and step


def model_and_data() -> tuple[nn.Module, TensorDataset]:
    torch.manual_seed(0)
    layers: list[nn.Module] = [nn.Linear(256, 1024), nn.ReLU()]
    for _ in range(3):
        layers += [nn.Linear(1024, 1024), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(1024, 10))
    inputs = torch.randn(16384, 256)
    return model, TensorDataset(inputs, torch.randint(0, 10, (16384,)))


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, batch: list) -> torch.Tensor:
    """The step both loops run: the same code on each side, so only the session differs."""
    x, y = batch
    loss = nn.functional.cross_entropy(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss


def cpu_all_ranks(seconds: float) -> float:
    """This process's CPU seconds summed over the ranks."""
    total = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(total)
    return float(total.item())


def hand() -> Callable[[], None]:
    """Plain DDP, one step per call: DistributedSampler, DataLoader, AdamW, the mean loss
    over the ranks printed every 10 steps."""
    model, data = model_and_data()
    model = DistributedDataParallel(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sampler = DistributedSampler(data, seed=0)
    batches = iter(DataLoader(data, batch_size=BATCH, sampler=sampler, drop_last=True))
    counter = itertools.count()

    def step() -> None:
        done = next(counter) + 1
        loss = train_step(model, optimizer, next(batches))
        if done % 10 == 0:
            mean = loss.detach().clone()
            dist.all_reduce(mean)
            if dist.get_rank() == 0:
                print(f"step {done} loss {mean.item() / dist.get_world_size():.4f}")

    return step


def lockstep(steps: int, run_dir: str) -> tuple[tuple[float, float], tuple[float, float]]:
    """The loop through the session (s.wrap, s.sampler, should_stop every step: one
    all-reduce, s.log every 10 steps, heartbeats and the watchdog running), a hand-written
    step before each of its steps. Returns (session, hand): each (wall s, CPU s summed over
    the ranks) per step after WARMUP. One step more runs than is timed: the last has no
    next switch to close it."""
    lock = Lockstep(hand())
    with session(steps=WARMUP + steps + 1, run_dir=run_dir) as s:
        model, data = model_and_data()
        model = s.wrap(model)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        sampler = s.sampler(data, batch_size=BATCH)
        ckpt = s.checkpointer(model, optimizer)
        batches = iter(DataLoader(data, batch_sampler=sampler))
        for step in range(ckpt.resume(), WARMUP + steps + 1):
            lock.switch()
            loss = train_step(model, optimizer, next(batches))
            if s.should_stop(step, loss=loss):
                ckpt.save(step + 1)
                s.requeue_and_exit()
            if (step + 1) % 10 == 0:
                s.log(step + 1, loss=loss)
    ours, theirs = lock.means(WARMUP)
    return (ours[0], cpu_all_ranks(ours[1])), (theirs[0], cpu_all_ranks(theirs[1]))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)  # 2 workers on 2 cores
    cores = sorted(os.sched_getaffinity(0))
    local, ranks = int(os.environ["LOCAL_RANK"]), int(os.environ["LOCAL_WORLD_SIZE"])
    if len(cores) >= ranks:  # one core each: no cache refills after a move (bench/common.py)
        os.sched_setaffinity(0, {cores[local]})
    dist.init_process_group("gloo")
    times: dict[str, list[float]] = {"hand": [], "session": [], "hand_cpu": [], "session_cpu": []}
    for _ in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="jzk-bench-session-") as tmp:
            run_dir = [tmp if dist.get_rank() == 0 else None]
            dist.broadcast_object_list(run_dir, src=0)
            ours, theirs = lockstep(args.steps, run_dir[0])
            dist.barrier()
        for side, (step_s, cpu_s) in (("session", ours), ("hand", theirs)):
            times[side].append(step_s)
            times[f"{side}_cpu"].append(cpu_s)
    if dist.get_rank() == 0:
        with open(args.out, "w") as f:
            json.dump(times, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
