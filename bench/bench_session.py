"""Your own loop or script through the toolkit, against the same thing without it.

    .venv/bin/python bench/bench_session.py [--rounds 6] [--steps 80] [--start-rounds 5]

Two ratios, each the median over rounds:

* session_vs_hand: the mean step time of a loop written with the session API (s.wrap,
  s.sampler, s.should_stop every step, s.log every 10 steps, heartbeats and the
  watchdog running) / the same hand-written DDP loop (DistributedSampler, DataLoader,
  AdamW, a loss all-reduce every 10 steps). One torchrun launch of 2 CPU workers (gloo)
  runs both in lockstep, a hand-written step before each session step, a session per
  round (bench/session_loops.py); a twin ratio of CPU time per step, summed over the
  ranks. Target <= 1.02.
* script_ttfs_vs_torchrun: time to first step of bench/minimal_ddp.py started as a script
  task (`jzk train job.entry=bench/minimal_ddp.py`, 2 local workers) / the same script
  under a bare `torchrun --standalone --nproc_per_node=2`. Target <= 1.10.

Results are printed and written to bench/results/session.json.
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

from bench_startup import bare  # noqa: E402  (the same bare torchrun start)
from common import REPO, paired, time_to_marker, train_py, write_result  # noqa: E402

TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]


def step_times(steps: int, rounds: int) -> dict[str, list[float]]:
    with tempfile.TemporaryDirectory(prefix="jzk-bench-session-") as tmp:
        out = Path(tmp) / "times.json"
        argv = [*TORCHRUN, str(REPO / "bench" / "session_loops.py"), str(out)]
        argv += ["--steps", str(steps), "--rounds", str(rounds)]
        subprocess.run(argv, cwd=tmp, check=True, stdout=subprocess.DEVNULL)
        return json.loads(out.read_text())


def script_task_start(folder: Path) -> float:
    marker = folder / "task-first-step"
    argv = train_py(
        f"job.entry={REPO / 'bench' / 'minimal_ddp.py'}",
        f"job.args=[{marker}]",
        "resources.gpus_per_node=2",
        f"job.run_dir={folder / 'run'}",
    )
    return time_to_marker(argv, marker.exists, cwd=folder)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--start-rounds", type=int, default=5)
    args = parser.parse_args()

    times = step_times(args.steps, args.rounds)
    step_ratios = [s / h for s, h in zip(times["session"], times["hand"], strict=True)]
    # CPU time per step of both ranks (issue 59 point 4): a busy neighbour moves it less.
    cpu = paired(times["session_cpu"], times["hand_cpu"])
    session_ms = statistics.median(times["session"]) * 1e3
    hand_ms = statistics.median(times["hand"]) * 1e3
    print(
        f"step time: session {session_ms:.1f} ms, hand {hand_ms:.1f} ms, "
        f"ratio {statistics.median(step_ratios):.3f}; CPU per step ratio "
        f"{cpu['ratio_median']:.3f}, 95 % CI {cpu['ratio_ci'][0]:.3f}-{cpu['ratio_ci'][1]:.3f}"
    )

    task_s, bare_s = [], []
    for r in range(args.start_rounds):
        with tempfile.TemporaryDirectory(prefix="jzk-bench-ttfs-") as tmp:
            for side in ("task", "bare") if r % 2 == 0 else ("bare", "task"):
                if side == "task":
                    task_s.append(script_task_start(Path(tmp)))
                else:
                    bare_s.append(bare(Path(tmp)))
        print(f"round {r}: script task {task_s[-1]:.2f} s, bare torchrun {bare_s[-1]:.2f} s")
    start_ratios = [a / b for a, b in zip(task_s, bare_s, strict=True)]

    report = {
        "session_step_s": times["session"],
        "hand_step_s": times["hand"],
        "step_ratios": step_ratios,
        "step_ratio_median": statistics.median(step_ratios),
        "step_ratio_ci": paired(times["session"], times["hand"])["ratio_ci"],
        "session_cpu_s": times["session_cpu"],
        "hand_cpu_s": times["hand_cpu"],
        "cpu": cpu,
        "script_task_s": task_s,
        "bare_torchrun_s": bare_s,
        "start_ratios": start_ratios,
        "start_ratio_median": statistics.median(start_ratios),
        "setup": {
            "workers": 2,
            "rounds": args.rounds,
            "steps": args.steps,
            "start_rounds": args.start_rounds,
            "model": "MLP 256-1024x4-10, batch 32 per rank, AdamW, gloo, CPU",
        },
    }
    path = write_result("session", report)
    print(
        f"time to first step: script task {statistics.median(task_s):.2f} s, bare torchrun "
        f"{statistics.median(bare_s):.2f} s, ratio {report['start_ratio_median']:.3f}"
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
