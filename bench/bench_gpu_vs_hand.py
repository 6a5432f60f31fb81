"""GPT-2 124M from a memory-mapped token file: the toolkit's loop against the project's
own hand-written loop (bench/gpt_hand_loop.py), same model, data path and settings.

    .venv/bin/python bench/bench_gpu_vs_hand.py [--rounds 3] [--steps 50] [--micro auto]
        [--global-batch 256] [--workers 8] [--profile 3]

Each round runs `train.py` (data=token_file, the GPU defaults: bf16, TF32, compile of the
model and its loss, fused AdamW, pinned memory, train.micro_batch_size=auto) and then the
hand-written loop with the micro-batch the toolkit chose, on one GPU, on a token file
written from the standard library's sources. The toolkit's steps are timed per logged
window (train.log_every), the hand loop's per step; the first --warmup steps (compile,
loader start) are left out of both. Figures: the toolkit's step time / the hand loop's
(target <= 1.02) and the toolkit's MFU (target >= 0.45 on an H100 or H200).
Results in bench/results/gpu_vs_hand.json. --cpu-smoke runs a tiny shape on the CPU to
check the plumbing (no figure means anything then).
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
        f"train.log_every={args.log_every}",
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
    # Windows of train.log_every steps; the first one (compile, loader start) is left out.
    timed = [r for r in records if r.get("step", 0) > args.warmup and "step_time_s" in r]
    chosen = run_dir / "micro_batch.json"
    said = (done.stdout + done.stderr).splitlines()
    return {
        "step_s": statistics.median(r["step_time_s"] for r in timed),
        "timed_steps": args.steps,
        "mfu": statistics.median(r["mfu"] for r in timed) if "mfu" in timed[0] else None,
        "tokens_per_s": statistics.median(r.get("tokens_per_s", 0) for r in timed),
        "data_wait_share": statistics.median(r.get("data_wait_share", 0) for r in timed),
        "compile_s": next((r["compile_s"] for r in records if "compile_s" in r), None),
        "micro_batch": json.loads(chosen.read_text()) if chosen.exists() else args.micro,
        "lines": [ln for ln in said if any(k in ln for k in NOTEWORTHY)][:12],
    }


# What the toolkit's run says that the benchmark keeps: the auto micro-batch's choice,
# the compile time, an input-bound note, the process group, warnings.
NOTEWORTHY = ("micro_batch_size=auto", "torch.compile", "input-bound", "nccl", "NCCL", "WARN")


def hand_round(args: argparse.Namespace, shape: dict, path: Path, micro: int) -> dict:
    cmd = [
        sys.executable,
        str(REPO / "bench" / "gpt_hand_loop.py"),
        f"--path={path}",
        *(f"--{k}={v}" for k, v in shape.items()),
        f"--global-batch={args.global_batch}",
        f"--micro={micro}",
        f"--steps={args.steps}",
        f"--warmup={args.warmup}",
        f"--workers={args.workers}",
        f"--profile={args.profile}",
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
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=10, help="untimed steps, compile included")
    parser.add_argument("--global-batch", type=int, default=256)
    parser.add_argument(
        "--micro",
        default="auto",
        help="a number, or auto (the hand loop then takes what the toolkit's run chose)",
    )
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--log-every", type=int, default=10)
    parser.add_argument("--profile", type=int, default=0, help="hand loop: steps profiled")
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
            chosen = ours["micro_batch"]
            micro = chosen["micro_batch_size"] if isinstance(chosen, dict) else int(chosen)
            hand = hand_round(args, shape, path, micro)
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
            print(json.dumps({"round": r, "toolkit": ours, "hand": hand}), flush=True)
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
