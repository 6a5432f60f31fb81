"""The project's own hand-written GPT training loop: the baseline of issue 36's figure.

    .venv/bin/python bench/gpt_hand_loop.py --path TOKENS.bin [--steps 60 --warmup 10] \
        [--micro 16 --global-batch 64] [--no-compile] [--device cpu --layers 2 ...]

What a careful user writes by hand for one GPU, with the same model class
(examples/models.py TinyGPT: SDPA attention), the same memory-mapped token file read by
the same dataset class through torch's DataLoader (random windows, pinned memory, worker
processes), and the settings the toolkit's loop uses on CUDA: bf16 autocast, TF32
matmuls, torch.compile, fused AdamW, gradient clipping, accumulation. It synchronizes the
GPU at the end of every step, as the toolkit's loop does at each logged step (the
benchmark runs that with train.log_every=1). Prints one JSON line: tokens/s, step times.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader, RandomSampler

from jeanzay_kit.examples.models import TinyGPT
from jeanzay_kit.examples.tokens import TokenWindows

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import GPT2_SHAPE  # noqa: E402


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--path", required=True, help="a uint16 token file")
    for key, value in GPT2_SHAPE.items():  # block, layers, width, heads, vocab
        p.add_argument(f"--{key}", type=int, default=value)
    p.add_argument("--global-batch", type=int, default=16)
    p.add_argument("--micro", type=int, default=8)
    p.add_argument("--steps", type=int, default=60, help="timed steps")
    p.add_argument("--warmup", type=int, default=10, help="untimed steps first (compile)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--no-compile", action="store_true")
    p.add_argument("--device", default="cuda")
    return p.parse_args()


def main() -> None:
    args = parse()
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    torch.manual_seed(0)
    torch.set_float32_matmul_precision("high")  # TF32 tensor cores for fp32 matmuls
    model = TinyGPT(args.vocab, args.block, args.layers, args.width, args.heads).to(device)
    flops = model.flops_per_sample()
    step_model = model if args.no_compile else torch.compile(model)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.01, fused=cuda or None
    )
    data = TokenWindows(args.path, args.block)
    total = args.warmup + args.steps
    loader = DataLoader(
        data,
        batch_size=args.micro,
        sampler=RandomSampler(
            data,
            replacement=True,
            num_samples=total * args.global_batch,
            generator=torch.Generator().manual_seed(0),
        ),
        num_workers=args.workers,
        pin_memory=cuda,
        drop_last=True,
        persistent_workers=args.workers > 0,
    )
    accumulation = args.global_batch // args.micro
    dtype = torch.bfloat16 if cuda and torch.cuda.is_bf16_supported() else None
    batches = iter(loader)
    times = []
    for step in range(total):
        started = time.perf_counter()
        for _ in range(accumulation):
            x, y = (t.to(device, non_blocking=cuda) for t in next(batches))
            with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
                loss = TinyGPT.loss(step_model(x), y) / accumulation
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.synchronize(device)
        if step >= args.warmup:
            times.append(time.perf_counter() - started)
    step_s = statistics.median(times)
    print(
        json.dumps(
            {
                "step_s": step_s,
                "tokens_per_s": args.global_batch * args.block / step_s,
                "flops_per_sample": flops,
                "steps": len(times),
                "final_loss": loss.item() * accumulation,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
