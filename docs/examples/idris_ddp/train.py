"""A DDP script written the way IDRIS's Jean Zay pages teach it, knowing nothing of
jeanzay_kit: idr_torch gives the rank and the world size, `init_process_group` takes them
explicitly with `init_method='env://'`, a `DistributedSampler` splits the data by them,
and rank 0 saves its own `checkpoint.pth` in the working directory, which the next start
loads. It reads its data from `data/train.csv` (four features and a target per line).

    srun python train.py --epochs 3                       # IDRIS's way, in your sbatch
    jzk train job.entry=train.py resources.gpus_per_node=2 -- --epochs 3
    jzk submit cluster=jeanzay_h100 resources.nodes=2 job.entry=train.py -- --epochs 3

Each rank prints what idr_torch told it and which samples it trained on
(docs/your-own-loop.md, "Coming from IDRIS's examples").
"""

import argparse
import os

import idr_torch
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def read_samples(path):
    """The sample's index, its features and its target, for every line of the file."""
    with open(path) as f:
        rows = [[float(v) for v in line.split(",")] for line in f if line.strip()]
    table = torch.tensor(rows)
    return TensorDataset(torch.arange(len(rows)), table[:, :-1], table[:, -1:])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--data", default="data/train.csv")
    parser.add_argument("--checkpoint", default="checkpoint.pth")
    args = parser.parse_args()

    # IDRIS: NCCL on the GPUs; gloo lets the same script run on a CPU machine.
    cuda = torch.cuda.is_available()
    dist.init_process_group(
        backend="nccl" if cuda else "gloo",
        init_method="env://",
        world_size=idr_torch.size,
        rank=idr_torch.rank,
    )
    if cuda:
        torch.cuda.set_device(idr_torch.local_rank)
    device = torch.device(f"cuda:{idr_torch.local_rank}" if cuda else "cpu")
    print(
        f"idr_torch: rank {idr_torch.rank} of {idr_torch.size}, local rank "
        f"{idr_torch.local_rank}, launcher {idr_torch.current_API}",
        flush=True,
    )

    dataset = read_samples(args.data)
    sampler = DistributedSampler(
        dataset, num_replicas=idr_torch.size, rank=idr_torch.rank, shuffle=True, seed=0
    )
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1).to(device)
    ddp_model = DDP(model, device_ids=[idr_torch.local_rank] if cuda else None)
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=args.lr)

    first_epoch = 0
    if os.path.exists(args.checkpoint):
        state = torch.load(args.checkpoint, map_location=device)
        ddp_model.module.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        first_epoch = state["epoch"] + 1
        print(f"rank {idr_torch.rank}: resumed from {args.checkpoint} after epoch {state['epoch']}")

    loss = torch.tensor(float("nan"))
    for epoch in range(first_epoch, args.epochs):
        sampler.set_epoch(epoch)
        seen = []
        for index, inputs, targets in loader:
            inputs, targets = inputs.to(device), targets.to(device)
            loss = torch.nn.functional.mse_loss(ddp_model(inputs), targets)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            seen += index.tolist()
        samples = ",".join(map(str, sorted(seen)))
        print(f"rank {idr_torch.rank} epoch {epoch} samples {samples}", flush=True)
        if idr_torch.rank == 0:
            state = {
                "model": ddp_model.module.state_dict(),
                "optimizer": optimizer.state_dict(),
                "epoch": epoch,
            }
            torch.save(state, args.checkpoint)
        dist.barrier()

    if idr_torch.rank == 0:
        print(f"done: {args.epochs} epochs, loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
