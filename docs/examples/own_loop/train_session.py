"""A plain single-GPU PyTorch training script, as most projects start: a model, a
DataLoader, an optimizer, a loop and a checkpoint every few steps, converted from
train_plain.py to the session API (docs/your-own-loop.md, part b): DDP on every GPU, an
exact data order after a resume on any number of GPUs, the toolkit's checkpoints,
progress lines, hang watchdog and requeue after a time limit.
"""

import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from jeanzay_kit import session


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--save-every", type=int, default=10)
    parser.add_argument("--step-seconds", type=float, default=0.0)  # pretend work
    args = parser.parse_args()
    with session(steps=args.steps) as s:
        train(args, s)


def train(args: argparse.Namespace, s) -> None:  # noqa: ANN001
    device = s.device
    torch.manual_seed(0)
    inputs = torch.randn(2048, 16)
    data = TensorDataset(inputs, inputs.sum(dim=1, keepdim=True))
    model = s.wrap(nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)

    # 32 samples a step whatever the number of GPUs, in an order a resume continues.
    sampler = s.sampler(data, batch_size=32 // s.world_size, global_batch_size=32)
    ckpt = s.checkpointer(model, optimizer)
    step = ckpt.resume()

    loader = DataLoader(data, batch_sampler=sampler)
    while step < args.steps:
        for x, y in loader:
            loss = nn.functional.mse_loss(model(x.to(device)), y.to(device))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if args.step_seconds:
                time.sleep(args.step_seconds)
            if s.should_stop(step, loss=loss):  # a time limit, a preemption, a NaN
                ckpt.save(step + 1)
                s.requeue_and_exit()
            if (step + 1) % args.save_every == 0 or step + 1 == args.steps:
                ckpt.save(step + 1)
                s.log(step + 1, loss=loss)
            step += 1
            if step == args.steps:
                break
    digest = s.save_model(model)  # model_final.pt in the run directory
    if s.is_main:
        print(f"done: {args.steps} steps, model digest {digest}", flush=True)


if __name__ == "__main__":
    main()
