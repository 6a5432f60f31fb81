"""After a failed job step: requeue within the restart budget (node/restart_job.py).

The Slurm command goes through the runner seam; the budget file is real."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from jeanzay_kit.ending.endings import read_restarts
from jeanzay_kit.node.restart_job import job_err_log, restart_after_failure
from jeanzay_kit.rundir.run_directory import RunDir


class Scontrol:
    def __init__(self, fail: bool = False) -> None:
        self.calls: list[list[str]] = []
        self.fail = fail

    def run(self, argv, timeout=60.0, cwd=None):
        self.calls.append(list(argv))
        return subprocess.CompletedProcess(argv, 1 if self.fail else 0, "", "denied")


JOB = {"SLURM_JOB_ID": "42"}


@pytest.mark.parametrize("status", [0, 2, 3])
def test_success_refusal_and_preemption_stop_are_left_alone(tmp_path: Path, status: int) -> None:
    runner = Scontrol()
    assert restart_after_failure(RunDir(tmp_path), status, 3, env=JOB, runner=runner) == ""
    assert runner.calls == [] and read_restarts(RunDir(tmp_path)) == []


def test_a_refusal_said_only_in_the_jobs_stderr_log_is_recorded_as_what_it_is(
    tmp_path: Path,
) -> None:
    """A session script's full disk: its line is in the job's stderr log (the script's
    output goes there on Slurm, not to train.log); it was recorded `unknown: exit 2`."""
    said = (
        "jzk: start 1 of job 42 on n1 at 2026-12-01T02:24:10\n"
        "session: error: checkpoint step-20 could not be written to /x/.tmp-step-20: "
        "[Errno 28] No space left on device (rank 0).\n"
        "srun: error: n1: tasks 0-1: Exited with exit code 2\n"
    )
    runner = Scontrol()
    run_dir = RunDir(tmp_path)
    assert restart_after_failure(run_dir, 2, 3, env=JOB, runner=runner, slurm_log=said) == ""
    (ended,) = run_dir.ending_records()
    assert ended["kind"] == "disk_full" and "No space left" in ended["evidence"], ended
    assert ended["retried"] is False and runner.calls == []


class ShowJob:
    """`scontrol show job -o ID`'s answer, as Slurm gives it: Key=Value, space-separated."""

    def __init__(self, err: Path) -> None:
        self.line = f"JobId=42 JobName=jzk StdErr={err} StdIn=/dev/null StdOut={err}.out Power="

    def run(self, argv, timeout=60.0, cwd=None):
        return subprocess.CompletedProcess(argv, 0, self.line + "\n", "")


@pytest.mark.parametrize("folder", ["logs", "own loop/logs"])
def test_the_jobs_stderr_log_is_found_in_any_folder(tmp_path: Path, folder: str) -> None:
    err = tmp_path / folder / "jzk-42.err"
    err.parent.mkdir(parents=True)
    err.write_text("session: error: [Errno 28] No space left on device\n")
    assert "No space left" in job_err_log("42", ShowJob(err))


def test_a_hang_is_recorded_and_the_array_task_requeued(tmp_path: Path) -> None:
    runner = Scontrol()
    env = {**JOB, "SLURM_ARRAY_JOB_ID": "40", "SLURM_ARRAY_TASK_ID": "2"}
    line = restart_after_failure(RunDir(tmp_path), 4, 3, env=env, runner=runner)
    assert runner.calls == [["scontrol", "requeue", "40_2"]]
    assert line == (
        "jzk: hang; requeued job 40_2 (1/3): it resumes from the newest complete checkpoint"
    )
    assert [r["reason"] for r in read_restarts(RunDir(tmp_path))] == ["hang"]


def test_an_exhausted_budget_stops_without_requeue(tmp_path: Path) -> None:
    runner = Scontrol()
    for _ in range(2):
        restart_after_failure(RunDir(tmp_path), 137, 2, env=JOB, runner=runner)
    line = restart_after_failure(RunDir(tmp_path), 137, 2, env=JOB, runner=runner)
    assert len(runner.calls) == 2 and len(read_restarts(RunDir(tmp_path))) == 2
    assert line.startswith("jzk: the run ended in a failure (srun exit 137): ")
    assert "; it has used its 2 restart(s)" in line
    assert "(preemption.max_restarts=2, history in" in line and "not requeued. HINT:" in line
    assert "then submit the job again: it resumes" in line


def test_a_refused_requeue_is_said(tmp_path: Path) -> None:
    line = restart_after_failure(RunDir(tmp_path), 1, 3, env=JOB, runner=Scontrol(fail=True))
    assert line.startswith("jzk: failure (srun exit 1); could not requeue job 42:")
    assert "denied" in line


def test_outside_slurm_nothing_is_requeued(tmp_path: Path) -> None:
    runner = Scontrol()
    line = restart_after_failure(RunDir(tmp_path), 4, 3, env={}, runner=runner)
    # The verdict is said, the end recorded, no restart spent.
    assert line.startswith("jzk: hang (hang") and line.endswith(
        "), and this is not a Slurm job: nothing to requeue"
    ), line
    assert runner.calls == [] and read_restarts(RunDir(tmp_path)) == []
    assert RunDir(tmp_path).ending_records()[-1]["retried"] is False


def _beat(run_dir: Path, rank: int, step: int, start_step: int | None, wall_time: float) -> None:
    import json

    folder = run_dir / "heartbeat"
    folder.mkdir(exist_ok=True)
    beat = {
        "rank": rank,
        "host": "n1",
        "pid": 100 + rank,
        "job_id": "42",
        "step": step,
        "total_steps": 100,
        "phase": "done",
        "progress_time": wall_time,
        "wall_time": wall_time,
        "token": "t",
        "interval_s": 2.0,
        "start_step": start_step,
    }
    (folder / f"rank-{rank}.json").write_text(json.dumps(beat))


@pytest.mark.parametrize(
    ("beats", "requeued"),
    [
        ([], False),  # no rank ever beat: it failed while starting
        ([(0, 20, 20, 1000.0)], False),  # resumed at 20, failed at 20
        ([(0, 20, None, 1000.0)], False),  # never reached its first step
        ([(0, 35, 20, 500.0)], False),  # progress, but by an earlier attempt
        ([(0, 20, 20, 1000.0), (1, 21, 20, 1000.0)], True),  # one rank completed a step
    ],
)
def test_a_step_that_failed_before_any_progress_is_not_requeued(
    tmp_path: Path, beats: list, requeued: bool
) -> None:
    for rank, step, start, wall in beats:
        _beat(tmp_path, rank, step, start, wall)
    runner = Scontrol()
    line = restart_after_failure(RunDir(tmp_path), 1, 3, env=JOB, runner=runner, since=900.0)
    assert (runner.calls == [["scontrol", "requeue", "42"]]) is requeued
    assert (len(read_restarts(RunDir(tmp_path))) == 1) is requeued
    if not requeued:
        assert "before completing any step of this attempt: not requeued" in line
        assert "(no restart of preemption.max_restarts=3 spent;" in line


# A Slurm task's train.log when a Dataset raised on one record in a loader worker.
DATA_ERROR_LOG = """jzk: start 1 of job 42 on n1 at 2026-11-27T10:00:00
[rank 0] Traceback (most recent call last):
[rank 0]   File "/k/jeanzay_kit/train/loop.py", line 120, in train
[rank 0] ValueError: Caught ValueError in DataLoader worker process 0.
[rank 0] Original Traceback (most recent call last):
[rank 0]   File "/p/userpkg/corrupt.py", line 8, in __getitem__
[rank 0] ValueError: corrupt record 1500
[rank 0] jzk: dataset index 1500
"""


def test_a_data_error_repeated_at_the_same_step_is_not_requeued_again(tmp_path: Path) -> None:
    """Issue 58: the first failure is requeued, its repeat at the same step ends the run
    with the verdict and the fix (before: requeued until preemption.max_restarts)."""
    import json

    runner = Scontrol()
    lines = []
    for attempt in range(2):
        (tmp_path / "train.log").write_text(
            DATA_ERROR_LOG.replace("start 1", f"start {attempt + 1}")
        )
        _beat(tmp_path, 0, 4, 0, 1000.0 + attempt)
        lines.append(
            restart_after_failure(RunDir(tmp_path), 1, 3, env=JOB, runner=runner, since=900.0)
        )
    assert runner.calls == [["scontrol", "requeue", "42"]], lines
    assert lines[1].startswith(
        "jzk: the run failed: data error at step 4: ValueError: corrupt record 1500 (dataset "
        "index 1500); not restarted: the attempt before failed the same way at the same "
        "step. HINT: fix or skip the named sample"
    ), lines[1]
    endings = [json.loads(x) for x in (tmp_path / "endings.jsonl").read_text().splitlines()]
    assert [(e["kind"], e["job_id"], e["retried"]) for e in endings] == [
        ("data_error", "42", True),
        ("data_error", "42", False),
    ]


def test_a_refusal_and_a_stop_are_recorded_too(tmp_path: Path) -> None:
    import json

    (tmp_path / "train.log").write_text("jzk train: the loss is NaN or infinite at step 7\n")
    restart_after_failure(RunDir(tmp_path), 2, 3, env=JOB, runner=Scontrol())
    (tmp_path / "train.log").write_text("jzk: start 2 of job 42\n")
    restart_after_failure(RunDir(tmp_path), 3, 3, env=JOB, runner=Scontrol())
    endings = [json.loads(x) for x in (tmp_path / "endings.jsonl").read_text().splitlines()]
    assert [e["kind"] for e in endings] == ["nan", "stopped"], endings


ECC_LOG = """jzk: start 1 of job 42 on n1 at 2026-11-27T10:00:00
[rank 2] Traceback (most recent call last):
[rank 2]   File "/w/train.py", line 12, in step
[rank 2] RuntimeError: CUDA error: uncorrectable ECC error encountered
[rank 0] rank 0 stopped: a peer left the job (Connection closed by peer)
"""
TWO_NODES = {**JOB, "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_TASKS_PER_NODE": "2(x2)"}


def test_a_gpu_hardware_error_leaves_its_node_out_and_the_nodes_accumulate(
    tmp_path: Path,
) -> None:
    """Point 3: the node of the rank that met the ECC error (rank 2: n2) is left out of
    the requeued job, even before any step (another node can pass); a node failure on
    n1 next adds n1 (before: requeued onto any node, the broken one included)."""
    import json

    runner = Scontrol()
    (tmp_path / "train.log").write_text(ECC_LOG)
    line = restart_after_failure(RunDir(tmp_path), 1, 3, env=TWO_NODES, runner=runner, since=900.0)
    assert runner.calls == [
        ["scontrol", "requeue", "42"],
        ["scontrol", "update", "JobId=42", "ExcNodeList=n2"],
    ], line
    assert line.endswith(", without node(s) n2 (ExcNodeList, kept in endings.jsonl)"), line
    (tmp_path / "train.log").write_text("jzk: start 2 of job 42\nsrun: error: Node failure on n1\n")
    _beat(tmp_path, 0, 9, 0, 1000.0)
    line = restart_after_failure(RunDir(tmp_path), 1, 3, env=TWO_NODES, runner=runner, since=900.0)
    assert runner.calls[-1] == ["scontrol", "update", "JobId=42", "ExcNodeList=n1,n2"], line
    endings = [json.loads(x) for x in (tmp_path / "endings.jsonl").read_text().splitlines()]
    assert [(e["kind"], e["node"]) for e in endings] == [
        ("gpu_hardware", "n2"),
        ("node_failure", "n1"),
    ]


def test_a_refused_exclusion_is_said_with_the_way_out(tmp_path: Path) -> None:
    class Refusing(Scontrol):
        def run(self, argv, timeout=60.0, cwd=None):
            self.calls.append(list(argv))
            code = 1 if argv[1] == "update" else 0
            said = "Invalid node name specified"
            return subprocess.CompletedProcess(argv, code, "", said)

    (tmp_path / "train.log").write_text(ECC_LOG)
    env = {**JOB, "SLURM_JOB_NODELIST": "n1", "SLURM_TASKS_PER_NODE": "4"}
    line = restart_after_failure(RunDir(tmp_path), 1, 3, env=env, runner=Refusing(), since=900.0)
    assert "could not leave out n1:" in line and "Invalid node name specified" in line, line
    assert "HINT: if no node is left for the job, cancel it (scancel 42)" in line


def test_a_job_left_with_no_node_is_said_so(tmp_path: Path) -> None:
    """n1 excluded from a 1-node job of a partition of n1 alone: it would pend for ever."""

    class Sinfo(Scontrol):
        def run(self, argv, timeout=60.0, cwd=None):
            self.calls.append(list(argv))
            return subprocess.CompletedProcess(argv, 0, "n1\n" if argv[0] == "sinfo" else "", "")

    (tmp_path / "train.log").write_text(ECC_LOG)
    env = {**JOB, "SLURM_JOB_NODELIST": "n1", "SLURM_TASKS_PER_NODE": "4"}
    env |= {"SLURM_JOB_PARTITION": "gpu_p13", "SLURM_JOB_NUM_NODES": "1"}
    runner = Sinfo()
    line = restart_after_failure(RunDir(tmp_path), 1, 3, env=env, runner=runner, since=900.0)
    assert runner.calls[-1] == ["sinfo", "-h", "-p", "gpu_p13", "-o", "%N"]
    assert line.endswith(
        "but partition gpu_p13 is left with 0 node(s) for the job's 1: it will wait for ever. "
        "HINT: scancel 42 and submit to another partition (resources.partition), or once "
        "the nodes are repaired: scontrol update JobId=42 ExcNodeList="
    ), line
