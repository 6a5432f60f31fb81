"""One task of a study: ask for a trial, train it as a normal run, tell its end, ask again.

`python -m jeanzay_kit.tune.task --task NAME [OVERRIDES]`, started by `jzk tune` (tune.tasks
of them). Each trial is a run of `python -m jeanzay_kit.train_app` with the trial's values
as overrides and a run directory of its own, `<tune.dir>/trial-N`: the same process tree, the
same checkpoints and the same `result.json` as any run. So a trial stopped by a signal saves
at a step boundary and ends with code 3; the task then leaves the trial RUNNING in the study
and ends with 3 too, and when the task starts again it takes that trial again and the run
resumes from its checkpoint. A trial that fails is told FAIL with its reason; the task goes
on with the next.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jeanzay_kit import report
from jeanzay_kit.ending.codes import Exit
from jeanzay_kit.ending.preemption import StopRequest
from jeanzay_kit.errors import JzkError
from jeanzay_kit.rundir.run_directory import RunDir

PROG = "jzk tune"


@dataclass(frozen=True)
class TrialEnd:
    """How a trial's run ended: stopped (to be resumed), pruned, or its value / failure
    reason."""

    stopped: bool
    values: tuple[float, ...] | None  # one per objective
    reason: str
    pruned: bool = False


# How often a running trial's metrics.jsonl is looked at (a stat; read when it grew).
REPORT_EVERY_S = 1.0


@dataclass
class TrialWatch:
    """A running trial seen from its task: each new value of the objective in its
    metrics.jsonl (each evaluation; the logged loss for train_loss) is reported to the
    study, and the study's pruner says whether the trial should stop there."""

    trial: Any  # optuna.trial.Trial
    objective: str | None  # None: several objectives, which Optuna does not prune
    metrics: Path
    reported: set[int]
    size: int = -1

    def should_prune(self) -> bool:
        from jeanzay_kit.runtime.metrics import read_records
        from jeanzay_kit.runtime.run_result import objective_points

        if self.objective is None:
            return False
        try:
            size = self.metrics.stat().st_size
        except OSError:
            return False
        if size == self.size:
            return False
        self.size = size
        new = False
        for step, value in objective_points(read_records(self.metrics), self.objective):
            if step not in self.reported:
                self.trial.report(value, step)
                self.reported.add(step)
                new = True
        return new and bool(self.trial.should_prune())


def stop_run(proc: subprocess.Popen, launcher: str, run_dir: RunDir) -> None:
    """Ask a trial's run to save and end without a requeue (SIGINT, docs/preemption.md):
    here the signal to its launcher, which passes it on; on Slurm the note its ranks read
    in the run directory (srun would not pass a single SIGINT on)."""
    if launcher == "local":
        proc.send_signal(signal.SIGINT)
        return
    run_dir.stop_note.write_text("INT\n")


def main(argv: Sequence[str] | None = None) -> int:
    # First thing: a signal is noted, and passed on to the trial's run (ending/preemption).
    stop = StopRequest()
    parser = argparse.ArgumentParser(prog="python -m jeanzay_kit.tune.task")
    parser.add_argument("--task", required=True, help="this task's name in the study")
    parser.add_argument(
        "--launcher",
        choices=("local", "srun"),
        default="local",
        help="how a trial's run starts: here (jzk train's local launcher), or as a job step "
        "of this Slurm task's allocation (srun)",
    )
    parser.add_argument("--stop-note", default=None, help="the batch shell's signal note")
    parser.add_argument("--config-dir", default=None)
    parser.add_argument("--config-name", default="config")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args(argv)
    if args.stop_note:  # a signal Slurm sent the batch shell alone (ending/signal_rules.py)
        stop.watch_note(Path(args.stop_note))
    config = Config(args.config_dir, args.config_name)
    # The environment is read here, once: where this task runs (for reap_orphans), and
    # when its allocation ends (Slurm >= 23.02 sets it).
    owner = owner_of(os.environ, socket.gethostname(), os.getpid())
    allocation = Allocation.of(os.environ)
    try:
        return run_task(
            args.task,
            args.overrides,
            config,
            args.launcher,
            stop,
            owner=owner,
            allocation=allocation,
        )
    except JzkError as err:
        report.error(PROG, err)
        return err.exit_code


@dataclass(frozen=True)
class Config:
    """Where the request's config is: a config tree (None: the project's and the
    package's), and its primary config's name (a Slurm task's is its frozen copy)."""

    dir: str | None = None
    name: str = "config"


def trial_command(
    launcher: str, python: str, config: Config, overrides: Sequence[str], run_dir: RunDir
) -> list[str]:
    """A trial's run: train_app with the trial's values and its own run directory; on
    Slurm a job step of the task's allocation, its tasks started by srun as any job's."""
    words = [*overrides, f"job.run_dir={run_dir}"]
    if launcher == "local":
        tree = ["--config-dir", config.dir] if config.dir else []
        return [sys.executable, "-m", "jeanzay_kit.train_app", *tree, *words]
    return [
        "srun",
        "--kill-on-bad-exit=1",  # one failed rank ends the step (slurm/sbatch.py)
        python,
        "-m",
        "jeanzay_kit.train_app",
        f"--config-dir={config.dir}",
        f"--config-name={config.name}",
        *words,
        # The frozen config has no hydra section to derive it from job.run_dir.
        f"hydra.run.dir={run_dir}",
    ]


def owner_of(env: Mapping[str, str], host: str, pid: int) -> str:
    """Where a task runs: its Slurm array task, or this process."""
    array, index = env.get("SLURM_ARRAY_JOB_ID"), env.get("SLURM_ARRAY_TASK_ID")
    if array and index:
        return f"slurm:{array}_{index}"
    return f"pid:{host}:{pid}"


def owner_gone(owner: str) -> bool:
    """Whether the task process of `owner` has ended (a requeued Slurm task has not)."""
    kind, _, where = owner.partition(":")
    if kind == "slurm":
        from jeanzay_kit.slurm.commands import job_alive

        return not job_alive(where)
    host, _, pid = where.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False  # another machine's process: not ours to judge
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def run_task(
    task: str,
    overrides: Sequence[str],
    config: Config,
    launcher: str,
    stop: StopRequest,
    *,
    owner: str = "",
    allocation: Allocation | None = None,
) -> int:
    from jeanzay_kit.tune.setup import prepare_study
    from jeanzay_kit.tune.space import describe_values, trial_overrides
    from jeanzay_kit.tune.study import finish_trial, next_trial, reap_orphans, trial_dir

    study, prepared = prepare_study(overrides, config.dir, task, config.name)
    # A trial started after Slurm's time-limit warning would never hear it and be killed
    # at the limit unsaved: a new one needs the lead, and a minute to start.
    needed = prepared.spec.preemption.lead_seconds + 60
    while not stop.signum:
        if allocation is not None and allocation.left(time.time()) < needed:
            return _out_of_time(study, prepared.n_trials, task, owner, allocation, needed)
        ticket = next_trial(
            study, prepared.space, prepared.n_trials, task, prepared.study_dir, owner
        )
        if ticket is None:
            # The study has its trials: one left RUNNING by a killed task never ends.
            for number in reap_orphans(study, task, prepared.study_dir, owner_gone):
                print(f"{PROG}: {task}: trial {number} FAILED: its task was killed", flush=True)
            return 0
        run_dir = RunDir(trial_dir(prepared.study_dir, ticket.number))
        how = "resumes" if ticket.resumed else "starts"
        script_args = prepared.script_args
        values = describe_values(ticket.values)
        print(f"{PROG}: {task} {how} trial {ticket.number}: {values}", flush=True)
        words = [*overrides, *trial_overrides(ticket.values, script_args)]
        command = trial_command(launcher, prepared.spec.job.python, config, words, run_dir)
        watch = TrialWatch(
            ticket.trial,
            None if prepared.settings.several else prepared.settings.objective,
            run_dir.metrics,
            set(ticket.reported),
        )
        objectives = prepared.settings.objectives
        end = run_trial(
            command, run_dir, prepared.study_dir, watch, launcher, stop, objectives=objectives
        )
        if end.stopped:
            print(f"{PROG}: {task}: trial {ticket.number} saved and stopped", flush=True)
            return Exit.STOPPED
        finish_trial(study, ticket, end.values, end.reason, pruned=end.pruned)
        if end.pruned:
            said = f"PRUNED at step {max(watch.reported)}"
        elif end.values is not None:
            said = "value " + ", ".join(f"{v:.6g}" for v in end.values)
        else:
            said = f"FAILED: {end.reason}"
        print(f"{PROG}: {task}: trial {ticket.number} {said}", flush=True)
    return Exit.STOPPED  # stopped between trials: nothing running, nothing lost


@dataclass(frozen=True)
class Allocation:
    """When this Slurm task's allocation started and ends (epoch seconds)."""

    start: float
    end: float

    @classmethod
    def of(cls, env: Mapping[str, str]) -> Allocation | None:
        """From Slurm's variables (Slurm >= 23.02 sets both); None elsewhere."""
        start, end = env.get("SLURM_JOB_START_TIME", ""), env.get("SLURM_JOB_END_TIME", "")
        if not (start.isdigit() and end.isdigit()):
            return None
        return cls(float(start), float(end))

    def left(self, now: float) -> float:
        return self.end - now


def requeue_for_more(counted: int, n_trials: int, allocation: Allocation, needed: float) -> bool:
    """Whether a task out of time requeues itself: while the study wants trials, and
    unless its whole allocation is too short for one (it would requeue for ever)."""
    if counted >= n_trials:
        return False
    if allocation.end - allocation.start < 2 * needed:
        raise JzkError(
            f"resources.time gives each task {allocation.end - allocation.start:.0f} s: too "
            f"short for a trial, which needs the {needed - 60:.0f} s of Slurm's warning lead "
            "and a minute to start. HINT: ask for a resources.time of several trials"
        )
    return True


def _out_of_time(
    study: Any, n_trials: int, task: str, owner: str, allocation: Allocation, needed: float
) -> int:
    """Too little of the allocation is left for a new trial: requeue this array task
    while the study still wants trials, else end. An allocation too short for any trial
    is said once, not requeued for ever."""
    from jeanzay_kit.tune.study import COUNTED

    counted = len(study.get_trials(deepcopy=False, states=COUNTED))
    if not requeue_for_more(counted, n_trials, allocation, needed):
        return 0
    from jeanzay_kit.ending.requeue import requeue_job

    job = owner.removeprefix("slurm:")
    requeue_job(job)
    print(f"{PROG}: {task}: too little time left for a new trial; requeued {job}", flush=True)
    return Exit.STOPPED


def run_trial(
    command: list[str],
    run_dir: RunDir,
    study_dir: Path,
    watch: TrialWatch,
    launcher: str,
    stop: StopRequest,
    *,
    objectives: Sequence[str],
) -> TrialEnd:
    """Run one trial's training to its end, reporting its values as it goes; its
    output goes to <tune.dir>/logs/trial-N.log."""

    logs = study_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"trial-{watch.trial.number}.log"
    pruning = False
    # When the run started and ended, as the task saw it: the hand-over between two trials
    # of a task (tell, ask, start) is the gap between them (bench/bench_tune.py).
    watch.trial.set_user_attr("jzk_run_started", time.time())
    with log.open("ab") as out:
        proc = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, preexec_fn=_end_with_this_task
        )
        forwarded, next_look = 0, 0.0
        while proc.poll() is None:
            # A signal to this task alone (one sent to the whole tree reached the run
            # too; a second copy is harmless: stopping is a flag) is passed on once.
            if stop.signum and not forwarded:
                forwarded = stop.signum
                proc.send_signal(forwarded)
            if not (pruning or forwarded) and time.monotonic() >= next_look:
                next_look = time.monotonic() + REPORT_EVERY_S
                if watch.should_prune():
                    pruning = True
                    stop_run(proc, launcher, run_dir)
            time.sleep(0.2)
    watch.trial.set_user_attr("jzk_run_ended", time.time())
    watch.should_prune()  # the values logged since the last look, the last one included
    code = proc.returncode
    if code == Exit.STOPPED and pruning and not forwarded:
        return TrialEnd(stopped=False, values=None, reason="", pruned=True)
    if code == Exit.STOPPED or (code != 0 and stop.signum):
        # A failure while this task was being ended (its job requeued by the trial's own
        # rank 0, preempted, cancelled) is the end of the task, not the trial's: Slurm
        # may kill the step before its ranks exit 3. Left RUNNING, the trial is taken
        # again by this task once requeued, or failed as an orphan if it never returns.
        return TrialEnd(stopped=True, values=None, reason="")
    if code != 0:
        ended = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
        return TrialEnd(False, None, f"the run ended with {ended}: {_last_error(log)} ({log})")
    return _result_end(run_dir, objectives)


def _result_end(run_dir: RunDir, objectives: Sequence[str]) -> TrialEnd:
    """A finished run's value for each objective, from its result.json (`value`, or
    `values` in the order of tune.objective), or why it has none."""
    from jeanzay_kit.runtime.run_result import missing_reason, read_result

    record = read_result(run_dir)
    if record is None:
        return TrialEnd(False, None, f"the run wrote no result.json in {run_dir}")
    several = record.get("values")
    said = several if isinstance(several, list) else [record.get("value")]
    if len(said) != len(objectives):
        return TrialEnd(
            False,
            None,
            f"{run_dir}/result.json has {len(said)} value(s) for the {len(objectives)} of "
            f"tune.objective ({', '.join(objectives)}): list them in `values`, in that order",
        )
    values: list[float] = []
    for name, value in zip(objectives, said, strict=True):
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            said_name = name if len(objectives) > 1 else record.get("objective") or name
            return TrialEnd(False, None, missing_reason(str(said_name), record))
        values.append(float(value))
    return TrialEnd(False, tuple(values), "")


def _end_with_this_task() -> None:
    """In a trial's run (before exec): SIGTERM when its task dies, even by SIGKILL, so a
    killed task leaves no run training for nobody (it saves and ends, as after a
    scancel). Linux's PR_SET_PDEATHSIG; elsewhere nothing."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None).prctl(pr_set_pdeathsig, int(signal.SIGTERM))


def _last_error(log: Path) -> str:
    """The last line of a run's log that says what went wrong."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return "no log"
    said = [line for line in lines if "error" in line.lower()]
    return (said or lines or ["no output"])[-1].strip()[:300]


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
