"""After a failed job step: requeue within the restart budget (node/restart_job.py).

The Slurm command goes through the runner seam; the budget file is real."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from jeanzay_kit.node.restart_job import restart_after_failure
from jeanzay_kit.node.restarts import read_restarts


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
    assert restart_after_failure(tmp_path, status, 3, env=JOB, runner=runner) == ""
    assert runner.calls == [] and read_restarts(tmp_path) == []


def test_a_hang_is_recorded_and_the_array_task_requeued(tmp_path: Path) -> None:
    runner = Scontrol()
    env = {**JOB, "SLURM_ARRAY_JOB_ID": "40", "SLURM_ARRAY_TASK_ID": "2"}
    line = restart_after_failure(tmp_path, 4, 3, env=env, runner=runner)
    assert runner.calls == [["scontrol", "requeue", "40_2"]]
    assert line == (
        "jzk: hang; requeued job 40_2 (1/3): it resumes from the newest complete checkpoint"
    )
    assert [r["reason"] for r in read_restarts(tmp_path)] == ["hang"]


def test_an_exhausted_budget_stops_without_requeue(tmp_path: Path) -> None:
    runner = Scontrol()
    for _ in range(2):
        restart_after_failure(tmp_path, 137, 2, env=JOB, runner=runner)
    line = restart_after_failure(tmp_path, 137, 2, env=JOB, runner=runner)
    assert len(runner.calls) == 2 and len(read_restarts(tmp_path)) == 2
    assert line.startswith("jzk: failure (srun exit 137); the run has used its 2 restart(s)")
    assert "not requeued. HINT:" in line


def test_a_refused_requeue_is_said(tmp_path: Path) -> None:
    line = restart_after_failure(tmp_path, 1, 3, env=JOB, runner=Scontrol(fail=True))
    assert line.startswith("jzk: failure (srun exit 1); could not requeue job 42:")
    assert "denied" in line


def test_outside_slurm_nothing_is_requeued(tmp_path: Path) -> None:
    runner = Scontrol()
    line = restart_after_failure(tmp_path, 4, 3, env={}, runner=runner)
    assert line == "jzk: hang, and this is not a Slurm job: nothing to requeue"
    assert runner.calls == [] and read_restarts(tmp_path) == []


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
    line = restart_after_failure(tmp_path, 1, 3, env=JOB, runner=runner, since=900.0)
    assert (runner.calls == [["scontrol", "requeue", "42"]]) is requeued
    assert (len(read_restarts(tmp_path)) == 1) is requeued
    if not requeued:
        assert "before any step of this attempt completed: not requeued" in line
        assert "(no restart spent)" in line
