"""What happens after a signalled run saved: requeue or not, and the exit code."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, replace

import pytest

from jeanzay_kit.config.compose import compose_config
from jeanzay_kit.config.runtime_settings import from_env, to_env
from jeanzay_kit.config.runtime_settings import from_spec as runtime_settings
from jeanzay_kit.config.spec import build_job_spec
from jeanzay_kit.distributed.ranks import RankInfo
from jeanzay_kit.distributed.script_env import SETTINGS_ENV
from jeanzay_kit.ending.requeue import after_stop_as_set


@dataclass
class Result:
    steps: int
    stopped_by: str


class FakeRunner:
    """Same method as CommandRunner; records the commands instead of running them."""

    def __init__(self, returncode: int = 0, stderr: str = ""):
        self.calls: list[list[str]] = []
        self.returncode, self.stderr = returncode, stderr

    def run(self, argv, timeout: float = 60.0, cwd=None) -> subprocess.CompletedProcess:
        self.calls.append(list(argv))
        return subprocess.CompletedProcess(argv, self.returncode, "", self.stderr)


SPEC = build_job_spec(compose_config(["cluster=slurm_local"]))


def stop_after_signal(spec, info: RankInfo, result: Result, runner, sleep=None) -> None:
    """What a run does once a signalled run's last save is sealed (runtime/run.py
    requeue_and_exit), with the job's settings, outside a script task."""
    waits = {} if sleep is None else {"sleep": sleep}
    after_stop_as_set(
        runtime_settings(spec), info, {}, result.stopped_by, result.steps, runner=runner, **waits
    )


RANK0 = RankInfo(0, 0, 2, 2, 0, 1, "n1", 12345, "77", "70_7", "srun")


def test_time_limit_signal_requeues_the_array_task_and_exits_3(capsys) -> None:
    runner = FakeRunner()
    with pytest.raises(SystemExit) as info:
        stop_after_signal(SPEC, RANK0, Result(40, "SIGUSR1"), runner)
    assert info.value.code == 3
    assert runner.calls == [["scontrol", "requeue", "70_7"]]
    assert "requeued job 70_7; it resumes from step-40" in capsys.readouterr().out


def test_a_failed_requeue_is_said_clearly_and_exits_1(capsys) -> None:
    runner = FakeRunner(returncode=1, stderr="Invalid job id specified")
    with pytest.raises(SystemExit) as info:
        stop_after_signal(SPEC, RANK0, Result(40, "SIGUSR1"), runner)
    assert info.value.code == 1
    err = capsys.readouterr().err
    assert "could not requeue job 70_7" in err and "Invalid job id specified" in err
    assert "step-40 is complete" in err


@pytest.mark.parametrize(
    ("signal", "info"),
    [
        ("SIGTERM", RANK0),  # scancel or preemption: Slurm decides, we do not requeue
        ("SIGUSR1", replace(RANK0, job_id=None, array_job_id=None)),  # not under Slurm
        ("SIGUSR1", replace(RANK0, rank=1)),  # only rank 0 asks
    ],
)
def test_no_requeue_for_cancel_local_runs_or_other_ranks(signal: str, info: RankInfo) -> None:
    runner = FakeRunner()
    with pytest.raises(SystemExit) as exc:
        stop_after_signal(SPEC, info, Result(40, signal), runner, sleep=lambda s: None)
    assert exc.value.code == 3
    assert runner.calls == []


@pytest.mark.parametrize(
    ("signal", "launcher", "waits"),
    [
        ("SIGTERM", "srun", 300),  # preemption: Slurm requeues only a job it ends itself
        ("SIGTERM", "local", None),  # cluster=local: exit at once, rerun to resume
        ("SIGTERM", "torchrun", None),
        ("SIGUSR1", "srun", None),  # time limit: we requeue, then exit at once
    ],
)
def test_sigterm_in_a_slurm_task_waits_for_slurm_to_end_the_job(
    signal: str, launcher: str, waits: int | None, capsys
) -> None:
    slept: list[float] = []
    with pytest.raises(SystemExit) as exc:
        stop_after_signal(
            SPEC, replace(RANK0, launcher=launcher), Result(40, signal), FakeRunner(), slept.append
        )
    assert exc.value.code == 3
    assert slept == ([waits] if waits else [])
    if waits:
        assert "step-40 is complete; waiting up to 300 s" in capsys.readouterr().out


def test_requeue_can_be_turned_off() -> None:
    spec = build_job_spec(compose_config(["cluster=slurm_local", "preemption.requeue=false"]))
    runner = FakeRunner()
    with pytest.raises(SystemExit):
        stop_after_signal(spec, RANK0, Result(40, "SIGUSR1"), runner)
    assert runner.calls == []


# A process that keeps receiving SIGUSR1 (the local launcher re-sends it until its workers
# are gone; Slurm's time-limit warning may come after the last step) while it exits.
_HAMMERED_EXIT = """
import os, subprocess, sys, time
from jeanzay_kit.ending.preemption import StopRequest
stop = StopRequest()
# (its output away from our pipes: the test reads them to the end, and until this process
# is reaped, kill still succeeds on it)
subprocess.Popen(
    ["bash", "-c", f"while kill -USR1 {os.getpid()} 2>/dev/null; do :; done"],
    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
)
time.sleep(0.3)
assert stop.signum
if sys.argv[1] == "ignore":
    stop.ignore_from_now()
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("ending", "survives"), [("ignore", True), ("keep", False)])
def test_a_signal_during_interpreter_exit_kills_unless_ignored(ending: str, survives: bool) -> None:
    """Why run_worker ends with ignore_from_now(): a Python handler is reset to the default
    action (death by SIGUSR1) while the interpreter shuts down; SIG_IGN is not.
    The "keep" row shows the failure mode (CI: workers exiting with code -10)."""
    import sys

    codes = [
        subprocess.run(
            [sys.executable, "-c", _HAMMERED_EXIT, ending], capture_output=True, timeout=30
        ).returncode
        for _ in range(3)
    ]
    if survives:
        assert codes == [0, 0, 0]
    else:
        assert -10 in codes  # killed by SIGUSR1 at least once in three exits


# A session run by hydra-submitit-launcher (or submitit's own executor): its environment,
# as submitit's sbatch script sets it.
SUBMITIT = {"SUBMITIT_EXECUTOR": "slurm", "SUBMITIT_FOLDER": "/x/.submitit/77"}


@pytest.mark.parametrize(
    ("env", "signal"),
    [
        (SUBMITIT, "USR2"),  # submitit's signal_delay_s warning, USR2 by default
        ({**SUBMITIT, "SUBMITIT_PREEMPT_SIGNAL": "USR1"}, "USR1"),
        ({"SUBMITIT_EXECUTOR": "local"}, "USR1"),  # not a Slurm job: the schema's
        ({}, "USR1"),
    ],
)
def test_a_session_follows_the_time_limit_signal_of_the_submitit_job_running_it(
    env: dict[str, str], signal: str
) -> None:
    assert from_env(env).requeue_signal == signal


def test_a_session_under_submitit_saves_at_usr2_and_requeues_the_job(capsys) -> None:
    """It ended FAILED before: USR2 was a stop without requeue, exit 3 under submitit."""
    runner = FakeRunner()
    with pytest.raises(SystemExit) as exc:
        after_stop_as_set(from_env(SUBMITIT), RANK0, SUBMITIT, "SIGUSR2", 40, runner=runner)
    assert exc.value.code == 3
    assert runner.calls == [["scontrol", "requeue", "70_7"]]
    assert "requeued job 70_7; it resumes from step-40" in capsys.readouterr().out
    # A job of the toolkit's own passes its settings: preemption.signal wins.
    settings = {SETTINGS_ENV: to_env(runtime_settings(SPEC)), **SUBMITIT}
    assert from_env(settings).requeue_signal == "USR1"


@pytest.mark.parametrize(
    ("info", "said"),
    [
        # A session in a script task of a job: the task requeues the job once it exits 3.
        (RANK0, "after saving step-40; the job's task requeues the job: it resumes from there"),
        # The same here (jzk train job.entry=...): the user runs it again.
        (replace(RANK0, job_id=None, array_job_id=None), "; run the same command again"),
    ],
)
def test_a_session_in_a_script_task_says_who_goes_on_after_its_save(
    capsys, info: RankInfo, said: str
) -> None:
    """A user trial read 'run the same command again' in a job that requeued itself."""
    runner = FakeRunner()
    task = {"JZK_RUN_DIR": "/runs/r"}
    with pytest.raises(SystemExit) as ended:
        after_stop_as_set(runtime_settings(SPEC), info, task, "SIGUSR1", 40, runner=runner)
    assert ended.value.code == 3 and runner.calls == []  # the task requeues, not the session
    assert said in capsys.readouterr().out
