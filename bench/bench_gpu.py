"""GPT-2 124M on one GPU: tokens/s and model FLOPs utilisation, as `python train.py` runs.

    .venv/bin/python bench/bench_gpu.py [--rounds 3] [--steps 30]

The GPT-2 small shape (12 layers, width 768, 12 heads, context 1024, vocabulary 50304)
on the byte-level stdlib text, bf16 (precision=auto on a GPU that has it), one GPU, NCCL;
tokens/s and MFU are what the loop writes to metrics.jsonl (train/loop.py: 6 x parameters
x tokens plus attention FLOPs per step, over the GPU's peak). Median over the steps after
--warmup of each round, then over rounds. Needs a CUDA device; bench/run.py runs it only
when one is there. Results are printed and written to bench/results/gpu.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import GPT2_SHAPE, REPO, gpt_overrides, train_py, write_result  # noqa: E402

GPT2_124M = [
    *gpt_overrides(GPT2_SHAPE),
    "data=stdlib_text",
    "resources.gpus_per_node=1",
    "train.global_batch_size=16",
    "train.micro_batch_size=8",
    "train.log_every=1",
    "train.eval_every=0",
    "checkpoint.every_steps=0",
    "resume=never",
]


def has_data(overrides: list[str]) -> bool:
    return any(o.startswith("data=") for o in overrides)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument(
        "overrides", nargs="*", help="more train.py overrides, e.g. train.compile=true"
    )
    args = parser.parse_args()
    # Another dataset given (data=token_file data.path=...): it replaces the default one.
    base = [o for o in GPT2_124M if not (o.startswith("data=") and has_data(args.overrides))]
    import torch

    if not torch.cuda.is_available():
        sys.exit("bench_gpu: no CUDA device")
    tps, mfu, wait = [], [], []
    for r in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="jzk-bench-gpu-") as tmp:
            argv = train_py(
                *base,
                *args.overrides,
                f"train.steps={args.warmup + args.steps}",
                f"job.run_dir={tmp}",
            )
            done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True)
            if done.returncode != 0:
                sys.exit(f"bench_gpu: train.py failed: {done.stderr[-3000:]}")
            lines = (Path(tmp) / "metrics.jsonl").read_text().splitlines()
            records = [json.loads(x) for x in lines]
            measured = [x for x in records if x.get("step", 0) > args.warmup and "mfu" in x]
            tps.append(statistics.median(x["tokens_per_s"] for x in measured))
            mfu.append(statistics.median(x["mfu"] for x in measured))
            wait.append(statistics.median(x.get("data_wait_share", 0.0) for x in measured))
        print(
            f"round {r}: {tps[-1]:.0f} tokens/s, MFU {mfu[-1]:.3f}, data wait {wait[-1]:.2%}",
            flush=True,
        )
    report = {
        "device": torch.cuda.get_device_name(0),
        "tokens_per_s": statistics.median(tps),
        "tokens_per_s_rounds": tps,
        "mfu": statistics.median(mfu),
        "mfu_rounds": mfu,
        "data_wait_share": statistics.median(wait),
        "setup": {
            "overrides": [*base, *args.overrides],
            "steps": args.steps,
            "warmup": args.warmup,
        },
    }
    path = write_result("gpu", report)
    print(f"GPT-2 124M: {report['tokens_per_s']:.0f} tokens/s, MFU {report['mfu']:.3f}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
