"""Submit planned job arrays with submitit and write the sweep's manifest. An edge module.

The Hydra launcher (hydra_plugins/jeanzay_launcher) builds the SweepPoints; the plan
(which points share an array) comes from launch/arrays.py.
"""

from __future__ import annotations

import datetime
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jeanzay_kit.errors import LaunchError
from jeanzay_kit.launch.arrays import ArrayPlan
from jeanzay_kit.launch.manifest import write_manifest
from jeanzay_kit.rundir.run_directory import RunDir


@dataclass(frozen=True)
class TaskByName:
    """A task-side function named by its import path ("module:function"), resolved
    where submitit calls it, on the node, as Hydra's `_target_` names a class: the
    submit side hands submitit the function each task runs without importing node/
    (submitit pickles this object, a name)."""

    target: str

    def __call__(self, *args: Any) -> Any:
        import pkgutil

        return pkgutil.resolve_name(self.target)(*args)


# What each task of a sweep of the toolkit's trainer runs: run_training(config, run_dir).
RUN_TRAINING = TaskByName("jeanzay_kit.node.task:run_training")


def submit_arrays(
    plans: Sequence[ArrayPlan],
    submitit_folder: str,
    sweep_dir: Path,
    earlier: Sequence[dict[str, Any]] = (),
    app_task: Any = None,
) -> list[tuple[dict[str, Any], Any]]:
    """One sbatch call per plan. Returns (manifest record, submitit job) per run, in sweep
    order. earlier: records of the sweep's previous batches, kept in the manifest.
    app_task: your Hydra app's AppTask (node/app_task.py), called on every task with
    the point's overrides, number and run directory; None: the toolkit's trainer."""
    import submitit  # lazy: validating and planning a sweep does not need it

    folder = RunDir(sweep_dir)  # its manifest.jsonl

    records: list[dict[str, Any]] = []
    submitted_jobs: list[tuple[dict[str, Any], Any]] = []
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    for plan in plans:
        executor = _executor(submitit, plan, submitit_folder, app_task is not None)
        try:
            submitted = executor.map_array(*_calls(plan, app_task))
        except Exception as err:  # submitit raises plain exceptions with sbatch's stderr
            # Record what is already queued before reporting the failure.
            if records:
                write_manifest(folder, [*earlier, *sorted(records, key=lambda r: r["num"])])
            done = ", ".join(r["job_id"] for r in records) or "none"
            raise LaunchError(
                f"sbatch refused the array of {len(plan.points)} run(s): {err}. Already "
                f"submitted: {done} (see {folder.manifest})"
            ) from err
        for point, job in zip(plan.points, submitted, strict=True):
            record = {
                "job_id": job.job_id,
                "array_job_id": job.job_id.split("_")[0],
                "array_index": int(job.job_id.split("_")[1]) if "_" in job.job_id else None,
                "num": point.num,
                "overrides": list(point.overrides),
                "run_dir": point.run_dir,
                "log": str(job.paths.stdout),
                "cluster": point.spec.cluster.name,
                "submitted_at": now,
            }
            records.append(record)
            submitted_jobs.append((record, job))
    submitted_jobs.sort(key=lambda pair: pair[0]["num"])
    write_manifest(folder, [*earlier, *(record for record, _ in submitted_jobs)])
    return submitted_jobs


def _executor(submitit: Any, plan: ArrayPlan, folder: str, app: bool) -> Any:
    # An app's time-limit requeues are counted by submitit (max_num_timeout); the
    # toolkit's trainer requeues itself on its own signal, submitit's count unused.
    timeouts = {"max_num_timeout": plan.max_num_timeout} if app else {}
    executor = submitit.SlurmExecutor(folder=folder, python=plan.python, **timeouts)
    executor.update_parameters(**plan.parameters)
    return executor


def _calls(plan: ArrayPlan, app_task: Any) -> tuple[Any, ...]:
    """map_array's function and its argument lists, one entry per point."""
    if app_task is not None:
        return (
            app_task,
            [list(p.overrides) for p in plan.points],
            [p.num for p in plan.points],
            [p.run_dir for p in plan.points],
        )
    return (
        RUN_TRAINING,
        [dict(p.spec.config) for p in plan.points],
        [p.run_dir for p in plan.points],
    )


def wait_for(jobs: Sequence[Any], poll_seconds: float) -> list[tuple[str, Any]]:
    """Block until every job ends; ("COMPLETED", result) or (state, error text) per job.

    A requeued job goes back to PENDING and is waited for again: it has not ended."""
    while not all(job.done() for job in jobs):
        time.sleep(poll_seconds)
    outcomes = []
    for job in jobs:
        try:
            # One result per task (rank); rank 0 speaks for the run.
            outcomes.append(("COMPLETED", job.results()[0]))
        except Exception as err:  # submitit re-raises the task's failure
            print(f"job {job.job_id} failed: {err}", file=sys.stderr)
            outcomes.append((job.state, str(err)))
    return outcomes
