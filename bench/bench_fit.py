"""Fit before the queue (issue 57): the estimate against what a real CPU step allocates.

For each mode, the shipped GPT (and the MLP) is estimated as `jzk validate` estimates it
(launch/fit_check.py: traced on fake tensors, then the mode's arithmetic), then trained
for real on the CPU for two steps, every allocation counted by torch's trackers on real
tensors: MemTracker (DDP built inside it, so its gradient buckets are counted) and, for
FSDP2, FSDPMemTracker. Two gloo ranks for ddp and fsdp (rank 0's peak; the ranks are
alike). Target: within 15 % (issue 57 point 4).

    .venv/bin/python bench/bench_fit.py            # about a minute on 2 cores
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GPT = ["model=gpt", "data=stdlib_text", "model.n_layer=4", "model.n_embd=256"]
CASES = [
    ("ddp", [*GPT]),
    ("fsdp", [*GPT]),
    ("ddp", [*GPT, "train.activation_checkpointing=true"]),
    ("fsdp", [*GPT, "train.precision=fp32"]),
    ("ddp", ["model=mlp", "data=synthetic", "model.hidden=1024"]),
]
BASE = ["cluster=jeanzay_h100", "cluster.account=abc@h100", "resources.gpus_per_node=2"]


def overrides(mode: str, extra: list[str]) -> list[str]:
    # No accumulation: the real step below runs one micro-batch per optimizer step.
    return [*BASE, f"parallel={mode}", *extra, "train.global_batch_size=16"]


def estimate(args: list[str]) -> int:
    from jeanzay_kit.launch import fit_check
    from jeanzay_kit.launch.request import spec_of

    spec = spec_of(args, None, fit=False)
    env = {**os.environ, "XDG_CACHE_HOME": tempfile.mkdtemp()}
    fit = fit_check.check(spec, args, lambda more: spec_of(more, None, fit=False), env)
    assert fit is not None
    return fit.estimate.total


def real_rank(mode: str, args: list[str], out: str) -> None:
    """One gloo rank's two real steps, its peak counted (started by torchrun)."""
    import torch
    import torch.distributed as dist
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from torch.distributed._tools.mem_tracker import MemTracker
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.nn.parallel import DistributedDataParallel

    from jeanzay_kit.launch.request import spec_of
    from jeanzay_kit.train.components import (
        build_dataset,
        build_loss,
        build_model,
        build_optimizer,
    )
    from jeanzay_kit.train.micro_batch import first_samples

    dist.init_process_group("gloo")
    spec = spec_of(args, None, fit=False)
    torch.manual_seed(0)
    model = build_model(spec, warn=False)
    batch = first_samples(spec, build_dataset(spec), spec.train.micro_batch_size)
    low = spec.train.precision in ("bf16", "fp16")
    if mode == "fsdp":
        mesh = init_device_mesh("cpu", (dist.get_world_size(),))
        for block in model.blocks.values():
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
        opt = build_optimizer(model.parameters(), spec.optim, None)
        tracker = FSDPMemTracker(model, opt)
        wrapped = model
    else:
        tracker = MemTracker()
        with tracker:  # DDP's buckets are allocated as it is built
            wrapped = DistributedDataParallel(model)
        opt = build_optimizer(model.parameters(), spec.optim, None)
        tracker.track_external(model, opt)
    loss = build_loss(spec, model)
    with tracker:
        for _ in range(2):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=low):
                value = loss(wrapped, batch)
            value.backward()
            del value
            opt.step()
            opt.zero_grad(set_to_none=True)
            tracker.reset_mod_stats()
    peak = sum(s["Total"] for s in tracker.get_tracker_snapshot("peak").values())
    if dist.get_rank() == 0:
        Path(out).write_text(json.dumps({"peak": peak}))
    dist.destroy_process_group()


def real(mode: str, args: list[str]) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "peak.json"
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
        cmd += ["--nproc_per_node", "2", __file__, "--rank", mode, str(out), *args]
        subprocess.run(cmd, check=True, cwd=tmp, env={**os.environ, "OMP_NUM_THREADS": "1"})
        return int(json.loads(out.read_text())["peak"])


def main() -> int:
    rows, worst = [], 0.0
    for mode, extra in CASES:
        args = overrides(mode, extra)
        est, got = estimate(args), real(mode, args)
        error = (est - got) / got
        worst = max(worst, abs(error))
        rows.append(
            f"{mode:5} {' '.join(extra):50} {est / 2**20:8.1f} {got / 2**20:8.1f} {error:+.1%}"
        )
    print(f"{'mode':5} {'model':50} {'est MiB':>8} {'real MiB':>8} error")
    print("\n".join(rows))
    print(f"worst error {worst:.1%} (target: within 15 %)")
    return 0 if worst <= 0.15 else 1


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--rank":
        real_rank(sys.argv[2], sys.argv[4:], sys.argv[3])
        sys.exit(0)
    sys.exit(main())
