"""`jzk status` and `--json` say what happened (issue 54 point 6).

- a local script run shows its last line (train.log), not "no line printed yet";
- a job's last line is that job's (its own beats, else its own log), never the next job's
  of the same run directory;
- a script killed by a signal it does not handle is shown killed by that signal;
- a sweep point's script records its starts (node/script_task.py run_task);
- a run directory another launcher ran on Slurm (no manifest) is that Slurm job, not a
  STOPPED local run.

The run directories are written by the code that writes them on a task (record_attempt,
write_script_beat, record_run_provenance); one real local script run checks the first and
third as a user meets them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jeanzay_kit.cli import main
from jeanzay_kit.launch.run_files import last_line_of, run_progress
from jeanzay_kit.launch.status import JobState, RunView, ending, run_objects, status_table
from jeanzay_kit.project.provenance import record_run_provenance
from jeanzay_kit.rundir.beats import ScriptBeat
from jeanzay_kit.rundir.run_directory import RunDir
from jeanzay_kit.script.script_files import record_attempt, write_script_beat

NOW = 2_000_000_000.0


@pytest.mark.parametrize(
    ("exit_code", "words"),
    [
        ("0:0", None),
        ("", None),
        ("2:0", "exit 2"),
        ("3:0", "exit 3"),
        ("0:9", "killed by SIGKILL"),
        ("0:10", "killed by SIGUSR1"),
        ("143:0", "exit 143: killed by SIGTERM"),  # a script task whose command died of it
        ("1:0", "exit 1"),
    ],
)
def test_an_exit_code_in_words(exit_code: str, words: str | None) -> None:
    assert ending(exit_code) == words


def test_the_table_and_json_name_the_signal() -> None:
    view = RunView("local", "/r")
    states = {view.key: JobState("local", "STOPPED", "-", "this machine", "0:10")}
    assert "STOPPED (killed by SIGUSR1)" in status_table([view], states)
    (obj,) = run_objects([view], states, {})
    assert (obj["exit_code"], obj["ending"]) == ("0:10", "killed by SIGUSR1")


def _script_run_dir(tmp_path: Path) -> Path:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    RunDir(run_dir).command.write_text("{}\n")
    return run_dir


def _beat(run_dir: Path, job: str, start: float, line: str, when: float) -> None:
    token = f"{job}-{int(start)}"  # node/script_task.py: the attempt's token
    write_script_beat(RunDir(run_dir), ScriptBeat(0, "n1", 1, token, when, line, when, 2.0, True))


def test_a_local_script_run_shows_the_last_line_of_its_log(tmp_path: Path) -> None:
    run_dir = _script_run_dir(tmp_path)
    record_attempt(RunDir(run_dir), NOW - 60, None)
    (run_dir / "train.log").write_text("[rank 0] epoch 0\n[rank 0] epoch 1 loss 0.5\n\n")
    os.utime(run_dir / "train.log", (NOW - 5, NOW - 5))
    progress = run_progress(RunDir(run_dir), now=NOW)
    assert (progress.attempts, progress.last_line) == (1, "[rank 0] epoch 1 loss 0.5")
    assert progress.last_line_age_s == pytest.approx(5)


@pytest.mark.parametrize(
    ("job", "line"),
    [
        # the cancelled job's beat was replaced by the next job's: its own log says
        ("100", "slurmstepd: error: *** JOB 100 CANCELLED ***"),
        ("101", "done: epoch 12"),  # the next job: its own beat
        (None, "done: epoch 12"),  # every job of the run: the newest
    ],
)
def test_a_job_s_last_line_is_its_own(tmp_path: Path, job: str | None, line: str) -> None:
    run_dir = _script_run_dir(tmp_path)
    record_attempt(RunDir(run_dir), NOW - 100, "100")
    record_attempt(RunDir(run_dir), NOW - 50, "101")
    _beat(run_dir, "101", NOW - 50, "done: epoch 12", NOW - 10)  # task-0.json, replaced
    log = tmp_path / "jzk-100.out"
    log.write_text("epoch 3\n")
    log.with_suffix(".err").write_text("slurmstepd: error: *** JOB 100 CANCELLED ***\n")
    os.utime(log, (NOW - 80, NOW - 80))
    os.utime(log.with_suffix(".err"), (NOW - 70, NOW - 70))
    progress = run_progress(RunDir(run_dir), now=NOW, job_id=job, log=log if job == "100" else None)
    assert progress.last_line == line
    assert progress.attempts == (2 if job is None else 1)


def test_a_job_with_no_beat_and_no_log_shows_no_other_job_s_line(tmp_path: Path) -> None:
    run_dir = _script_run_dir(tmp_path)
    record_attempt(RunDir(run_dir), NOW - 100, "100")
    _beat(run_dir, "101", NOW - 50, "done: epoch 12", NOW - 10)
    assert run_progress(RunDir(run_dir), now=NOW, job_id="100").last_line is None


def test_last_line_of_reads_the_tail_only(tmp_path: Path) -> None:
    path = tmp_path / "big.log"
    path.write_text("x" * 200_000 + "\nthe end\n")
    assert last_line_of(path)[0] == "the end"  # type: ignore[index]
    assert last_line_of(tmp_path / "missing.log") is None


@pytest.mark.parametrize(
    ("starts", "job"),
    [
        ([{}], None),  # a start on this machine
        ([{"SLURM_JOB_ID": "77"}], "77"),  # the user's own sbatch
        ([{"SLURM_JOB_ID": "80", "SLURM_ARRAY_JOB_ID": "78", "SLURM_ARRAY_TASK_ID": "2"}], "78_2"),
        ([{"SLURM_JOB_ID": "77"}, {}], None),  # run here again after Slurm: the newest
        ([{}, {"SLURM_JOB_ID": "90"}], "90"),
    ],
)
def test_a_run_directory_knows_its_newest_slurm_job(
    tmp_path: Path, starts: list[dict[str, str]], job: str | None
) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    assert RunDir(run_dir).newest_start_job() is None
    for env in starts:
        record_run_provenance(RunDir(run_dir), env, tmp_path)
    assert RunDir(run_dir).newest_start_job() == job


def test_another_launcher_s_run_is_its_slurm_job_not_a_stopped_local_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """hydra-submitit-launcher or plain sbatch: no manifest; the run completed on Slurm."""
    from jeanzay_kit.cli import status as status_cli

    run_dir = _script_run_dir(tmp_path)
    record_run_provenance(RunDir(run_dir), {"SLURM_JOB_ID": "512"}, tmp_path)
    record_attempt(RunDir(run_dir), NOW, "512")
    (run_dir / "lease.json").write_text("{}\n")  # task 0 held it (lease.py)
    asked: list[list[str]] = []

    def slurm_states(ids: list[str], usage_out=None):  # noqa: ANN202 - sacct's answer
        asked.append(ids)
        return {"512": JobState("512", "COMPLETED", "00:01:00", "n1", "0:0", "sacct")}, {}, []

    monkeypatch.setattr(status_cli, "slurm_states", slurm_states)
    assert main(["status", "--json", str(run_dir)]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert asked == [["512"]]
    assert (obj["job_id"], obj["state"], obj["where"]) == ("512", "COMPLETED", "n1")


SCRIPT = """\
import os, signal, sys, time
print("epoch 0 loss 1.0", flush=True)
print("epoch 1 loss 0.5", flush=True)
if sys.argv[1:] == ["--die"]:
    os.kill(os.getpid(), signal.SIGUSR1)  # the warning it does not handle
while sys.argv[1:] == ["--wait"] and not os.path.exists(os.environ["JZK_PROJECT_DIR"] + "/go"):
    time.sleep(0.1)
"""


def _status_json(cwd: Path, run_dir: Path) -> dict:
    """`jzk status --json RUN_DIR` as a user runs it, in its own process."""
    shown = subprocess.run(
        [sys.executable, "-m", "jeanzay_kit.cli", "status", "--json", str(run_dir)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stderr[-2000:]
    return json.loads(shown.stdout)


@pytest.mark.timeout(300)
def test_a_local_script_that_runs_is_running(tmp_path: Path) -> None:
    """A script of its own writes no heartbeat: while `jzk train` runs it (its lease held
    by a live process), status says RUNNING, not STOPPED (a user's trial), even over the
    outcome an earlier start left."""
    (tmp_path / "s.py").write_text(SCRIPT)
    run_dir = tmp_path / "run"
    argv = [sys.executable, "-m", "jeanzay_kit.cli", "train", "job.entry=s.py"]
    argv += ["job.args=[--wait]", "resources.gpus_per_node=1", f"job.run_dir={run_dir}"]
    (run_dir).mkdir()
    (run_dir / "outcome.json").write_text('{"state": "STOPPED"}\n')  # an earlier start's
    training = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE, text=True)
    try:
        log = RunDir(run_dir).train_log
        deadline = time.monotonic() + 200
        while "epoch 1" not in (log.read_text() if log.exists() else ""):
            assert time.monotonic() < deadline and training.poll() is None, "it never ran"
            time.sleep(0.2)
        assert _status_json(tmp_path, run_dir)["state"] == "RUNNING"
    finally:
        (tmp_path / "go").touch()
        assert training.wait(timeout=120) == 0


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("args", "state", "how"),
    [("[]", "COMPLETED", None), ("[--die]", "STOPPED", "killed by SIGUSR1")],
)
def test_a_local_script_run_as_status_shows_it(
    tmp_path: Path, args: str, state: str, how: str | None
) -> None:
    (tmp_path / "s.py").write_text(SCRIPT)
    run_dir = tmp_path / "run"
    trained = subprocess.run(
        [
            sys.executable,
            "-m",
            "jeanzay_kit.cli",
            "train",
            "job.entry=s.py",
            f"job.args={args}",
            "resources.gpus_per_node=1",
            f"job.run_dir={run_dir}",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert trained.returncode == (0 if how is None else 3), trained.stderr[-2000:]
    if how:
        assert f"jzk train: stopped ({how}, which it does not handle)" in trained.stdout
    obj = _status_json(tmp_path, run_dir)
    assert (obj["state"], obj["ending"], obj["last_line"]) == (
        state,
        how,
        "[rank 0] epoch 1 loss 0.5",
    )


def test_a_sweep_point_s_script_counts_its_starts(tmp_path: Path) -> None:
    """A sweep's task (submitit, node/script_task.py run_task) started twice by a
    requeue: 2 starts, 1 restart, for the manifest's array task id."""
    from jeanzay_kit.node.script_task import run_task
    from jeanzay_kit.script.script_rules import ScriptCommand

    env = {
        "PATH": os.environ.get("PATH", ""),
        "SLURM_PROCID": "0",
        "SLURM_STEP_ID": "0",
        "SLURM_NTASKS": "1",
        "SLURM_LOCALID": "0",
        "SLURM_STEP_TASKS_PER_NODE": "1",
        "SLURM_NNODES": "1",
        "SLURM_NODEID": "0",
        "SLURM_JOB_ID": "77",
        "SLURM_ARRAY_JOB_ID": "70",
        "SLURM_ARRAY_TASK_ID": "7",
        "SLURM_JOB_NODELIST": "n1",
        "SLURM_STEP_NODELIST": "n1",
    }
    run_dir = tmp_path / "run"
    for _ in range(2):
        assert (
            run_task(
                sys.executable, ScriptCommand("-c", ("print(1)",)), env, RunDir.of(str(run_dir))
            )
            == 0
        )
    progress = run_progress(RunDir(run_dir), job_id="70_7")
    assert (progress.attempts, progress.restarts) == (2, 1)
    # The command exited 0: the run's newest end is "completed", not an earlier stop's
    # "run the same command again" (a user trial's script run said it after completing).
    assert progress.verdict == "completed", progress


@pytest.mark.parametrize(
    ("mark", "said"),
    [
        ("123\n", "the script stopped (exit 3)"),
        ("123 SIGUSR1\n", "the script stopped (killed by SIGUSR1, which it does not handle)"),
    ],
)
def test_a_script_s_requeue_says_how_it_ended(tmp_path: Path, mark: str, said: str) -> None:
    """node/script_task.py writes the mark (its pid, and the signal its command died of);
    the requeue step's line names the signal instead of 'exit 3'."""
    import subprocess as sp

    from jeanzay_kit.node.restart_job import restart_after_failure

    class Scontrol:
        def run(self, argv, timeout=60.0, cwd=None):  # noqa: ANN001, ANN202 - the seam
            return sp.CompletedProcess(argv, 0, "", "")

    RunDir(tmp_path).requeue_mark.write_text(mark)
    line = restart_after_failure(
        RunDir(tmp_path), 0, 3, env={"SLURM_JOB_ID": "42"}, runner=Scontrol(), script=True
    )
    assert line == f"jzk: {said}; requeued job 42: no restart spent"
