"""The node entry point: wires the rooms together. train.py calls `main`.

Reads the environment once (passed in as a mapping), derives the RankInfo, validates the
config into a JobSpec, then either trains in this process (a Slurm/torchrun task, or a
single local worker) or starts the local worker processes (cluster=local).
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from jeanzay_kit import report
from jeanzay_kit.config.spec import JobSpec, build_job_spec
from jeanzay_kit.distributed.devices import local_gpu_count, nvidia_driver_present
from jeanzay_kit.distributed.ranks import launched_by, rank_info_from_env
from jeanzay_kit.ending.codes import Exit
from jeanzay_kit.ending.endings import recorded_outcome
from jeanzay_kit.ending.preemption import StopRequest
from jeanzay_kit.errors import JzkError
from jeanzay_kit.rundir.lease import held, refuse_if_held
from jeanzay_kit.rundir.run_directory import RunDir
from jeanzay_kit.script.entry import check_entry, script_command
from jeanzay_kit.train.directions import check_directions


def check_torch(env: Mapping[str, str]) -> None:
    """Refuse a torch older than the code needs, before it fails somewhere deep inside;
    say it in one line when it is newer than the range the toolkit was tested with (it
    may work), once per start: by this process outside a job step, by rank 0 in one.

    Reads the installed distribution's version (no torch import); a torch without
    package metadata (a site build put on PYTHONPATH) is imported to ask it."""
    from importlib import metadata

    from jeanzay_kit.torch_version import torch_too_new, torch_too_old

    try:
        dist = metadata.distribution("torch")
        version, where = dist.version, str(dist.locate_file(""))
    except metadata.PackageNotFoundError:
        import torch

        version, where = torch.__version__, str(Path(torch.__file__).parent)
    problem = torch_too_old(version, where)
    if problem:
        raise JzkError(problem)
    warning = torch_too_new(version)
    if warning and (launched_by(env) is None or rank_info_from_env(env).rank == 0):
        _warn_once(f"{report.TRAIN}: warning: {warning}")


@functools.cache
def _warn_once(line: str) -> None:
    """A sweep's points run main in one process (Hydra's basic launcher): said once."""
    print(line, file=sys.stderr, flush=True)


def check_data_paths(data: Mapping[str, Any]) -> None:
    """Every path the data node names exists and can be read (before any worker starts)."""
    import os

    from jeanzay_kit.config.data_paths import path_values

    for key, value in path_values(data):
        path = Path(value)
        if not path.exists():
            problem = "does not exist"
        elif not os.access(path, os.R_OK):
            problem = "cannot be read by this user"
        else:
            continue
        raise JzkError(
            f"{key}={value} {problem} (seen from {os.uname().nodename}, in {Path.cwd()}). "
            f"HINT: set {key} to the dataset's path; relative paths are relative to "
            "job.workdir on a cluster, to where you run train.py here"
        )


def _run_script(spec: Any, env: Mapping[str, str], run_dir: RunDir, stop: StopRequest) -> int:
    """job.entry is the user's own command: run it as this task (`srun jzk train ...`, a
    sweep's task; Slurm signals the whole task, the command too), or start
    resources.gpus_per_node processes of it here (node/script_task.py)."""
    import sys

    from jeanzay_kit.node import script_task

    if launched_by(env) is not None:
        script = script_command(spec)
        return script_task.run_task(
            sys.executable,
            script,
            env,
            run_dir,
            watching=spec.script_watch,
            settings=script_task.job_settings(spec),
            max_restarts=spec.preemption.max_restarts,
        )
    code = script_task.run_here(spec, run_dir, env, sys.executable, stop)
    stop.ignore_from_now()  # the processes are gone: nothing left to stop
    return code


def refuse_before_writing(spec: JobSpec, run_dir: RunDir, env: Mapping[str, str]) -> None:
    """Every refusal the config and the run directory's files decide, made before the
    lease is taken and anything is written there (Hydra's record, the lease's own
    record, provenance): a refused command leaves the run it names as it was, so `jzk
    status`, `jzk report` and the plots' legends still show the command that trained it
    (issue 65). Reads only, no torch: a refusal costs well under a second.

    Every process of a job step makes it, not only the lease holder: they read the same
    files, so they refuse together instead of some starting alone. The writers check
    again under the lease (the workers' resume, the script task's claim of the run
    directory): this one is the early answer, not the only guard."""
    if spec.job.runs_script:
        from jeanzay_kit.script.script_files import claim_run_dir

        check_entry(spec.job.entry, Path.cwd())
        # Another command's run directory (command.json): checked here, claimed later.
        claim_run_dir(run_dir, script_command(spec), write=False)
        return
    from jeanzay_kit.ckpt.kept import refuse_stale
    from jeanzay_kit.ckpt.store import check_resume_early

    check_data_paths(spec.data)
    check_directions(spec)  # a metric that cannot say which way is better
    # Checkpoints of a removed run directory, left on checkpoint.dir's tier.
    refuse_stale(spec.checkpoint.dir, run_dir, env)
    # A changed config meeting another experiment's checkpoints.
    ckpt = spec.checkpoint
    check_resume_early(
        run_dir,
        spec.config,
        spec.layout.checkpoint_world(),
        ckpt.resume,
        ckpt.allow_config_change,
    )


def _train_as_task(
    spec: JobSpec, env: Mapping[str, str], run_dir: RunDir, stop: StopRequest
) -> None:
    """This process is a task of srun or torchrun: it is one rank. In a sweep's point
    (a task submitit runs, with no restart step after its srun) a hang or a crash goes
    through the rendered script's restart rule (node/restart_job.py after_task_failure):
    requeued after progress, the task ends as stopped."""
    from jeanzay_kit.node.restart_job import after_task_failure, sweep_point_limit
    from jeanzay_kit.node.worker import run_worker

    info, start = rank_info_from_env(env), time.time()
    limit = sweep_point_limit(env, spec.preemption.max_restarts)
    once, decided = threading.Lock(), list[int]()

    def after(status: int) -> int:
        # Once per attempt: the watchdog's thread (a hang) and this one (a peer's error
        # raised meanwhile) would each spend a restart and requeue for one failure.
        with once:
            if not decided:
                decided.append(after_task_failure(info, status, run_dir, start, env, limit))
            return decided[0]

    end = env.get("SLURM_JOB_END_TIME")  # set by Slurm >= 23.02
    try:
        run_worker(
            spec,
            info,
            run_dir,
            visible_devices=env.get("CUDA_VISIBLE_DEVICES"),
            threads=task_threads(env, len(os.sched_getaffinity(0))),
            stop=stop,
            allocation_end=float(end) if end and end.isdigit() else None,
            on_hang=lambda code: os._exit(after(code)),
        )
    except Exception:  # said by the run (Run.fail); raised again, submitit records it
        if after(Exit.RAISED) != Exit.STOPPED:
            raise
        raise SystemExit(Exit.STOPPED) from None


def task_threads(env: Mapping[str, str], cpus: int) -> int:
    """CPU threads of a task's torch: OMP_NUM_THREADS where it is set (our scripts export
    the task's share; torchrun sets 1; 0 leaves it to torch), else the CPUs Slurm gave the
    task (SLURM_CPUS_PER_TASK), else those it may run on (`cpus`). Without it torch takes
    a thread per core of the node, and tasks sharing a node fight for them (measured:
    the jobs of Hydra's submitit launcher, which exports nothing, ran 10-50x slower per
    step than ours on the same nodes, bench/bench_tune.py)."""
    if env.get("OMP_NUM_THREADS"):
        return 0
    given = env.get("SLURM_CPUS_PER_TASK", "")
    return int(given) if given.isdigit() and int(given) > 0 else max(1, cpus)


def _train_here(
    spec: JobSpec, env: Mapping[str, str], run_dir: RunDir, cpu_count: int, stop: StopRequest
) -> int:
    """cluster=local: start the workers on this machine (main checked the resume)."""
    from jeanzay_kit.node.local import launch_local

    with recorded_outcome(run_dir) as outcome:
        outcome.code = launch_local(
            spec,
            run_dir,
            cpu_count=cpu_count,
            stop=stop,
            # No GPU can be used: the workers may be forked (node/local.py worker_context).
            cpu_only=spec.cluster.device == "cpu" or not nvidia_driver_present(),
        )
    stop.ignore_from_now()  # the workers are gone: nothing left to stop
    return outcome.code


def _outside_a_job(cfg: dict[str, Any], spec: JobSpec, env: Mapping[str, str]) -> int:
    """A Slurm profile's run outside a job step: a step of the allocation this shell is
    in (salloc), or refused."""
    from jeanzay_kit.node.allocation import allocation_nodes, run_as_step

    nodes = allocation_nodes(env)
    if nodes is not None:  # a salloc shell: the job is a step of this allocation
        return run_as_step(cfg, spec, env, nodes)
    # e.g. `python train.py cluster=jeanzay_h100` on a login node: never train there.
    raise JzkError(
        f"cluster={spec.cluster.name} is a Slurm profile, and this process is neither "
        "a task of a Slurm job step nor inside an allocation. HINT: submit it: "
        f"`jzk submit cluster={spec.cluster.name} ...` (or `python train.py -m "
        f"cluster={spec.cluster.name} ...`, a sweep of one); or allocate nodes and "
        f"run the same command inside: `salloc -N2 ...`, then `jzk train "
        f"cluster={spec.cluster.name} ...` runs as a step of the allocation; to train "
        "on this machine use cluster=local"
    )


def main(
    cfg: dict[str, Any],
    env: Mapping[str, str],
    run_dir: RunDir,
    cpu_count: int = 1,
    stop: StopRequest | None = None,
    on_held: Callable[[], None] | None = None,
) -> int:
    """Validate, then train here or start local workers. Returns the process exit code.

    on_held: called once this process holds the run directory (Hydra's record of the
    config: train_app.py): never by a process that is refused it, nor by a job's other
    ranks."""
    # From here on SIGUSR1/USR2/TERM are noted, not fatal (docs/preemption.md); train.py
    # installs the handler even earlier, before Hydra composes the config.
    stop = stop or StopRequest()
    try:
        check_torch(env)
        spec = build_job_spec(
            cfg, local_gpus=local_gpu_count(), local_cpus=cpu_count, interpreter=sys.executable
        )
        if spec.cluster.is_slurm and launched_by(env) is None:
            return _outside_a_job(cfg, spec, env)
        try:
            refuse_before_writing(spec, run_dir, env)
        except JzkError:
            # A live writer is said first: its ways out (wait, or stop it) come before
            # the refusal's own, whose resume=never would meet it next.
            refuse_if_held(run_dir, job_id=env.get("SLURM_JOB_ID", "-"))
            raise
        # One writer per run directory: refused here, before anything is written. It
        # is this process outside a job step, global rank 0 in one (its other ranks
        # write only under rank 0's lease).
        writes = launched_by(env) is None or rank_info_from_env(env).rank == 0
        what = f"script {spec.job.entry}" if spec.job.runs_script else "jzk train"
        with held(run_dir, env, what, writes=writes) as holder:
            if holder:
                # Hydra's record: by the holder alone (another rank would write it
                # before rank 0 knows whether the run directory is this job's).
                if on_held is not None:
                    on_held()
                from jeanzay_kit.project.provenance import record_start_provenance

                record_start_provenance(run_dir, env)  # the code this start runs
            if spec.job.runs_script:
                return _run_script(spec, env, run_dir, stop)
            if launched_by(env) is not None:
                _train_as_task(spec, env, run_dir, stop)
                return 0
            return _train_here(spec, env, run_dir, cpu_count, stop)
    except JzkError as err:
        report.error(report.TRAIN, err)
        return 2
