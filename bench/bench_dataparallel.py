"""DataParallel against DDP on the same global batch, both as `python train.py` runs.

    .venv/bin/python bench/bench_dataparallel.py [--rounds 5] [--steps 20]

`parallel=dataparallel` (one process; torch.nn.DataParallel splits each micro-batch over
the visible GPUs, and on a CPU-only machine it runs the module as is) against
`parallel=ddp` (one process per GPU, or 2 CPU workers with gloo here), same model (the
runtime bench's TinyGPT), data and global batch (32 samples, micro-batches of 8). The
figure is DataParallel's step time / DDP's, median of the per-round ratios of median
step times after --warmup steps; rounds alternate which side goes first. Results are
printed and written to bench/results/dataparallel.json.
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

from common import REPO, train_py, write_result  # noqa: E402

COMMON = [
    "model=gpt",
    "data=stdlib_text",
    "data.max_bytes=400000",
    "train.global_batch_size=32",
    "train.micro_batch_size=8",
    "train.log_every=1",
    "train.eval_every=0",
    "checkpoint.every_steps=0",
    "resume=never",
]


def gpus() -> int:
    import torch

    return torch.cuda.device_count()


def step_time(folder: Path, mode: str, steps: int, warmup: int) -> float:
    run_dir = folder / mode
    argv = train_py(
        *COMMON, f"parallel={mode}", f"train.steps={warmup + steps}", f"hydra.run.dir={run_dir}"
    )
    if mode == "ddp" and not gpus():
        argv.insert(2, "resources.gpus_per_node=2")  # 2 CPU workers; on GPUs: one per GPU
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"{mode}: {done.stderr[-2000:]}")
    records = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return statistics.median(
        r["step_time_s"] for r in records if "step_time_s" in r and r["step"] > warmup
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    dp, ddp = [], []
    for r in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="jzk-bench-dp-") as tmp:
            for mode in ("dataparallel", "ddp") if r % 2 == 0 else ("ddp", "dataparallel"):
                seconds = step_time(Path(tmp), mode, args.steps, args.warmup)
                (dp if mode == "dataparallel" else ddp).append(seconds)
        print(f"round {r}: dataparallel {dp[-1] * 1e3:.1f} ms/step, ddp {ddp[-1] * 1e3:.1f}")
    ratios = [a / b for a, b in zip(dp, ddp, strict=True)]
    report = {
        "dataparallel_step_s": dp,
        "ddp_step_s": ddp,
        "ratios": ratios,
        "ratio_median": statistics.median(ratios),
        "setup": {
            "steps": args.steps,
            "warmup": args.warmup,
            "rounds": args.rounds,
            "global_batch": 32,
            "micro_batch": 8,
            "ddp_workers": "2 (CPU) or 1 per GPU",
        },
    }
    path = write_result("dataparallel", report)
    print(f"DataParallel / DDP step time: {report['ratio_median']:.2f} (rounds {ratios})")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
