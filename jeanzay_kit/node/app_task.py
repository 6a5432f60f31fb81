"""Your Hydra app's task function on every Slurm task of a jeanzay-launched sweep. Edge.

`hydra/launcher=jeanzay` in your own `@hydra.main` app: submitit pickles an AppTask per
point and calls it on every task, as hydra-submitit-launcher pickles itself. The task:

* puts the project's frozen code first on sys.path (JZK_CODE_DIR, project/snapshot.py)
  and only then unpickles your function, Hydra's context and config (cloudpickle, at
  submission), so your modules are imported from the snapshot;
* composes the point's config as Hydra would (`load_sweep_config`), with its output
  directory fixed to the point's run directory (the same on every requeue: an app that
  saves there resumes);
* on global rank 0, holds the run directory's lease (lease.py) while your
  function runs, records the code's provenance, and writes what it returned as the
  point's result (result.json, runtime/run_result.py returned_record);
* returns Hydra's JobReturn (what hydra-submitit-launcher returns), or raises your
  function's error so the Slurm job ends FAILED and `jzk status` says so.

`checkpoint()` is submitit's requeue protocol: on its signal (SUBMITIT_PREEMPT_SIGNAL,
USR2, `signal_delay_s` before the time limit) submitit asks rank 0 for the call to make
again, then requeues the job: your function is called again from the start, in the
same run directory. A preempted job is requeued by Slurm and called again alike.

A function that runs the toolkit's `session` (docs/your-own-loop.md) gets the point's
run directory as JZK_RUN_DIR, as a script task does: its checkpoints, metrics and
heartbeats go there, and the lease stays with this task. The session's handler takes
the signals (one handler a signal and process), stops every rank at the same step
boundary, saves, and exits Exit.STOPPED; this task then hands the stop to submitit's
handler, which requeues the job as above, and the session resumes exactly.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

from jeanzay_kit.config.runtime_settings import job_signal
from jeanzay_kit.ending.codes import Exit
from jeanzay_kit.rundir.run_directory import RunDir

# The run directory of a task the toolkit started (distributed/script_env.py names it for
# script tasks): a session inside reads it (runtime/session_rules.py).
RUN_DIR_ENV = "JZK_RUN_DIR"


class AppTask:
    """One sweep's Hydra app: what each task calls with (overrides, num, run_dir)."""

    def __init__(self, payload: bytes) -> None:
        # cloudpickle of (hydra_context, config, task_function, singleton_state), taken
        # once at submission (pack): every point's pickle shares these bytes.
        self.payload = payload

    @staticmethod
    def pack(hydra_context: Any, config: Any, task_function: Any) -> AppTask:
        import cloudpickle
        from hydra.core.singleton import Singleton

        state = (hydra_context, config, task_function, Singleton.get_state())
        return AppTask(cloudpickle.dumps(state))

    def __call__(self, overrides: list[str], num: int, run_dir: str) -> Any:
        import submitit

        from jeanzay_kit.project.import_path import put_project_on_path

        env = dict(os.environ)  # read once, here
        put_project_on_path(env, Path.cwd())
        job_env = submitit.JobEnvironment()
        rank0 = job_env.global_rank == 0
        # submitit's handler of its time-limit signal, installed before this call: a
        # session inside replaces it, and hands its stop back to it (_run_again).
        signum, submitits_handler = _time_limit_handler(env)
        # A session inside writes in the point's run directory and leaves the lease and
        # the requeue to this task, as under a script task's wrapper (session_rules.py).
        os.environ[RUN_DIR_ENV] = run_dir
        folder = RunDir(Path(run_dir))
        lease = _take_run_dir(folder, env) if rank0 else None
        try:
            ret = self._run(overrides, num, run_dir, str(job_env.job_id))
            if rank0:
                _write_result(folder, ret)
        except SystemExit as stop:
            if stop.code != Exit.STOPPED:
                raise
            if lease is not None:
                lease.release()
                lease = None
            _run_again(rank0, signum, submitits_handler)
            raise
        finally:
            if lease is not None:
                lease.release()
        return _returned(ret)

    def _run(self, overrides: list[str], num: int, run_dir: str, job_id: str) -> Any:
        import pickle

        from hydra.core.singleton import Singleton
        from hydra.core.utils import run_job, setup_globals
        from omegaconf import open_dict, read_write

        hydra_context, config, task_function, state = pickle.loads(self.payload)
        Singleton.set_state(state)
        setup_globals()
        sweep_config = hydra_context.config_loader.load_sweep_config(config, list(overrides))
        with read_write(sweep_config.hydra), open_dict(sweep_config.hydra):
            sweep_config.hydra.job.id = job_id
            sweep_config.hydra.job.num = num
            # The output directory is the point's run directory, fixed at submission
            # (a subdir of ${now:...} would name another folder at every requeue).
            sweep_config.hydra.sweep.dir = str(Path(run_dir).parent)
            sweep_config.hydra.sweep.subdir = Path(run_dir).name
        return run_job(
            hydra_context=hydra_context,
            task_function=task_function,
            config=sweep_config,
            job_dir_key="hydra.sweep.dir",
            job_subdir_key="hydra.sweep.subdir",
        )

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        """submitit's requeue protocol: the same call, made again after the requeue."""
        import submitit

        return submitit.helpers.DelayedSubmission(self, *args, **kwargs)


def _time_limit_handler(env: dict[str, str]) -> tuple[int, Any]:
    """submitit's time-limit signal (SUBMITIT_PREEMPT_SIGNAL, USR2 by default) and the
    handler submitit installed for it before calling this task."""
    signum = int(signal.Signals[f"SIG{job_signal(env) or 'USR2'}"])
    return signum, signal.getsignal(signum)


def _run_again(rank0: bool, signum: int, submitits_handler: Any) -> None:
    """A session in your function stopped at a signal, saved at a step boundary on every
    rank and exited Exit.STOPPED ("run me again"): rank 0 hands the stop to submitit's
    own handler, which checkpoints this call (checkpoint below) and requeues the job, or
    ends it when `max_num_timeout` is spent, as with hydra-submitit-launcher. After a
    preemption (SIGTERM) Slurm requeues the job by itself; submitit's handler is called
    all the same (a second `scontrol requeue` of a pending job changes nothing)."""
    if rank0 and callable(submitits_handler):
        submitits_handler(signum, None)


def _take_run_dir(run_dir: RunDir, env: dict[str, str]) -> Any:
    from jeanzay_kit.distributed.ranks import array_id
    from jeanzay_kit.project.provenance import record_start_provenance
    from jeanzay_kit.rundir.lease import acquire_for
    from jeanzay_kit.runtime.run_result import clear_result
    from jeanzay_kit.script.script_files import record_attempt

    lease = acquire_for(run_dir, env, "hydra app (hydra/launcher=jeanzay)")
    clear_result(run_dir)  # a result of an earlier end no longer holds
    record_start_provenance(run_dir, env)
    # One line per start (preempted, requeued at the time limit): `jzk status` counts
    # them as a script's, whoever requeued the job.
    record_attempt(run_dir, time.time(), env.get("SLURM_JOB_ID"), array_id(env))
    return lease


def _write_result(run_dir: RunDir, ret: Any) -> None:
    from hydra.core.utils import JobStatus

    from jeanzay_kit.runtime.run_result import returned_record, write_result

    if ret.status == JobStatus.COMPLETED:
        write_result(run_dir, returned_record(ret._return_value))


def _returned(ret: Any) -> Any:
    """Hydra's JobReturn; your function's error raised as it is (the job fails)."""
    from hydra.core.utils import JobStatus

    if ret.status == JobStatus.FAILED:
        raise ret._return_value
    return ret
