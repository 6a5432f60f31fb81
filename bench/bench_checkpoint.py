"""Checkpoint costs, each as a ratio against a baseline measured in the same run.

    .venv/bin/python bench/bench_checkpoint.py [--hidden 2048] [--depth 6] [--dir DIR]

1. write throughput: bytes of a sealed checkpoint (DCP write of the raw tensor bytes,
   checksum of every file on the way, fsync, rename, manifest) per second of
   Checkpointer.save / `dd oflag=direct` writing as many bytes to the same filesystem,
   run right before each save (medians of the rounds).         target >= 0.9
2. async blocking: how long the training thread is held up by an asynchronous save (the
   save call, plus the wait for the staging copy before the next optimizer step)
   / time of the same save with async off.                      target <= 0.10
   Also reported: how much longer the step after the save takes than one without
   (background copying and writing share the cores with training).
3. resume to first step: `python train.py` wall time until its first logged step when it
   resumes from a checkpoint / the same for a fresh start, started right before it
   (median of the per-round ratios: start-up time here drifts by 2.6-4.5 s within
   minutes, and pairing the two runs cancels the drift).       target <= 1.10

One process (gloo, world size 1), an MLP of depth x hidden^2 weights with AdamW state;
a training step is forward + backward of --batch samples and the AdamW update.
Results are printed and written to bench/results/checkpoint.json.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from common import logged_steps, time_to_marker, train_py, write_result  # noqa: E402

WARMUP_SAVES = 2


def dd_throughput(folder: Path, nbytes: int) -> float:
    """Bytes/s of dd writing nbytes with O_DIRECT (page cache bypassed) and fsync."""
    target = folder / "dd.bin"
    block = 4 << 20
    count = max(1, nbytes // block)
    t0 = time.perf_counter()
    subprocess.run(
        [
            "dd",
            "if=/dev/zero",
            f"of={target}",
            f"bs={block}",
            f"count={count}",
            "oflag=direct",
            "conv=fsync",
        ],
        check=True,
        capture_output=True,
    )
    elapsed = time.perf_counter() - t0
    target.unlink()
    return count * block / elapsed


def save_timings(folder: Path, hidden: int, depth: int, rounds: int, batch: int) -> dict:
    import torch
    import torch.distributed as dist

    from jeanzay_kit.ckpt.checkpointer import Checkpointer
    from jeanzay_kit.ckpt.trainer_state import TrainerState
    from jeanzay_kit.examples.models import MLP
    from jeanzay_kit.node.local import free_port
    from jeanzay_kit.rundir.run_directory import RunDir

    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1
    )
    model = MLP(in_dim=hidden, hidden=hidden, depth=depth, out_dim=hidden)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = torch.randn(batch, hidden)

    def train_step(ck=None) -> None:
        model(data).square().mean().backward()
        if ck is not None:
            ck.before_update()  # as the training loop does
        opt.step()
        opt.zero_grad(set_to_none=True)

    train_step()  # optimizer state exists: exp_avg and exp_avg_sq, twice the weights again
    trainer = TrainerState(1, 0, {}, None, None)
    state_bytes = sum(t.nbytes for t in model.state_dict().values()) + sum(
        t.nbytes for s in opt.state.values() for t in s.values() if torch.is_tensor(t)
    )
    out: dict = {"sync_s": [], "bytes": 0, "step_s": [], "dd_Bps": []}
    out |= {"async_block_s": [], "async_call_s": [], "async_slowdown_s": []}
    for use_async in (False, True):
        run_dir = folder / ("async" if use_async else "sync")
        ck = Checkpointer(
            RunDir(run_dir),
            model,
            opt,
            rank=0,
            world={"mode": "bench"},
            config={"bench": True},
            device=torch.device("cpu"),
            keep_last=1,
            use_async=use_async,
            log=lambda _m: None,
        )
        # Warm-up saves, not counted: a run saves many times, and the first saves of a
        # process pay once for what later ones reuse (DCP's planner, the writer threads'
        # first buffers, new files' first blocks): 0.46 and 0.55 s against 0.15 s later.
        for w in range(WARMUP_SAVES):
            ck.save(w + 1, trainer)
            ck.wait()
        for r in range(WARMUP_SAVES, WARMUP_SAVES + rounds):
            if use_async:
                # A step without a save, then a save and the step after it.
                t0 = time.perf_counter()
                train_step(ck)
                plain = time.perf_counter() - t0
                t0 = time.perf_counter()
                ck.save(r + 1, trainer)
                call = ck.last_blocking_s
                train_step(ck)
                out["async_slowdown_s"].append(time.perf_counter() - t0 - plain)
                out["async_block_s"].append(ck.last_blocking_s)  # the call + the wait
                out["async_call_s"].append(call)
                out["step_s"].append(plain)
                ck.wait()
            else:
                # dd right before each save: this machine's disk speed drifts (1200 to
                # 2200 MB/s within an hour), so the two are measured in turns.
                out["dd_Bps"].append(dd_throughput(folder, state_bytes))
                ck.save(r + 1, trainer)
                out["sync_s"].append(ck.last_blocking_s)
                # Saves are many steps apart in training: the checkpoint dropped by
                # retention is deleted (in the background) before the next save.
                ck.wait()
        ck.close()
        manifest = ck.store.manifest(WARMUP_SAVES + rounds)
        out["bytes"] = manifest.total_bytes
        shutil.rmtree(run_dir)
    dist.destroy_process_group()
    return out


def first_step_time(run_dir: Path, overrides: list[str]) -> float:
    """Seconds from starting train.py until metrics.jsonl logs a step past those it held
    (a resumed run rewrites the file with the kept records, then appends)."""
    metrics = run_dir / "metrics.jsonl"
    held = max(logged_steps(metrics), default=0)
    argv = train_py(*overrides, f"hydra.run.dir={run_dir}")
    return time_to_marker(argv, lambda: max(logged_steps(metrics), default=0) > held)


def resume_timings(folder: Path, hidden: int, depth: int, rounds: int) -> dict:
    common = [
        "resources.gpus_per_node=1",
        f"model.hidden={hidden}",
        f"model.depth={depth}",
        "train.log_every=1",
        "train.eval_every=0",
        "train.steps=1000000",
        "checkpoint.every_steps=0",
    ]
    seed_dir = folder / "seed"
    # A run that saved one checkpoint at step 2 (train.steps=2 ends with a save).
    subprocess.run(
        [sys.executable, "train.py", *common[:-2], "train.steps=2", f"hydra.run.dir={seed_dir}"],
        cwd=REPO,
        check=True,
        capture_output=True,
    )
    fresh, resumed = [], []
    for r in range(rounds):
        run_dir = folder / f"fresh-{r}"
        fresh.append(first_step_time(run_dir, [*common, "resume=never"]))
        shutil.rmtree(run_dir)
        res_dir = folder / f"res-{r}"
        shutil.copytree(seed_dir, res_dir)
        (res_dir / "model_final.sha256").unlink(missing_ok=True)
        resumed.append(first_step_time(res_dir, [*common, "checkpoint.allow_config_change=true"]))
        shutil.rmtree(res_dir)
    return {"fresh_s": fresh, "resumed_s": resumed}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--depth", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=64, help="samples per training step")
    parser.add_argument(
        "--resume-rounds",
        type=int,
        default=11,
        help="paired fresh/resumed starts (each start varies by +-20 %% on a shared machine)",
    )
    parser.add_argument("--dir", default=None, help="a folder on the filesystem to measure")
    args = parser.parse_args()
    base = Path(args.dir) if args.dir else REPO / "bench" / "results"
    base.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=base) as tmp:
        folder = Path(tmp)
        saves = save_timings(folder, args.hidden, args.depth, args.rounds, args.batch)
        resume = resume_timings(folder, args.hidden // 4, args.depth, args.resume_rounds)
    sync_s = statistics.median(saves["sync_s"])
    block_s = statistics.median(saves["async_block_s"])
    ckpt_bps = saves["bytes"] / sync_s
    dd_bps = statistics.median(saves["dd_Bps"])
    fresh, resumed = statistics.median(resume["fresh_s"]), statistics.median(resume["resumed_s"])
    report = {
        "checkpoint_bytes": saves["bytes"],
        "write": {
            "checkpoint_MBps": ckpt_bps / 1e6,
            "dd_direct_MBps": dd_bps / 1e6,
            # Paired: each save against the dd run right before it (bench/run.py's figure).
            "ratio": statistics.median(
                saves["bytes"] / s / d
                for s, d in zip(saves["sync_s"], saves["dd_Bps"], strict=True)
            ),
            "target": ">= 0.9",
        },
        "async": {
            "blocking_s": block_s,
            "save_call_s": statistics.median(saves["async_call_s"]),
            "step_without_save_s": statistics.median(saves["step_s"]),
            "step_slowdown_s": statistics.median(saves["async_slowdown_s"]),
            "sync_save_s": sync_s,
            "ratio": block_s / sync_s,
            "target": "<= 0.10",
        },
        "resume": {
            "resumed_first_step_s": resumed,
            "fresh_first_step_s": fresh,
            "ratio": statistics.median(
                b / a for a, b in zip(resume["fresh_s"], resume["resumed_s"], strict=True)
            ),
            "ratio_of_medians": resumed / fresh,
            "target": "<= 1.10",
        },
        "raw": {**saves, **resume},
        "setup": {
            "hidden": args.hidden,
            "depth": args.depth,
            "rounds": args.rounds,
            "resume_rounds": args.resume_rounds,
            "batch": args.batch,
            "filesystem_dir": str(base),
            "cpus": os.cpu_count(),
        },
    }
    out = write_result("checkpoint", report)
    w, a, r = report["write"], report["async"], report["resume"]
    print(f"checkpoint of {saves['bytes'] / 1e6:.0f} MB")
    print(
        f"write     {w['checkpoint_MBps']:8.0f} MB/s vs dd O_DIRECT {w['dd_direct_MBps']:8.0f} "
        f"MB/s  ratio {w['ratio']:.2f} (target >= 0.9)"
    )
    print(
        f"async     blocks {a['blocking_s'] * 1e3:7.0f} ms vs sync save "
        f"{a['sync_save_s'] * 1e3:7.0f} ms  ratio {a['ratio']:.3f} (target <= 0.10)"
    )
    print(
        f"          (save call {a['save_call_s'] * 1e3:.0f} ms + wait for the staging copy; "
        f"the step after the save took {a['step_slowdown_s'] * 1e3:.0f} ms longer than one "
        f"without ({a['step_without_save_s'] * 1e3:.0f} ms): background writing shares the "
        f"{os.cpu_count()} cores)"
    )
    print(
        f"resume    first step after {r['resumed_first_step_s']:.2f} s vs fresh "
        f"{r['fresh_first_step_s']:.2f} s (medians)  ratio {r['ratio']:.3f} (median of the "
        f"paired rounds; target <= 1.10)"
    )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
