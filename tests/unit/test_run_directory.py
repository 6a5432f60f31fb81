"""The run directory as one object (jeanzay_kit/rundir/run_directory.py, issue 56): its paths are
run_layout's names, its readers take a run that has not got that far, and the login-node
side reaches the task side's files through it."""

from __future__ import annotations

import json
from pathlib import Path

from jeanzay_kit.rundir import run_layout as layout
from jeanzay_kit.rundir.run_directory import RunDir
from tests.unit.test_import_cycles import import_graph


def test_its_paths_are_the_layouts_names(tmp_path: Path) -> None:
    run = RunDir.of(str(tmp_path))
    assert run.root == tmp_path
    named = {
        "checkpoints": layout.CHECKPOINTS,
        "metrics": layout.METRICS,
        "heartbeats": layout.HEARTBEAT,
        "result": layout.RESULT,
        "outcome": layout.OUTCOME,
        "provenance": layout.PROVENANCE,
        "lease": layout.LEASE,
        "restarts": layout.RESTARTS,
        "endings": layout.ENDINGS,
        "train_log": layout.TRAIN_LOG,
        "trackers": layout.TRACKERS,
        "hydra": layout.HYDRA,
        "command": layout.COMMAND,
        "attempts": layout.ATTEMPTS,
        "manifest": layout.MANIFEST,
    }
    assert {k: getattr(run, k) for k in named} == {k: tmp_path / v for k, v in named.items()}


def test_a_run_that_has_written_nothing_reads_as_empty(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "not-yet")
    assert run.metric_records() == run.ending_records() == run.attempt_records() == []
    assert run.restart_history() == [] and run.beats() == []
    assert run.newest_start_job() is None and run.hydra_overrides() == ()
    assert not run.is_script_run()


def test_records_being_written_or_damaged_are_skipped(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    run.metrics.write_text('{"step": 1, "loss": 2.0}\n[1, 2]\n{"step": 2, "lo')
    assert run.metric_records() == [{"step": 1, "loss": 2.0}]
    run.restarts.write_text(json.dumps({"restarts": [{"n": 2}], "history": [{"n": 1}]}))
    assert run.restart_history() == [{"n": 1}, {"n": 2}]
    run.heartbeats.mkdir()
    beat = {
        "rank": 0, "host": "n1", "pid": 7, "job_id": None, "step": 3, "total_steps": 9,
        "phase": "data", "progress_time": 1.0, "wall_time": 2.0,
    }  # fmt: skip
    (run.heartbeats / "rank-0.json").write_text(json.dumps(beat))
    (run.heartbeats / "rank-1.json").write_text('{"rank": 1')  # being replaced
    assert [(b.rank, b.step, b.phase) for b in run.beats()] == [(0, 3, "data")]
    run.attempts.write_text('{"job_id": "5"}\n')
    assert run.is_script_run() and run.attempt_records() == [{"job_id": "5"}]


def test_the_login_side_imports_nothing_from_the_task_side() -> None:
    """Issues 56 and 69: launch/, analysis/, cli/ and tune's login-side modules read a run
    through RunDir and the rooms beside it (rundir/, ending_rules), and name the task
    side's functions they hand to submitit (launch/sweep.py TaskByName): they import
    nothing from node/ or runtime/, lazy imports included. tune/task.py is a study's task
    (it runs on a node), not the login side."""
    graph = import_graph()
    login = (
        "jeanzay_kit.launch.",
        "jeanzay_kit.analysis.",
        "jeanzay_kit.cli.",
        "jeanzay_kit.tune.",
    )
    now = {
        (source, target)
        for source, targets in graph.items()
        if source.startswith(login) and source != "jeanzay_kit.tune.task"
        for target in targets
        if target.startswith(("jeanzay_kit.node", "jeanzay_kit.runtime"))
    }
    assert any(s.startswith("jeanzay_kit.launch.") for s in graph)  # the graph was read
    assert not now, (
        f"the login side imports the task side: {sorted(now)}. HINT: read the run through "
        "jeanzay_kit.rundir.run_directory.RunDir (a new record: its reader there), or name a "
        "task-side function as launch/sweep.py's TaskByName does"
    )


def test_the_sweep_hands_submitit_the_task_function_by_name() -> None:
    """launch/sweep.py names node/task.py's run_training without importing node/: the
    name survives submitit's pickling and resolves to that function on the node."""
    import pkgutil

    import cloudpickle

    from jeanzay_kit.launch.sweep import RUN_TRAINING, TaskByName
    from jeanzay_kit.node.task import run_training

    sent = cloudpickle.loads(cloudpickle.dumps(RUN_TRAINING))
    assert sent == RUN_TRAINING and len(cloudpickle.dumps(RUN_TRAINING)) < 200
    assert pkgutil.resolve_name(sent.target) is run_training
    assert TaskByName("builtins:max")(1, 3) == 3  # the call passes its arguments on
