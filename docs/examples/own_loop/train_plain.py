"""A plain single-GPU PyTorch training script, as most projects start: a model, a
DataLoader, an optimizer, a loop and a `torch.save` checkpoint every few steps. It knows
nothing of jeanzay_kit or Slurm (docs/your-own-loop.md runs it unchanged as a script task,
then converts it to the session API: train_session.py).
"""

import argparse
import os
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--save-every", type=int, default=10)
    parser.add_argument("--out", default=os.environ.get("JZK_RUN_DIR", "."))
    parser.add_argument("--step-seconds", type=float, default=0.0)  # pretend work
    args = parser.parse_args()
    train(args)


def train(args: argparse.Namespace) -> None:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    inputs = torch.randn(2048, 16)
    data = TensorDataset(inputs, inputs.sum(dim=1, keepdim=True))
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)

    path = os.path.join(args.out, "checkpoint.pt")
    step = 0
    if os.path.exists(path):
        state = torch.load(path, map_location=device, weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step = state["step"]
        print(f"resumed at step {step}", flush=True)

    generator = torch.Generator().manual_seed(step)  # a new order after each restart
    loader = DataLoader(data, batch_size=32, shuffle=True, generator=generator)
    while step < args.steps:
        for x, y in loader:
            loss = nn.functional.mse_loss(model(x.to(device)), y.to(device))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if args.step_seconds:
                time.sleep(args.step_seconds)
            if (step + 1) % args.save_every == 0 or step + 1 == args.steps:
                state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
                torch.save({**state, "step": step + 1}, path + ".tmp")
                os.replace(path + ".tmp", path)
                print(f"step {step + 1} loss {loss.item():.4f} (saved)", flush=True)
            step += 1
            if step == args.steps:
                break
    print(f"done: {args.steps} steps", flush=True)


if __name__ == "__main__":
    main()
