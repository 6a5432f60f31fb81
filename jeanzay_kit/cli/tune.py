"""`jzk tune [OVERRIDES]`: an Optuna study of tune.n_trials trials, tune.tasks at a time.

Each task asks the study for a trial, trains it as a normal run, tells its value and asks
again (jeanzay_kit/tune/task.py), so no task waits for the slowest trial of a batch. The
study lives in Optuna's storage under tune.dir; running the command again resumes it (a
trial that was stopped is taken again and resumes from its checkpoint) or extends it (a
larger tune.n_trials).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

from jeanzay_kit.cli.common import add_config_args
from jeanzay_kit.errors import JzkError
from jeanzay_kit.runtime.preemption import EXIT_PREEMPTED, StopRequest


def add(sub: argparse._SubParsersAction) -> None:
    tune = sub.add_parser(
        "tune",
        help="search: an Optuna study whose tasks each ask for a trial, train it, tell its value",
        description="Run an Optuna study over tune.params (Hydra's sweep syntax): tune.tasks "
        "tasks, each taking the next trial as soon as its last one ends, until the study has "
        "tune.n_trials. Every trial is a run of its own under tune.dir. docs/tuning.md",
    )
    add_config_args(tune)
    tune.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    stop = StopRequest()  # Ctrl-C or a signal: each task saves its trial and stops
    from jeanzay_kit.tune.setup import prepare_study
    from jeanzay_kit.tune.study import summary_lines

    study, prepared = prepare_study(args.overrides, args.config_dir)
    spec = prepared.spec
    if spec.cluster.is_slurm:
        raise JzkError(
            f"cluster={spec.cluster.name}: jzk tune runs its tasks on this machine for now. "
            "HINT: run it in an allocation (salloc, or an sbatch script) with cluster=local, "
            "or search with Hydra's sweeper through the launcher: hydra/sweeper=optuna "
            "(docs/tuning.md)"
        )
    tasks = spec.tune.tasks
    print(
        f"jzk tune: study {spec.tune.study_name!r} ({prepared.direction} "
        f"{spec.tune.objective}), {spec.tune.n_trials} trial(s), {tasks} task(s), "
        f"in {prepared.study_dir}",
        flush=True,
    )
    config = ["--config-dir", args.config_dir] if args.config_dir else []
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "jeanzay_kit.tune.task",
                "--task",
                f"task-{index}",
                *config,
                "--",
                *args.overrides,
            ]
        )
        for index in range(tasks)
    ]
    forwarded = 0
    while any(proc.poll() is None for proc in procs):
        if stop.signum and not forwarded:  # a signal to this process alone
            forwarded = stop.signum
            for proc in procs:
                if proc.poll() is None:
                    proc.send_signal(forwarded)
        time.sleep(0.2)
    stop.ignore_from_now()
    codes = [proc.returncode for proc in procs]
    for line in summary_lines(study, spec.tune.n_trials):
        print(f"jzk tune: {line}", flush=True)
    if EXIT_PREEMPTED in codes:
        print("jzk tune: stopped; run the same command again to resume the study", flush=True)
        return EXIT_PREEMPTED
    return max(codes, default=0)
