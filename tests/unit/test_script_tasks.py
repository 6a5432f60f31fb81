"""Script tasks (job.entry your own command): which entry is a script, the command and
the torchrun variables each task gets, the entry check, the rendered srun line and the
requeue of a script that asks for it. Pure parts, plus the real restart-budget file."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import pytest

from jeanzay_kit.config.compose import compose_config
from jeanzay_kit.config.entry import runs_script
from jeanzay_kit.config.runtime_settings import from_spec, to_env
from jeanzay_kit.config.spec import build_job_spec
from jeanzay_kit.distributed.ranks import RankInfo
from jeanzay_kit.distributed.script_env import (
    entry_problem,
    script_argv,
    script_env,
)
from jeanzay_kit.ending.endings import read_restarts
from jeanzay_kit.errors import SpecError
from jeanzay_kit.node.restart_job import restart_after_failure
from jeanzay_kit.rundir.run_directory import RunDir
from jeanzay_kit.slurm.sbatch import render_sbatch


@pytest.mark.parametrize(
    ("entry", "kind", "script"),
    [
        ("-m jeanzay_kit.train_app", "auto", False),
        ("-m  jeanzay_kit.train_app", "auto", False),
        ("train_ddp.py", "auto", True),
        ("-m mypkg.train", "auto", True),
        ("train.py", "toolkit", False),  # a Hydra application of yours calling the toolkit
        ("-m jeanzay_kit.train_app", "script", True),
    ],
)
def test_which_entry_is_your_own_command(entry: str, kind: str, script: bool) -> None:
    assert runs_script(entry, kind) is script


def test_the_command_gets_exactly_job_args() -> None:
    assert script_argv("python", "train.py", ["--lr", "0.1"]) == [
        "python",
        "train.py",
        "--lr",
        "0.1",
    ]
    # A path with a space is quoted in the config, as on a command line.
    quoted = script_argv("python", "'my dir/train.py'", ["--x"])
    assert quoted == ["python", "my dir/train.py", "--x"]
    assert script_argv("python", "-m mypkg.train", []) == ["python", "-m", "mypkg.train"]


def test_each_task_gets_torchruns_variables_and_the_run_dir() -> None:
    info = RankInfo(5, 1, 8, 4, 1, 2, "node07", 12345, "991", array_job_id="990_3")
    assert script_env(info, "/scratch/run") == {
        "RANK": "5",
        "LOCAL_RANK": "1",
        "WORLD_SIZE": "8",
        "LOCAL_WORLD_SIZE": "4",
        "GROUP_RANK": "1",
        "GROUP_WORLD_SIZE": "2",
        "MASTER_ADDR": "node07",
        "MASTER_PORT": "12345",
        "JZK_RUN_DIR": "/scratch/run",
        "JZK_JOB_ID": "990_3",
    }


@pytest.mark.parametrize(
    ("entry", "is_file", "module", "fragment"),
    [
        ("train.py", True, False, None),
        ("-m mypkg.train", False, True, None),
        ("train.py", False, False, "job.entry='train.py' is not a file"),
        ("-m mypkg.tran", False, False, "no module mypkg.tran can be imported"),
        ("train.py --lr 1", True, False, "put the script's arguments in job.args"),
        ("-m", False, False, "must be `-m package.module` alone"),
        ("", False, False, "job.entry is empty"),
    ],
)
def test_an_entry_that_cannot_run_is_named(
    entry: str, is_file: bool, module: bool, fragment: str | None
) -> None:
    problem = entry_problem(entry, is_file, module)
    assert (problem is None) if fragment is None else (fragment in problem and "HINT" in problem)


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        ("entry_kind", "maybe", "job.entry_kind=maybe is not one of auto, toolkit, script"),
        ("args", "--epochs 10", "job.args='--epochs 10' must be a list of arguments"),
        ("args", {"epochs": 10}, "must be a list of arguments"),
    ],
)
def test_bad_job_args_and_kind_are_refused_naming_the_key(
    key: str, value: object, fragment: str
) -> None:
    cfg = compose_config([])
    cfg["job"][key] = value
    with pytest.raises(SpecError) as err:
        build_job_spec(cfg)
    assert fragment in str(err.value) and "HINT" in str(err.value)


def test_a_script_task_renders_its_command_without_hydra_arguments() -> None:
    spec = build_job_spec(
        compose_config(
            [
                "cluster=slurm_local",
                "resources.nodes=2",
                "resources.gpus_per_node=2",
                "job.entry=ddp_script.py",
                "job.args=[--steps,40,--out,my dir]",
            ]
        )
    )
    script = render_sbatch(spec, workdir="/work/project")
    srun = next(line for line in script.splitlines() if line.startswith("srun "))
    assert srun.endswith(
        "python -m jeanzay_kit.node.script_task "
        f"--run-dir={spec.checkpoint.run_dir} --stall-seconds=300 --heartbeat-seconds=2 "
        f"--after-signal-seconds=60 {shlex.quote('--settings=' + to_env(from_spec(spec)))} -- "
        "python ddp_script.py --steps 40 --out 'my dir' &"
    )
    assert "--config-dir" not in srun and "hydra.run.dir" not in srun
    assert "--script" in script  # the restart step knows exit 3 asks for a requeue


class Scontrol:
    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def run(self, argv, timeout=60.0, cwd=None):
        self.calls.append(list(argv))
        return subprocess.CompletedProcess(argv, 0, "", "")


@pytest.mark.parametrize("status", [3])
def test_a_script_that_asks_is_requeued_without_spending_a_restart(
    tmp_path: Path, status: int
) -> None:
    runner = Scontrol()
    line = restart_after_failure(
        RunDir(tmp_path), status, 3, env={"SLURM_JOB_ID": "42"}, runner=runner, script=True
    )
    assert runner.calls == [["scontrol", "requeue", "42"]]
    assert "no restart spent" in line and read_restarts(RunDir(tmp_path)) == []


def test_a_script_crash_is_restarted_only_after_it_wrote_something(tmp_path: Path) -> None:
    runner = Scontrol()
    env = {"SLURM_JOB_ID": "42"}
    started = 1_000_000_000.0
    line = restart_after_failure(
        RunDir(tmp_path), 1, 3, env=env, runner=runner, since=9e9, script=True
    )
    assert "before completing any step" in line and runner.calls == []
    # A session writes heartbeats (and hang dumps) from its first second: no progress.
    for name in ("heartbeat/rank-0.json", "hang-3/report.txt"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("{}")
    line = restart_after_failure(
        RunDir(tmp_path), 1, 3, env=env, runner=runner, since=started, script=True
    )
    assert "before completing any step" in line and runner.calls == []
    (tmp_path / "checkpoint.pt").write_bytes(b"x")
    line = restart_after_failure(
        RunDir(tmp_path), 1, 3, env=env, runner=runner, since=started, script=True
    )
    assert (
        runner.calls == [["scontrol", "requeue", "42"]]
        and len(read_restarts(RunDir(tmp_path))) == 1
    )


def test_a_session_in_a_script_that_completed_steps_is_restarted_before_its_first_save(
    tmp_path: Path,
) -> None:
    """A session loop run as job.entry hung at step 33, before its first save (every 50):
    its beats say it completed steps, so the hang is worth a restart from the newest
    checkpoint (it was "before any step of this attempt completed: not requeued", met by a
    Slurm rehearsal of docs/examples/own_loop/train_session.py)."""
    started = 1_000_000_000.0
    beat = {"rank": 0, "host": "n1", "pid": 7, "job_id": "42", "step": 33}
    beat |= {"total_steps": 1500, "phase": "backward", "progress_time": started + 14}
    beat |= {"wall_time": started + 15, "token": "t", "interval_s": 0.5, "start_step": 0}
    (tmp_path / "heartbeat").mkdir()
    (tmp_path / "heartbeat" / "rank-0.json").write_text(json.dumps(beat))
    runner = Scontrol()
    line = restart_after_failure(
        RunDir(tmp_path), 4, 3, env={"SLURM_JOB_ID": "42"}, runner=runner, since=started,
        script=True,
    )  # fmt: skip
    assert runner.calls == [["scontrol", "requeue", "42"]], line
    assert len(read_restarts(RunDir(tmp_path))) == 1


def test_a_task_whose_script_exited_3_leaves_a_mark_that_requeues(tmp_path: Path) -> None:
    """The task wrapper turns the script's exit 3 into exit 0 and a mark (srun would
    otherwise kill the ranks still saving); the restart step requeues on the mark."""
    runner = Scontrol()
    RunDir(tmp_path).requeue_mark.write_text("123\n")
    line = restart_after_failure(
        RunDir(tmp_path), 0, 3, env={"SLURM_JOB_ID": "42"}, runner=runner, script=True
    )
    assert runner.calls == [["scontrol", "requeue", "42"]] and "no restart spent" in line
    assert not RunDir(tmp_path).requeue_mark.exists()
    assert (
        restart_after_failure(
            RunDir(tmp_path), 0, 3, env={"SLURM_JOB_ID": "42"}, runner=runner, script=True
        )
        == ""
    )


@pytest.mark.parametrize(
    ("exit_with", "procid", "code", "requeued"),
    [
        ("raise SystemExit(3)", "0", 3, True),  # "run me again": task 0 requeues
        ("raise SystemExit(3)", "1", 3, False),  # the other tasks only end alike
        ("import os, signal; os.kill(os.getpid(), signal.SIGUSR1)", "0", 3, True),
        ("raise SystemExit(5)", "0", 5, False),  # a failure before any progress stands
        # A crash after the script saved something: a restart spent, as a rendered
        # script's restart step spends one; the task ends as stopped.
        ("open('ckpt.pt', 'w').write('x'); raise SystemExit(5)", "0", 3, True),
        ("raise SystemExit(5)", "1", 5, False),  # task 0 decides; the others wait for it
    ],
)
def test_a_sweep_task_requeues_when_its_command_asks(
    tmp_path: Path, capsys, exit_with: str, procid: str, code: int, requeued: bool
) -> None:
    """A sweep's task (submitit) runs the command as its child and must return: the
    command's exit 3 (or death by SIGUSR1) becomes `scontrol requeue` of the array task,
    and so does a crash after progress while preemption.max_restarts allows."""
    import sys

    from jeanzay_kit.node.script_task import run_task
    from jeanzay_kit.script.script_rules import ScriptCommand

    runner = Scontrol()
    env = _sweep_task_env(procid)
    command = ScriptCommand("-c", (exit_with,))
    waits: list[float] = []
    got = run_task(
        sys.executable,
        command,
        env,
        RunDir.of(str(tmp_path / "run")),
        runner=runner,
        sleep=waits.append,
        max_restarts=3,
    )
    assert got == code
    assert runner.calls == ([["scontrol", "requeue", "70_7"]] if requeued else [])
    # The other ranks wait for rank 0's requeue to end the job: exiting at once would
    # make srun's --kill-on-bad-exit kill rank 0 in the middle of `scontrol requeue`.
    assert waits == ([60.0] if procid != "0" else [])
    if requeued and "ckpt.pt" in exit_with:  # the restart rule's own line, its words
        said = capsys.readouterr().err
        assert "failure (the script's exit 5); requeued job 70_7 (1/3)" in said, said
    if procid == "0" and "SystemExit(5)" in exit_with:  # a failure's end is recorded
        (ended,) = RunDir(tmp_path / "run").ending_records()
        assert ended["retried"] is (code == 3), ended


def _sweep_task_env(procid: str) -> dict[str, str]:
    """Task `procid` of 2 of array task 70_7, as srun under submitit gives them."""
    import os

    from jeanzay_kit.node.local_ranks import free_port

    return {
        "PATH": os.environ.get("PATH", ""),
        "SLURM_PROCID": procid,
        "SLURM_STEP_ID": "0",
        "SLURM_NTASKS": "2",
        "SLURM_LOCALID": procid,
        "SLURM_STEP_TASKS_PER_NODE": "2",
        "SLURM_NNODES": "1",
        "SLURM_NODEID": "0",
        "SLURM_JOB_ID": "77",
        "SLURM_ARRAY_JOB_ID": "70",
        "SLURM_ARRAY_TASK_ID": "7",
        "SLURM_JOB_NODELIST": "n1",
        "SLURM_STEP_NODELIST": "n1",
        # A port of the user's: task 1 alone does not wait for task 0's port note
        # (node/script_port.py).
        "MASTER_PORT": str(free_port()),
        "SUBMITIT_FOLDER": "/sweep/.submitit/70_7",  # submitit runs this task
    }


class FailingScontrol(Scontrol):
    def run(self, argv, timeout=60.0, cwd=None):
        self.calls.append(list(argv))
        return subprocess.CompletedProcess(argv, 1, "", "slurm_requeue error: Disabled")


def test_a_sweep_task_whose_requeue_fails_ends_as_the_failure(tmp_path: Path, capsys) -> None:
    """A crash after progress whose `scontrol requeue` is refused: the task ends with the
    script's code (a failed point, which submitit reports), never as requeued."""
    import sys

    from jeanzay_kit.node.script_task import run_task
    from jeanzay_kit.script.script_rules import ScriptCommand

    crash = ScriptCommand("-c", ("open('ckpt.pt', 'w').write('x'); raise SystemExit(5)",))
    runner = FailingScontrol()
    run_dir = RunDir.of(str(tmp_path / "run"))
    got = run_task(
        sys.executable, crash, _sweep_task_env("0"), run_dir, runner=runner, max_restarts=3
    )
    assert (got, runner.calls) == (5, [["scontrol", "requeue", "70_7"]])
    assert "could not requeue job 70_7" in capsys.readouterr().err


def test_a_rendered_scripts_task_keeps_the_stop_signals_blocked_after_its_command(
    tmp_path: Path,
) -> None:
    """The rendered script's task ends right after its command: srun's SIGTERM to the
    step's other tasks (--kill-on-bad-exit) must not end it with 143 instead of its
    command's code, so the stop signals stay blocked (a sweep's task, which goes on,
    hands them back: test above)."""
    import signal
    import sys

    from jeanzay_kit.node.script_task import slurm_task

    before = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    try:
        env = {**_sweep_task_env("0"), "SLURM_NTASKS": "1", "SLURM_STEP_TASKS_PER_NODE": "1"}
        code = slurm_task([sys.executable, "-c", "raise SystemExit(2)"], env, str(tmp_path / "r"))
        assert code == 2
        assert signal.SIGTERM in signal.pthread_sigmask(signal.SIG_BLOCK, [])
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


@pytest.mark.parametrize(
    ("job", "named"),
    [
        ({"entry": "train.py", "entry_kind": "auto"}, "train.py"),
        ({"entry": "-m jeanzay_kit.train_app", "entry_kind": "auto"}, None),
        ({"entry": "app.py", "entry_kind": "toolkit"}, None),
        ({}, None),
    ],
)
def test_a_failed_task_names_the_users_command_not_the_toolkits_loop(job, named) -> None:
    from jeanzay_kit.config.entry import script_entry

    assert script_entry({"job": job}) == named


def test_srun_jzk_train_by_hand_is_never_requeued_after_a_crash(tmp_path: Path) -> None:
    """`srun jzk train job.entry=...` typed in an allocation (no submitit around the task):
    a crash after progress is recorded, not retried, and nothing asks Slurm to requeue
    the allocation."""
    import sys

    from jeanzay_kit.node.script_task import run_task
    from jeanzay_kit.script.script_rules import ScriptCommand

    crash = ScriptCommand("-c", ("open('ckpt.pt', 'w').write('x'); raise SystemExit(5)",))
    env = {k: v for k, v in _sweep_task_env("0").items() if k != "SUBMITIT_FOLDER"}
    runner, run_dir = Scontrol(), RunDir.of(str(tmp_path / "run"))
    assert run_task(sys.executable, crash, env, run_dir, runner=runner, max_restarts=3) == 5
    assert runner.calls == []
    (ended,) = run_dir.ending_records()
    assert ended["retried"] is False, ended
