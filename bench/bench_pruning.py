"""Pruning with the default warm-up against no pruning, on the same seeded study.

    .venv/bin/python bench/bench_pruning.py [--trials 10] [--steps 300]

Two local studies (`jzk tune`, one task, the default example) over the same seeded space
(the learning rate, log-uniform 1e-4..1e-1) with the same trials drawn in the same order
(tune.seed: one stream per trial number, tune/study.py): one with `tune.pruner=none`, one
with the defaults (median pruner, tune.prune_after_trials=5, tune.prune_warmup_steps a
quarter of train.steps), one with the former default (no warm-up: judged from the first
evaluation). Measured: the best value each study finds and the training
steps it spends (the sum over trials of the last step each trained). The claim (issue
45): the same or a better best value, for fewer steps. Results: bench/results/pruning.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import write_result  # noqa: E402

JZK = str(Path(sys.executable).parent / "jzk")
SPACE = 'tune.params={optim.lr: "tag(log, interval(0.0001, 0.1))"}'


def study(folder: Path, trials: int, steps: int, pruner: str, *extra: str) -> dict:
    name = pruner + ("-" + "-".join(e.split("=")[1] for e in extra) if extra else "")
    run = subprocess.run(
        [JZK, "tune", SPACE, f"tune.pruner={pruner}", *extra, f"tune.n_trials={trials}",
         "tune.seed=11",
         "tune.sampler=random", f"train.steps={steps}", f"eval.every_steps={steps // 10}",
         "train.log_every=10", "resources.gpus_per_node=1", f"tune.dir={folder / name}"],
        cwd=folder, capture_output=True, text=True, timeout=3600,
    )  # fmt: skip
    if run.returncode != 0:
        raise SystemExit(run.stderr[-2000:])
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    storage = JournalStorage(JournalFileBackend(str(folder / name / "study.journal")))
    found = optuna.load_study(study_name="jzk", storage=storage)
    spent = 0
    for t in found.trials:
        records = (folder / name / f"trial-{t.number}" / "metrics.jsonl").read_text().splitlines()
        spent += max(json.loads(r)["step"] for r in records)
    complete = [t for t in found.trials if t.state.name == "COMPLETE"]
    best = min(complete, key=lambda t: t.value)
    return {
        "best_value": best.value,
        "best_lr": best.params["optim.lr"],
        "steps_trained": spent,
        "pruned": sum(t.state.name == "PRUNED" for t in found.trials),
        "lrs": [round(t.params["optim.lr"], 6) for t in found.trials],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        none = study(Path(tmp), args.trials, args.steps, "none")
        median = study(Path(tmp), args.trials, args.steps, "median")
        # The former default: judged from the first evaluation.
        early = study(Path(tmp), args.trials, args.steps, "median", "tune.prune_warmup_steps=0")
    assert none["lrs"] == median["lrs"] == early["lrs"], "the studies drew different trials"
    report = {
        "trials": args.trials,
        "steps": args.steps,
        "no_pruning": none,
        "median_default_warmup": median,
        "median_no_warmup": early,
        "steps_saved": 1 - median["steps_trained"] / none["steps_trained"],
        "holds": median["best_value"] <= none["best_value"]
        and median["steps_trained"] < none["steps_trained"],
    }
    for name in ("no_pruning", "median_default_warmup", "median_no_warmup"):
        r = report[name]
        print(f"{name:24s} best {r['best_value']:.5f} (lr {r['best_lr']:.2e}), "
              f"{r['steps_trained']} steps, {r['pruned']} pruned")  # fmt: skip
    print(
        f"steps saved: {report['steps_saved']:.0%}; same or better best for less: {report['holds']}"
    )
    write_result("pruning", report)


if __name__ == "__main__":
    main()
