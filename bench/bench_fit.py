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
CASES_ALL = [
    ("ddp", [*GPT]),
    ("fsdp", [*GPT]),
    ("ddp", [*GPT, "train.activation_checkpointing=true"]),
    ("fsdp", [*GPT, "train.precision=fp32"]),
    ("ddp", ["model=mlp", "data=synthetic", "model.hidden=1024"]),
    ("pipeline", [*GPT, "parallel.pipeline_stages=2", "parallel.microbatches=4"]),
    ("pipeline", [*GPT, "parallel.pipeline_stages=2", "parallel.schedule=gpipe"]),
]
# bench_fit.py pipeline: only the cases of that mode.
CASES = [c for c in CASES_ALL if len(sys.argv) < 2 or c[0] in sys.argv[1:]]
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


def _tracker_without_module_hooks() -> object:
    """MemTracker without its module hooks: torch.distributed.pipelining runs a stage's
    backward with autograd.grad, which those hooks cannot follow. Every allocation is
    still counted (the dispatch mode and the optimizer hooks stay)."""
    from torch.distributed._tools.mem_tracker import MemTracker
    from torch.utils._python_dispatch import TorchDispatchMode

    class Counting(MemTracker):
        def __enter__(self) -> Counting:
            if self._depth == 0:
                self._fake_mode_on_entry = None
                self._register_global_optimizer_hook()
                self._track_resize()
                self._peak_mem_snap = self.get_tracker_snapshot()
                self._peak_mem = {d: s["Total"] for d, s in self._peak_mem_snap.items()}
            TorchDispatchMode.__enter__(self)
            self._depth += 1
            return self

        def __exit__(self, *args: object) -> None:
            self._depth -= 1
            if self._depth == 0:
                self._deregister_param_and_optimizer_hooks()
                self._restore_resize()
            TorchDispatchMode.__exit__(self, *args)

    return Counting()


def real_rank(mode: str, args: list[str], out: str) -> None:
    """One gloo rank's two real steps through the toolkit's own strategy for the mode
    (train/components.py build_strategy), its peak counted (started by torchrun)."""
    import torch
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from torch.distributed._tools.mem_tracker import MemTracker

    from jeanzay_kit.distributed.process_group import init_distributed, shutdown
    from jeanzay_kit.distributed.ranks import rank_info_from_env
    from jeanzay_kit.launch.request import spec_of
    from jeanzay_kit.train.components import (
        build_dataset,
        build_loss,
        build_model,
        build_optimizer,
        build_strategy,
    )
    from jeanzay_kit.train.micro_batch import first_samples

    spec = spec_of(args, None, fit=False)
    ctx = init_distributed(rank_info_from_env(os.environ), spec.layout, torch.device("cpu"))
    torch.manual_seed(0)
    model = build_model(spec, warn=False)
    batches = [first_samples(spec, build_dataset(spec), spec.train.micro_batch_size)]
    batches *= spec.train.grad_accum_steps
    loss = build_loss(spec, model)
    tracker = _tracker_without_module_hooks() if mode.startswith("pipeline") else MemTracker()
    if mode == "fsdp":
        strategy = build_strategy(spec, ctx, model, loss, spec.train.precision)
        opt = build_optimizer(strategy.parameters(), spec.optim, None)
        tracker = FSDPMemTracker(strategy.modules().__next__(), opt)
    else:
        with tracker:  # DDP's buckets are allocated as it is built
            strategy = build_strategy(spec, ctx, model, loss, spec.train.precision)
        opt = build_optimizer(strategy.parameters(), spec.optim, None)
        for module in strategy.modules():
            tracker.track_external(module)
        tracker.track_external(opt)
    strategy.train()
    with tracker:
        for _ in range(2):
            strategy.train_step(batches)
            opt.step()
            opt.zero_grad(set_to_none=True)
            if hasattr(tracker, "reset_mod_stats"):
                tracker.reset_mod_stats()
    peak = sum(s["Total"] for s in tracker.get_tracker_snapshot("peak").values())
    Path(f"{out}.{ctx.info.rank}").write_text(json.dumps({"peak": peak}))
    shutdown()


def real(mode: str, args: list[str]) -> int:
    """The largest peak over the ranks (pipeline stages differ)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "peak.json"
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
        cmd += ["--nproc_per_node", "2", __file__, "--rank", mode, str(out), *args]
        subprocess.run(cmd, check=True, cwd=tmp, env={**os.environ, "OMP_NUM_THREADS": "1"})
        return max(int(json.loads(p.read_text())["peak"]) for p in Path(tmp).glob("peak.json.*"))


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
