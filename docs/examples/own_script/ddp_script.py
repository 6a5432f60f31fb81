"""A training script written the way PyTorch's DDP tutorial teaches, knowing nothing of
jeanzay_kit: torch.distributed's env:// variables (RANK, WORLD_SIZE, MASTER_ADDR...), its
own argparse, its own loop and its own checkpoint file.

What makes it survive a Slurm time limit or preemption is plain Python: on SIGUSR1 or
SIGTERM it notes the signal, saves its checkpoint at the next step boundary and exits 3,
the "requeue me" code of jeanzay_kit's script tasks; started again (in the same
JZK_RUN_DIR), it loads that checkpoint and goes on.

    torchrun --nproc-per-node=2 ddp_script.py --steps 40          # plain torchrun
    jzk train job.entry=ddp_script.py job.args='[--steps,40]' resources.gpus_per_node=2
"""

import argparse
import hashlib
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

STOP = {"signum": 0}


def note_signal(signum, _frame):
    STOP["signum"] = signum


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--out", default=os.environ.get("JZK_RUN_DIR", "."))
    # Seconds of pretend work per step: time to send it a signal by hand.
    parser.add_argument("--step-seconds", type=float, default=0.0)
    args = parser.parse_args()
    for sig in (signal.SIGUSR1, signal.SIGTERM):
        signal.signal(sig, note_signal)

    backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend)  # env://: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ["LOCAL_RANK"])
    device = torch.device(f"cuda:{local_rank}" if backend == "nccl" else "cpu")

    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1)).to(device))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    checkpoint = os.path.join(args.out, "checkpoint.pt")
    start = 0
    if os.path.exists(checkpoint):
        state = torch.load(checkpoint, map_location=device, weights_only=True)
        model.module.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["step"]
        if rank == 0:
            print(f"resumed at step {start}", flush=True)

    data = torch.Generator().manual_seed(1)
    inputs = torch.randn(4096, 16, generator=data)
    targets = inputs.sum(dim=1, keepdim=True)
    for step in range(start, args.steps):
        batch = torch.arange(step * 64, (step + 1) * 64) % 4096
        mine = batch[rank::world]
        loss = nn.functional.mse_loss(model(inputs[mine].to(device)), targets[mine].to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        time.sleep(args.step_seconds)
        if rank == 0 and (step + 1) % 10 == 0:
            print(f"step {step + 1} loss {loss.item():.4f}", flush=True)
        # Every rank stops at the same step: the largest signal any rank saw.
        flag = torch.tensor([STOP["signum"]], device=device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        if flag.item():
            save(model, optimizer, step + 1, checkpoint, rank)
            dist.destroy_process_group()
            return 3  # "requeue me": jeanzay_kit starts the script again
    save(model, optimizer, args.steps, checkpoint, rank)
    if rank == 0:
        weights = b"".join(p.detach().cpu().numpy().tobytes() for p in model.parameters())
        print(f"done: {args.steps} steps, weights {hashlib.sha256(weights).hexdigest()}")
    dist.destroy_process_group()
    return 0


def save(model, optimizer, step, path, rank):
    if rank == 0:
        state = {"model": model.module.state_dict(), "optimizer": optimizer.state_dict()}
        torch.save({**state, "step": step}, path + ".tmp")
        os.replace(path + ".tmp", path)  # never a half-written checkpoint
    dist.barrier()


if __name__ == "__main__":
    sys.exit(main())
