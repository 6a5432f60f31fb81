"""GPT-2 124M from a memory-mapped token file: the toolkit's loop against the project's
own hand-written loop (bench/gpt_hand_loop.py), same model, data path and settings.

    .venv/bin/python bench/bench_gpu_vs_hand.py [--rounds 3] [--steps 60] [--micro 16]

Each round runs `train.py` (data=token_file, the GPU defaults: bf16, TF32, compile, fused
AdamW, pinned memory; train.log_every=1 so every step is timed and synchronized) and then
the hand-written loop, on one GPU, on a token file written from the standard library's
sources. Figures: the toolkit's step time / the hand loop's (median of the steps after
--warmup, then of the rounds; target <= 1.02) and the toolkit's MFU (target >= 0.45 on an
H100). Results in bench/results/gpu_vs_hand.json. --cpu-smoke runs a tiny shape on the
CPU to check the plumbing (no figure means anything then).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import GPT2_SHAPE, REPO, gpt_overrides, train_py, write_result  # noqa: E402

SMOKE = {"block": 64, "layers": 2, "width": 64, "heads": 2, "vocab": 256}


def token_file(folder: Path) -> Path:
    """A nanoGPT-format file of byte-level tokens from the standard library's sources."""
    sources = sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))[:200]
    out = folder / "train.bin"
    cmd = [sys.executable, "-m", "jeanzay_kit.examples.tokens", str(out), *map(str, sources)]
    subprocess.run(cmd, check=True, capture_output=True)
    return out


def toolkit_round(args: argparse.Namespace, shape: dict, path: Path, run_dir: Path) -> dict:
    overrides = [
        *gpt_overrides(shape),
        "data=token_file",
        f"data.path={path}",
        "resources.gpus_per_node=1",
        f"train.global_batch_size={args.global_batch}",
        f"train.micro_batch_size={args.micro}",
        f"train.steps={args.warmup + args.steps}",
        "train.log_every=1",
        "train.eval_every=0",
        "checkpoint.every_steps=0",
        f"loader.num_workers={args.workers}",
        "resume=never",
        f"job.run_dir={run_dir}",
        *(["cluster.device=cpu", "train.compile=false"] if args.cpu_smoke else []),
        *args.overrides,
    ]
    done = subprocess.run(train_py(*overrides), cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"bench_gpu_vs_hand: train.py failed: {done.stderr[-3000:]}")
    records = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    timed = [r for r in records if r["step"] > args.warmup]
    return {
        "step_s": statistics.median(r["step_time_s"] for r in timed),
        "mfu": statistics.median(r["mfu"] for r in timed) if "mfu" in timed[0] else None,
        "compile_s": next((r["compile_s"] for r in records if "compile_s" in r), None),
    }


def hand_round(args: argparse.Namespace, shape: dict, path: Path) -> dict:
    cmd = [
        sys.executable,
        str(REPO / "bench" / "gpt_hand_loop.py"),
        f"--path={path}",
        *(f"--{k}={v}" for k, v in shape.items()),
        f"--global-batch={args.global_batch}",
        f"--micro={args.micro}",
        f"--steps={args.steps}",
        f"--warmup={args.warmup}",
        f"--workers={args.workers}",
        *(["--device=cpu", "--no-compile"] if args.cpu_smoke else []),
    ]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"bench_gpu_vs_hand: the hand loop failed: {done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--global-batch", type=int, default=64)
    parser.add_argument("--micro", type=int, default=16)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--cpu-smoke", action="store_true")
    parser.add_argument("overrides", nargs="*", help="more train.py overrides")
    args = parser.parse_args()
    import torch

    if not args.cpu_smoke and not torch.cuda.is_available():
        sys.exit("bench_gpu_vs_hand: no CUDA device")
    shape = SMOKE if args.cpu_smoke else GPT2_SHAPE
    ratios, mfus, rounds = [], [], []
    with tempfile.TemporaryDirectory(prefix="jzk-bench-hand-") as tmp:
        path = token_file(Path(tmp))
        for r in range(args.rounds):
            ours = toolkit_round(args, shape, path, Path(tmp) / f"run-{r}")
            hand = hand_round(args, shape, path)
            rounds.append({"toolkit": ours, "hand": hand})
            ratios.append(ours["step_s"] / hand["step_s"])
            if ours["mfu"] is not None:
                mfus.append(ours["mfu"])
            print(
                f"round {r}: toolkit {ours['step_s'] * 1e3:.1f} ms/step (MFU {ours['mfu']}, "
                f"compile {ours['compile_s']} s), hand {hand['step_s'] * 1e3:.1f} ms/step: "
                f"{ratios[-1]:.3f}",
                flush=True,
            )
    report = {
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
        "ratio_median": statistics.median(ratios),
        "ratios": ratios,
        "mfu": statistics.median(mfus) if mfus else None,
        "mfu_rounds": mfus,
        "rounds": rounds,
        "setup": {**vars(args), "shape": shape},
    }
    path_out = write_result("gpu_vs_hand", report)
    print(f"toolkit / hand: {report['ratio_median']:.3f}; MFU {report['mfu']}; wrote {path_out}")


if __name__ == "__main__":
    main()
