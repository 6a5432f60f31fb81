"""The launcher's pure parts: spec -> submitit parameters, sweep -> arrays, manifest,
squeue/sacct parsing and the status table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jeanzay_kit.config.compose import compose_config
from jeanzay_kit.config.spec import build_job_spec
from jeanzay_kit.errors import JzkError, LaunchError
from jeanzay_kit.launch.arrays import SweepPoint, plan_arrays, submitit_parameters
from jeanzay_kit.launch.manifest import append_manifest, read_manifest, write_manifest
from jeanzay_kit.launch.status import (
    RunProgress,
    RunView,
    parse_sacct,
    parse_squeue,
    run_view,
    status_table,
    summary,
)
from jeanzay_kit.rundir.run_directory import RunDir


def spec(*overrides: str):
    return build_job_spec(compose_config(["cluster=slurm_local", *overrides]))


def point(num: int, *overrides: str) -> SweepPoint:
    return SweepPoint(num, overrides, f"/sweep/{num}", spec(*overrides))


def test_parameters_carry_the_validated_request() -> None:
    params = submitit_parameters(
        spec("resources.nodes=2", "resources.gpus_per_node=2", "resources.time=00:30:00")
    )
    assert params["nodes"] == 2 and params["ntasks_per_node"] == 2
    assert params["gres"] == "gpu:2" and params["time"] == 30
    assert params["partition"] == "debug" and params["cpus_per_task"] == 1
    # The job's own signal and lead, not submitit's USR2@90.
    assert params["additional_parameters"] == {"signal": "USR1@120", "requeue": True}
    assert params["srun_args"] == ["--kill-on-bad-exit=1"]
    assert "export SRUN_CPUS_PER_TASK=1" in params["setup"]


def test_jean_zay_profile_selects_by_constraint_with_modules() -> None:
    s = build_job_spec(
        compose_config(["cluster=jeanzay_h100", "cluster.account=abc@h100", "job.name=run1"])
    )
    params = submitit_parameters(s)
    assert "partition" not in params  # Jean Zay selects H100 nodes with -C h100
    assert params["constraint"] == "h100" and params["account"] == "abc@h100"
    setup = params["setup"]
    loads = [i for i, line in enumerate(setup) if line.startswith("module load ")]
    assert loads and setup.index("module purge") < loads[0]
    assert params["additional_parameters"]["hint"] == "nomultithread"


def test_rendered_by_submitit_the_script_has_our_signal_and_requeue(tmp_path: Path) -> None:
    from submitit.slurm.slurm import _make_sbatch_string

    params = submitit_parameters(spec("preemption.lead_seconds=90", "preemption.requeue=false"))
    text = _make_sbatch_string(command="python -m x", folder=tmp_path, **params)
    assert "#SBATCH --signal=USR1@90" in text.splitlines()
    assert "#SBATCH --no-requeue" in text.splitlines()
    assert "srun --unbuffered" in text and "--kill-on-bad-exit=1" in text


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("job.name='my run'", "job.name"),
        ('job.name="it\'s"', "job.name"),
        ("resources.constraint='v100&h100'", "resources.constraint"),
    ],
)
def test_values_submitit_would_misquote_are_refused(override: str, key: str) -> None:
    with pytest.raises(LaunchError, match=rf"{key}=.*jzk submit"):
        submitit_parameters(spec(override))


def test_torchrun_is_refused_with_a_hint() -> None:
    with pytest.raises(LaunchError, match="parallel.launcher='torchrun'"):
        submitit_parameters(spec("parallel.launcher=torchrun"))


def test_points_group_by_shape_in_sweep_order() -> None:
    points = [
        point(0, "resources.nodes=1", "optim.lr=0.1"),
        point(1, "resources.nodes=2", "optim.lr=0.1"),
        point(2, "resources.nodes=1", "optim.lr=0.01"),
        point(3, "resources.nodes=2", "optim.lr=0.01"),
    ]
    plans = plan_arrays(points, max_array_size=1001)
    assert [[p.num for p in plan.points] for plan in plans] == [[0, 2], [1, 3]]
    assert [plan.parameters["nodes"] for plan in plans] == [1, 2]


@pytest.mark.parametrize(
    ("count", "max_size", "sizes"),
    [(5, 2, [2, 2, 1]), (4, 4, [4]), (1, 1, [1]), (1001, 1000, [1000, 1])],
)
def test_arrays_are_chunked_to_max_array_size(count: int, max_size: int, sizes) -> None:
    base = point(0)
    points = [SweepPoint(i, (), f"/sweep/{i}", base.spec) for i in range(count)]
    plans = plan_arrays(points, max_array_size=max_size)
    assert [len(plan.points) for plan in plans] == sizes
    assert [p.num for plan in plans for p in plan.points] == list(range(count))


def test_manifest_round_trip_and_append(tmp_path: Path) -> None:
    rec = {"job_id": "12_0", "overrides": ["a=1"], "run_dir": "/r/0"}
    write_manifest(RunDir(tmp_path), [rec])
    append_manifest(RunDir(tmp_path), {"job_id": "13", "overrides": [], "run_dir": "/r/0"})
    assert [r["job_id"] for r in read_manifest(tmp_path / "manifest.jsonl")] == ["12_0", "13"]
    assert not list(tmp_path.glob(".*tmp"))
    for damaged in ({"overrides": []}, {"job_id": None}, {"job_id": ""}):
        (tmp_path / "manifest.jsonl").write_text(json.dumps(damaged) + "\n")
        with pytest.raises(JzkError, match="manifest.jsonl:1: a manifest line needs a job_id"):
            read_manifest(tmp_path / "manifest.jsonl")


SQUEUE = """\
12_0|RUNNING|1:02|1:00:00|n1
12_1|PENDING|0:00|1:00:00|(Priority)
13|COMPLETING|0:10|1:00:00|n[1-2]
"""
SACCT = """\
11|COMPLETED|00:00:07|0:0|n1
12_2|CANCELLED by 0|00:00:03|0:15|n2
14|FAILED|00:00:01|2:0|n1
"""


def test_squeue_and_sacct_rows_are_parsed() -> None:
    q = parse_squeue(SQUEUE)
    assert q["12_1"].state == "PENDING" and q["12_1"].where == "(Priority)"
    assert q["13"].where == "n[1-2]"
    a = parse_sacct(SACCT)
    assert a["12_2"].state == "CANCELLED" and a["12_2"].exit_code == "0:15"
    assert a["14"].source == "sacct"


def test_status_table_shows_state_progress_heartbeat_and_exit_code() -> None:
    states = {**parse_sacct(SACCT), **parse_squeue(SQUEUE)}
    progress = RunProgress(step=300, total=2000, loss=0.5, eta_s=125, oldest_beat_s=4, restarts=1)
    records = [
        RunView("12_0", "/s/0", ("optim.lr=0.1",), checkpoint=40, progress=progress),
        run_view({"job_id": "14", "run_dir": "/s/1", "overrides": []}),
        run_view({"job_id": 99, "run_dir": "/s/2"}),  # a number, as an old manifest has it
    ]
    lines = status_table(records, states).splitlines()
    assert lines[0].split() == [
        "JOB",
        "STATE",
        "ELAPSED",
        "STEP",
        "LOSS",
        "EVAL",
        "DATA",
        "ETA",
        "BEAT",
        "RESTARTS",
        "CKPT",
        "WHERE",
        "RUN",
        "DIR",
        "OVERRIDES",
    ]
    assert lines[1].split() == [
        "12_0",
        "RUNNING",
        "1:02",
        "300/2000",
        "0.5000",
        "-",  # no evaluation yet
        "-",
        "2m05s",
        "4s",
        "ago",
        "1",
        "step-40",
        "n1",
        "/s/0",
        "optim.lr=0.1",
    ]
    assert "FAILED (exit 2)" in lines[2]  # Slurm's ExitCode 2:0 in words
    assert lines[3].split()[:2] == ["99", "UNKNOWN"]
    assert summary(["RUNNING", "FAILED", "RUNNING"]) == "1 FAILED, 2 RUNNING"


def _sbatch_options(script: str) -> dict[str, str | None]:
    """The #SBATCH options of a script: name -> value (None for a switch)."""
    out: dict[str, str | None] = {}
    for line in script.splitlines():
        if line.startswith("#SBATCH --"):
            name, _, value = line[len("#SBATCH --") :].partition("=")
            out[name] = value or None
    return out


@pytest.mark.parametrize(
    "overrides",
    [
        ["cluster=slurm_local", "resources.nodes=2", "resources.gpus_per_node=2"],
        ["cluster=slurm_local", "resources.partition=low", "preemption.requeue=false"],
        [
            "cluster=jeanzay_h100",
            "cluster.account=abc@h100",
            "resources.nodes=2",
            "resources.gpus_per_node=4",
            "train.global_batch_size=64",
            "resources.mem=64G",
        ],
        ["cluster=generic_slurm", "resources.qos=normal", "preemption.signal=USR2"],
    ],
    ids=["local-2x2", "low-no-requeue", "h100-constraint-mem", "generic-gpus-qos"],
)
def test_both_submit_paths_ask_slurm_for_the_same_thing(tmp_path: Path, overrides) -> None:
    """The rendered script and the launcher's submitit script carry the same request: one
    flag builder (slurm/flags.py) feeds both."""
    from submitit.slurm.slurm import _make_sbatch_string

    from jeanzay_kit.slurm.sbatch import render_sbatch
    from jeanzay_kit.slurm_syntax.timefmt import parse_time

    s = build_job_spec(compose_config(overrides))
    ours = _sbatch_options(render_sbatch(s))
    theirs = _sbatch_options(
        _make_sbatch_string(command="python -m x", folder=tmp_path, **submitit_parameters(s))
    )
    # Each path's own files: logs, the working directory, submitit's wckey.
    for own in ("output", "error", "open-mode", "chdir", "wckey"):
        ours.pop(own, None)
        theirs.pop(own, None)
    # submitit writes --time in minutes, the script as HH:MM:SS: the same limit.
    assert parse_time(ours.pop("time")) == parse_time(theirs.pop("time"))
    assert ours == theirs
