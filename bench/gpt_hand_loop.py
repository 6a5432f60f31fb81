"""The project's own hand-written GPT training loop: the baseline of issue 36's figure.

    .venv/bin/python bench/gpt_hand_loop.py --path TOKENS.bin [--steps 60 --warmup 10] \
        [--micro 16 --global-batch 64] [--no-compile] [--device cpu --layers 2 ...]

What a careful user writes by hand for one GPU, with the same model class
(examples/models.py TinyGPT: SDPA attention), the same memory-mapped token file read by
the same dataset class through torch's DataLoader (random windows, pinned memory, worker
processes), and the settings the toolkit's loop uses on CUDA: bf16 autocast, TF32
matmuls, torch.compile of the model and of its loss, fused AdamW, gradient clipping,
accumulation. It synchronizes the GPU at the end of every step (the toolkit's loop reads
its stop agreement once per step). Prints one JSON line: tokens/s, step times; with
--profile N, what the GPU spent N more steps on (torch.profiler), by kernel and by kind.
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
    p.add_argument("--profile", type=int, default=0, help="steps to profile after the timed ones")
    return p.parse_args()


# Kernel names -> what they do, for the profile's summary (first match wins).
KINDS = (
    ("attention", ("flash", "fmha", "attention", "cudnn")),
    ("optimizer", ("adam", "multi_tensor", "foreach")),
    ("matmul", ("gemm", "cutlass", "xmma", "nvjet", "cublas", "sm90_", "sm80_")),
    ("fused (triton)", ("triton",)),
    ("copy", ("memcpy", "memset", "copy")),
    ("nccl", ("nccl",)),
)


def kind_of(name: str) -> str:
    low = name.lower()
    return next((kind for kind, keys in KINDS if any(k in low for k in keys)), "other")


def profile_steps(run_step, steps: int, device: torch.device) -> dict:
    """GPU time by kernel and by kind over `steps` steps, and the share the GPU idled."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize(device)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        started = time.perf_counter()
        for _ in range(steps):
            run_step()
        torch.cuda.synchronize(device)
        wall = time.perf_counter() - started
    kernels: dict[str, float] = {}
    events = list(prof.key_averages())
    on_gpu = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
    if not on_gpu:  # a torch that files kernels under their CPU side: name-based
        host = ("aten::", "cuda", "autograd", "Torch", "Optimizer", "#", "Profiler", "torch")
        on_gpu = [e for e in events if not e.key.startswith(host)]
    for event in on_gpu:
        own = getattr(event, "self_device_time_total", None)
        own = own if own is not None else getattr(event, "self_cuda_time_total", 0)
        if own:
            kernels[event.key] = kernels.get(event.key, 0.0) + own / 1e6 / steps
    busy = sum(kernels.values())
    kinds: dict[str, float] = {}
    for name, secs in kernels.items():
        kinds[kind_of(name)] = kinds.get(kind_of(name), 0.0) + secs
    top = sorted(kernels.items(), key=lambda kv: -kv[1])[:15]
    return {
        "step_s": wall / steps,
        "gpu_busy_s": busy,
        "gpu_idle_share": max(0.0, 1 - busy / (wall / steps)),
        "kinds_s": dict(sorted(kinds.items(), key=lambda kv: -kv[1])),
        "top_kernels_s": [[name[:110], secs] for name, secs in top],
    }


def main() -> None:
    args = parse()
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    torch.manual_seed(0)
    torch.set_float32_matmul_precision("high")  # TF32 tensor cores for fp32 matmuls
    model = TinyGPT(args.vocab, args.block, args.layers, args.width, args.heads).to(device)
    flops = model.flops_per_sample()
    step_model = model if args.no_compile else torch.compile(model)
    # The loss compiled too, as the toolkit's loop does (train/loss.py: compiled()).
    loss_of = TinyGPT.loss if args.no_compile else torch.compile(TinyGPT.loss)
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
            num_samples=(total + args.profile) * args.global_batch,
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

    def run_step() -> torch.Tensor:
        for _ in range(accumulation):
            x, y = (t.to(device, non_blocking=cuda) for t in next(batches))
            with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
                loss = loss_of(step_model(x), y) / accumulation
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.synchronize(device)
        return loss

    for step in range(total):
        started = time.perf_counter()
        loss = run_step()
        if step >= args.warmup:
            times.append(time.perf_counter() - started)
    step_s = statistics.median(times)
    profiled = None
    if args.profile and cuda:
        try:  # the figure above stands whatever the profiler does
            profiled = profile_steps(run_step, args.profile, device)
        except Exception as err:
            profiled = {"error": f"{type(err).__name__}: {err}"}
    print(
        json.dumps(
            {
                "step_s": step_s,
                "tokens_per_s": args.global_batch * args.block / step_s,
                "flops_per_sample": flops,
                "steps": len(times),
                "final_loss": loss.item() * accumulation,
                "max_memory_gib": torch.cuda.max_memory_allocated(device) / 2**30 if cuda else None,
                "profile": profiled,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
