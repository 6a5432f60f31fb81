"""The toolkit's GPU path on one GPU, as a user runs it: one command, a few minutes.

    bash bench/gpu_setup.sh && .venv/bin/python bench/gpu_check.py [--out DIR] [--only NAME]

Each check runs `jzk train` (the installed entry point) in a project folder of its own:
  readme      the README's job (`python train.py`): one worker per visible GPU, NCCL,
              precision=auto -> bf16
  two_on_one  resources.gpus_per_node=2 on one GPU: what a user with one GPU meets
  images_bf16 docs/examples/your_model (Dataset + CNN + CrossEntropyLoss, 2 loader
              workers, pinned memory, random augmentation, a validation set and an
              accuracy metric): straight, then cut by SIGUSR1 at step 10 and resumed; the
              two final digests (or, if they differ, the largest weight gap)
  images_fp16 the same with train.precision=fp16 (GradScaler state in the checkpoint)
  gpt2        bench/bench_gpu.py's GPT-2 124M (bf16, one GPU): tokens/s, MFU, data wait
  gpt2_memmap the same fed from a nanoGPT-format token file (np.memmap, pinned memory)
Writes DIR/gpu_check.json and one log per check (DIR: $OUT, else bench/results/gpu_check).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
JZK = str(Path(sys.executable).with_name("jzk"))
EXAMPLE = REPO / "docs" / "examples" / "your_model"
IMAGES = (
    "train.steps=40",
    "train.log_every=1",
    "checkpoint.every_steps=100",
    "data.size=20000",
    "+data.augment=true",  # random flips/noise/erasing drawn in the loader workers
    # A validation set of its own (101 samples: not a multiple of anything) and a metric.
    "eval.every_steps=20",
    "+eval.data._target_=userpkg.images.RandomImages",
    "+eval.data.size=101",
    "+eval.data.seed=1",
    "+eval.metrics.accuracy._target_=torchmetrics.classification.MulticlassAccuracy",
    "+eval.metrics.accuracy.num_classes=4",
)


def run(argv: list[str], cwd: Path, log: Path, timeout: float = 240) -> subprocess.CompletedProcess:
    t0 = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    with log.open("a") as handle:
        handle.write(
            f"$ {' '.join(argv)}  ({time.perf_counter() - t0:.1f} s, rc {done.returncode})\n"
        )
        handle.write(done.stdout + "\n--- stderr\n" + done.stderr + "\n")
    return done


def done_line(out: str) -> str | None:
    return next((ln for ln in out.splitlines() if ln.startswith("done:")), None)


def digest(out: str) -> str | None:
    line = done_line(out) or ""
    return line.split("model digest ")[1].split(",")[0] if "model digest " in line else None


def check_readme(work: Path, log: Path) -> dict:
    done = run([sys.executable, "train.py", f"job.run_dir={work}/readme"], REPO, log)
    checks = [
        ln for ln in done.stdout.splitlines() if ln.startswith(("check:", "device", "rank 0"))
    ]
    return {"ok": done.returncode == 0, "done": done_line(done.stdout), "lines": checks[:6]}


def check_two_on_one(work: Path, log: Path) -> dict:
    done = run([JZK, "train", "resources.gpus_per_node=2", "train.steps=5"], work, log)
    return {"rc": done.returncode, "stderr_tail": done.stderr.strip().splitlines()[-4:]}


def images_project(work: Path, name: str) -> Path:
    folder = work / name
    shutil.copytree(EXAMPLE, folder, ignore=shutil.ignore_patterns("outputs", "__pycache__"))
    return folder


def wait_for_step(folder: Path, name: str, step: int, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and proc.poll() is None:
        for metrics in (folder / "outputs").glob(f"{name}-*/metrics.jsonl"):
            lines = [json.loads(x) for x in metrics.read_text().splitlines() if '"loss"' in x]
            if lines and lines[-1]["step"] >= step:
                return
        time.sleep(0.05)


def weight_gap(a: Path, b: Path) -> float:
    import torch

    x = torch.load(a, weights_only=True, map_location="cpu")
    y = torch.load(b, weights_only=True, map_location="cpu")
    return max(float((x[k].float() - y[k].float()).abs().max()) for k in x)


def check_images(work: Path, log: Path, precision: str) -> dict:
    folder = images_project(work, f"images_{precision}")
    args = [JZK, "train", *IMAGES, f"train.precision={precision}"]
    straight = run([*args, "job.name=straight"], folder, log)
    proc = subprocess.Popen(
        [*args, "job.name=cut"],
        cwd=folder,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # signalled as Slurm does: the whole tree, workers too
    )
    wait_for_step(folder, "cut", 10, proc)
    os.killpg(proc.pid, signal.SIGUSR1)
    out, err = proc.communicate(timeout=180)
    with log.open("a") as handle:
        handle.write(f"$ cut (rc {proc.returncode})\n{out}\n--- stderr\n{err}\n")
    resumed = run([*args, "job.name=cut"], folder, log)
    result = {
        "ok": straight.returncode == 0 and proc.returncode == 3 and resumed.returncode == 0,
        "straight": done_line(straight.stdout),
        "cut": next((ln for ln in out.splitlines() if "saved step-" in ln), None),
        "resumed": done_line(resumed.stdout),
        "check": next((ln for ln in straight.stdout.splitlines() if ln.startswith("check:")), None),
        "eval": next((ln for ln in straight.stdout.splitlines() if "accuracy" in ln), None),
        "same_digest": digest(straight.stdout) == digest(resumed.stdout) is not None,
    }
    runs = {p.name.split("-")[0]: p for p in (folder / "outputs").glob("*-*")}
    if not result["same_digest"] and {"straight", "cut"} <= runs.keys():
        result["weight_gap"] = weight_gap(
            runs["straight"] / "model_final.pt", runs["cut"] / "model_final.pt"
        )
    return result


def check_gpt2(work: Path, log: Path, *overrides: str) -> dict:
    bench = [sys.executable, str(REPO / "bench" / "bench_gpu.py"), "--rounds", "1"]
    done = run([*bench, "--steps", "20", *overrides], REPO, log, timeout=400)
    return {"ok": done.returncode == 0, "tail": done.stdout.strip().splitlines()[-3:]}


def check_gpt2_memmap(work: Path, log: Path) -> dict:
    """The same model fed from a nanoGPT-format token file (np.memmap, random windows,
    pinned memory, loader workers): written here from the standard library's sources."""
    import sysconfig

    texts = sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))
    tokens = work / "stdlib.bin"
    wrote = run(
        [sys.executable, "-m", "jeanzay_kit.examples.tokens", str(tokens), *map(str, texts)],
        REPO,
        log,
    )
    if wrote.returncode != 0:
        return {"ok": False, "error": wrote.stderr[-500:]}
    return check_gpt2(work, log, "data=token_file", f"data.path={tokens}", "data.block_size=1024")


CHECKS: dict[str, Callable[[Path, Path], dict]] = {
    "readme": check_readme,
    "two_on_one": check_two_on_one,
    "images_bf16": lambda work, log: check_images(work, log, "bf16"),
    "images_fp16": lambda work, log: check_images(work, log, "fp16"),
    "gpt2": check_gpt2,
    "gpt2_memmap": check_gpt2_memmap,
}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    default_out = os.environ.get("OUT") or str(REPO / "bench" / "results" / "gpu_check")
    parser.add_argument("--out", default=default_out)
    parser.add_argument("--only", nargs="*", choices=sorted(CHECKS))
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    import torch

    report: dict = {"torch": torch.__version__, "device": None}
    if torch.cuda.is_available():
        report["device"] = torch.cuda.get_device_name(0)
    with tempfile.TemporaryDirectory(prefix="jzk-gpu-") as tmp:
        for name in args.only or CHECKS:
            t0 = time.perf_counter()
            try:
                report[name] = CHECKS[name](Path(tmp), out / f"{name}.log")
            except Exception as err:  # one broken check must not hide the others' figures
                report[name] = {"ok": False, "error": f"{type(err).__name__}: {err}"}
            report[name]["seconds"] = round(time.perf_counter() - t0, 1)
            print(name, json.dumps(report[name]), flush=True)
            (out / "gpu_check.json").write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
