"""`jzk tune [OVERRIDES]`: an Optuna study of tune.n_trials trials, tune.tasks at a time.

Each task asks the study for a trial, trains it as a normal run, tells its value and asks
again (jeanzay_kit/tune/task.py), so no task waits for the slowest trial of a batch. The
study lives in Optuna's storage under tune.dir; running the command again resumes it (a
trial that was stopped is taken again and resumes from its checkpoint) or extends it (a
larger tune.n_trials).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from jeanzay_kit.cli.check import add_network_args
from jeanzay_kit.cli.common import add_config_args
from jeanzay_kit.config.spec import JobSpec
from jeanzay_kit.ending.codes import Exit
from jeanzay_kit.ending.preemption import StopRequest
from jeanzay_kit.errors import JzkError


def add(sub: argparse._SubParsersAction) -> None:
    tune = sub.add_parser(
        "tune",
        help="search: an Optuna study whose tasks each ask for a trial, train it, tell its value",
        description="Run an Optuna study over tune.params (Hydra's sweep syntax): tune.tasks "
        "tasks, each taking the next trial as soon as its last one ends, until the study has "
        "tune.n_trials. Every trial is a run of its own under tune.dir. docs/tuning.md",
    )
    tune.add_argument(
        "--fail-stuck",
        action="store_true",
        help="tell FAIL every trial of the study left RUNNING by a task that is gone (or by "
        "no task of jzk), with its reason, then exit: nothing is trained",
    )
    add_network_args(tune)
    add_config_args(tune)
    tune.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from jeanzay_kit.extras import require

    require("optuna", "jzk tune")
    if getattr(args, "on", None):  # laptop mode: the study is created and run there
        from jeanzay_kit.cli.common import build_spec
        from jeanzay_kit.cli.remote import run_there

        return run_there(args, build_spec(args))
    stop = StopRequest()  # Ctrl-C or a signal: each task saves its trial and stops
    from jeanzay_kit.tune.setup import prepare_study
    from jeanzay_kit.tune.study import summary_lines

    study, prepared = prepare_study(args.overrides, args.config_dir)
    if args.fail_stuck:
        return fail_stuck(study, prepared.study_dir)
    spec = prepared.spec
    if spec.cluster.is_slurm:
        if not spec.cluster.compute_internet:  # every access found before the queue
            from jeanzay_kit.offline.check import network_check

            network_check(spec, args.overrides, args.config_dir, args.allow_network, args.budget)
        return submit_study(spec, prepared.study_dir, args.overrides)
    tasks = spec.tune.tasks
    print(
        f"jzk tune: study {spec.tune.study_name!r} ({prepared.direction} "
        f"{'/'.join(spec.tune.objectives)}), {spec.tune.n_trials} trial(s), {tasks} task(s), "
        f"in {prepared.study_dir}",
        flush=True,
    )
    codes = run_tasks_here(tasks, args.overrides, args.config_dir, stop)
    failed = [(i, c) for i, c in enumerate(codes) if c not in (0, Exit.STOPPED)]
    # A task killed after the others had ended left its trial RUNNING with nobody to tell
    # it; a task stopped by a signal (3) keeps its trial to resume it.
    from jeanzay_kit.tune.study import reap_orphans
    from jeanzay_kit.tune.task import owner_gone

    dead = {f"task-{index}" for index, _code in failed}
    reap_orphans(study, "", prepared.study_dir, owner_gone, only=dead)
    for line in summary_lines(study, spec.tune.n_trials):
        print(f"jzk tune: {line}", flush=True)
    for index, code in failed:
        how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
        print(f"jzk tune: task-{index} ended: {how}", file=sys.stderr, flush=True)
    if failed:
        return 1
    if Exit.STOPPED in codes:
        print("jzk tune: stopped; run the same command again to resume the study", flush=True)
        return Exit.STOPPED
    return 0


def fail_stuck(study: Any, study_dir: Path) -> int:
    """`jzk tune --fail-stuck`: the study's RUNNING trials that no live task holds, told
    FAIL with the reason (a live task's trial, or a requeued one waiting, is left)."""
    from jeanzay_kit.tune.study import reap_orphans
    from jeanzay_kit.tune.task import owner_gone

    told = reap_orphans(study, "", study_dir, owner_gone, ownerless=True)
    if told:
        print(f"jzk tune: trial(s) {', '.join(map(str, told))} told FAIL (their task is gone)")
    else:
        print("jzk tune: no stuck trial: every RUNNING trial's task is alive (or none runs)")
    return 0


def run_tasks_here(
    tasks: int, overrides: list[str], config_dir: str | None, stop: StopRequest
) -> list[int]:
    """Start the study's tasks as processes of this machine and wait for them, passing a
    signal that reached this process alone on to them; their exit codes."""
    config = ["--config-dir", config_dir] if config_dir else []
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
                *overrides,
            ]
        )
        for index in range(tasks)
    ]
    forwarded = 0
    while any(proc.poll() is None for proc in procs):
        if stop.signum and not forwarded:
            forwarded = stop.signum
            for proc in procs:
                if proc.poll() is None:
                    proc.send_signal(forwarded)
        time.sleep(0.2)
    stop.ignore_from_now()
    return [proc.returncode for proc in procs]


def submit_study(spec: JobSpec, study_dir: Path, overrides: list[str]) -> int:
    """One job array of tune.tasks tasks, each a task of the study (slurm/sbatch.py
    tune_step_lines): nothing stays on the login node."""
    from jeanzay_kit.cli.common import render, workdir_of
    from jeanzay_kit.launch.manifest import append_manifest, job_record
    from jeanzay_kit.rundir.run_directory import RunDir
    from jeanzay_kit.slurm.commands import sbatch

    if spec.layout.launcher != "srun":
        raise JzkError(
            "parallel.launcher=torchrun: jzk tune starts each trial's ranks with srun. "
            "HINT: use parallel.launcher=srun (the default), or Hydra's sweeper "
            "(hydra/sweeper=optuna, docs/tuning.md)"
        )
    tasks = spec.tune.tasks
    from jeanzay_kit.launch.allocation import check_request, request_hours

    # Every task to its time limit: what the study takes at most.
    check_request(spec, request_hours(spec, jobs=tasks))
    _check_storage(spec, study_dir)
    script = render(spec, overrides, array=f"0-{tasks - 1}", rerender="jzk tune", tune=True)
    path = study_dir / "tune.sbatch"
    path.write_text(script)
    workdir = workdir_of(spec)
    job_id = sbatch(str(path.resolve()), cwd=str(workdir))
    log = workdir / spec.job.log_dir / f"{spec.job.name}-{job_id}_<task>.out"
    study = RunDir(study_dir)  # the study's manifest.jsonl, as a run's
    append_manifest(study, job_record(job_id, overrides, study, (path, log), spec.cluster.name))
    print(
        f"submitted job array {job_id}: {tasks} task(s), each running trials of study "
        f"{spec.tune.study_name!r} until it has {spec.tune.n_trials}"
    )
    print(f"  script  {path}\n  logs    {log}\n  study   {study_dir}")
    print(f"  status: jzk status {study_dir}")
    return 0


def _check_storage(spec: JobSpec, study_dir: Path) -> None:
    """Every trial's run directory below the study's folder: its files and bytes, before
    the queue (launch/storage.py)."""
    from dataclasses import replace

    from jeanzay_kit.launch.request import workdir_of
    from jeanzay_kit.launch.storage import check_storage, request_of
    from jeanzay_kit.project.job_code import snapshot_footprint

    env = dict(os.environ)
    workdir = workdir_of(spec)
    snapshot = snapshot_footprint(spec, workdir)  # one for the study: its trials share it
    request = request_of(spec, workdir, env, runs=spec.tune.n_trials, snapshot=snapshot)
    check_storage(replace(request, run_dir=str(study_dir.resolve())), spec, env)
