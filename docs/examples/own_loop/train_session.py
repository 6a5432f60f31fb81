"""train_plain.py converted to the session API (docs/your-own-loop.md, part b): the same
model, data, optimizer and loop, plus the toolkit's ranks and DDP, its data order (exact
after a resume, on any number of GPUs), its checkpoints, progress lines, hang watchdog
and requeue after a time limit.
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
        torch.manual_seed(0)
        inputs = torch.randn(2048, 16)
        data = TensorDataset(inputs, inputs.sum(dim=1, keepdim=True))
        model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1))
        model = s.wrap(model)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        # 32 samples a step whatever the number of GPUs.
        sampler = s.sampler(data, batch_size=32 // s.world_size, global_batch_size=32)

        ckpt = s.checkpointer(model, optimizer)
        start = ckpt.resume()
        batches = iter(DataLoader(data, batch_sampler=sampler))
        for step in range(start, args.steps):
            x, y = next(batches)
            loss = nn.functional.mse_loss(model(x.to(s.device)), y.to(s.device))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if args.step_seconds:
                time.sleep(args.step_seconds)
            if s.should_stop(step, loss=loss):
                ckpt.save(step + 1)
                s.requeue_and_exit()
            if (step + 1) % args.save_every == 0 or step + 1 == args.steps:
                ckpt.save(step + 1)
                s.log(step + 1, loss=loss)
        digest = s.save_model(model)
        if s.is_main:
            print(f"done: {args.steps} steps, model digest {digest}", flush=True)


if __name__ == "__main__":
    main()
