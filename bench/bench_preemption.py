"""Completed steps that a preemption costs, once the run has resumed.

    .venv/bin/python bench/bench_preemption.py [--rounds 5] [--steps 400] [--every 100]

Each round starts `python train.py` (the default example: an MLP, 2 CPU workers, gloo;
one record per step in metrics.jsonl, a periodic checkpoint every --every steps), sends
it a signal once it has logged a step drawn at random, lets it end, and runs the same
command again, which resumes. Steps lost = the steps the run had completed when it
stopped - the steps the resumed run did not redo (its first new step - 1).

* SIGUSR1: what Slurm sends before a time limit or a requeue (`--signal=USR1@...`): the
  toolkit saves at the next step boundary and exits.
* SIGKILL at a step drawn the same way: nothing can be saved, the newest periodic
  checkpoint is what is left. The baseline: what a job with periodic checkpoints only
  loses (on average about every/2 steps).

Results are printed and written to bench/results/preemption.json.
"""

from __future__ import annotations

import argparse
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO, logged_steps, train_py, write_result  # noqa: E402


def one_round(folder: Path, sig: int, at: int, args) -> dict:
    run_dir = folder / f"run-{sig}-{at}"
    overrides = [
        f"train.steps={args.steps}",
        "train.log_every=1",
        "train.eval_every=0",
        f"checkpoint.every_steps={args.every}",
        f"hydra.run.dir={run_dir}",
    ]
    metrics = run_dir / "metrics.jsonl"
    proc = subprocess.Popen(
        train_py(*overrides), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    deadline = time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline:
        steps = logged_steps(metrics)
        if steps and steps[-1] >= at:
            proc.send_signal(sig)
            break
        time.sleep(0.002)
    out = proc.communicate(timeout=300)[0].decode()
    if proc.returncode == 0:
        raise RuntimeError(f"the run ended before step {at}: raise --steps")
    completed = max(logged_steps(metrics))
    resumed = subprocess.run(train_py(*overrides), cwd=REPO, capture_output=True, text=True)
    if resumed.returncode != 0:
        raise RuntimeError(f"the resumed run failed: {resumed.stderr[-2000:]}\n{out[-2000:]}")
    # The resumed run rewrites metrics.jsonl with the records up to its checkpoint, then
    # appends: the first step it ran is one after the checkpoint it loaded.
    found = re.search(r"resumed from .* \(step (\d+)\)", resumed.stdout)
    from_step = int(found.group(1)) if found else 0  # not resumed: everything redone
    shutil.rmtree(run_dir, ignore_errors=True)
    return {
        "signal": signal.Signals(sig).name,
        "at": at,
        "completed": completed,
        "resumed_from": from_step,
        "lost": completed - from_step,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--every", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    rounds = []
    with tempfile.TemporaryDirectory(prefix="jzk-bench-preempt-") as tmp:
        for r in range(args.rounds):
            at = rng.randint(args.steps // 10, args.steps * 9 // 10)
            # The same step for both signals; which goes first alternates.
            sigs = [signal.SIGUSR1, signal.SIGKILL]
            for sig in sigs if r % 2 == 0 else sigs[::-1]:
                rounds.append(one_round(Path(tmp), sig, at, args))
                print(rounds[-1], flush=True)
    usr1 = [x["lost"] for x in rounds if x["signal"] == "SIGUSR1"]
    kill = [x["lost"] for x in rounds if x["signal"] == "SIGKILL"]
    report = {
        "steps_lost_sigusr1": usr1,
        "steps_lost_sigkill": kill,
        "mean_lost_sigusr1": statistics.mean(usr1),
        "mean_lost_sigkill": statistics.mean(kill),
        "rounds": rounds,
        "setup": {
            "steps": args.steps,
            "every_steps": args.every,
            "rounds": args.rounds,
            "example": "default (mlp, synthetic data, 2 CPU workers)",
        },
    }
    path = write_result("preemption", report)
    print(
        f"steps lost per preemption: SIGUSR1 {report['mean_lost_sigusr1']:.1f} "
        f"(rounds {usr1}), SIGKILL {report['mean_lost_sigkill']:.1f} (rounds {kill}; "
        f"periodic checkpoints every {args.every} steps)"
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
