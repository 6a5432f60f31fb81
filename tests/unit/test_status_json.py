"""`jzk status --json` and GPU hours (issue 43 points 2-3): sacct's rows of every attempt
parsed into states and hours, and the one object per run the contract names. The real
sacct's answer is checked on the local cluster (tests/slurm/test_sweep.py)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from jeanzay_kit.cli import main
from jeanzay_kit.launch.status import (
    RunProgress,
    RunView,
    parse_usage,
    run_objects,
    run_view,
    tres_gpus,
)

# sacct -X -n -P --duplicates -o JobID,State,Elapsed,ExitCode,NodeList,ElapsedRaw,AllocTRES
# of a job requeued once (2 x 4 GPUs), and an array task that ran once on one GPU.
ROWS = (
    "41|REQUEUED|00:30:00|0:0|n[1-2]|1800|billing=8,cpu=8,gres/gpu=8,node=2\n"
    "41|COMPLETED|01:00:00|0:0|n[1-2]|3600|billing=8,cpu=8,gres/gpu=8,node=2\n"
    "42_3|RUNNING|00:06:00|0:0|n1|360|cpu=2,gres/gpu:h100=1,node=1\n"
    "43|PENDING|00:00:00|0:0|None assigned|0|\n"
)


@pytest.mark.parametrize(
    ("tres", "gpus"),
    [
        ("billing=8,cpu=8,gres/gpu=8,node=2", 8),
        ("cpu=2,gres/gpu:h100=1,node=1", 1),
        ("cpu=2,gres/gpu=4,gres/gpu:a100=4", 4),  # the untyped total, not twice
        ("cpu=40,node=1", 0),
        ("", 0),
    ],
)
def test_the_gpus_of_an_allocation(tres: str, gpus: int) -> None:
    assert tres_gpus(tres) == gpus


def test_every_attempt_counts_and_the_newest_gives_the_state() -> None:
    usage = parse_usage(ROWS)
    assert usage["41"].state.state == "COMPLETED" and usage["41"].attempts == 2
    assert usage["41"].gpu_hours == pytest.approx(8 * 1.5)  # 30 min + 60 min on 8 GPUs
    assert usage["42_3"].gpu_hours == pytest.approx(0.1)
    assert usage["43"].gpu_hours == 0 and usage["43"].state.state == "PENDING"


def test_one_object_per_run_with_the_contracts_keys() -> None:
    usage = parse_usage(ROWS)
    records = [
        RunView("41", "/r/a", ("x=1",), progress=RunProgress(step=10, total=10)),
        run_view({"job_id": "44", "run_dir": "/r/b", "overrides": []}),
    ]
    states = {job: u.state for job, u in usage.items()}
    hours = {job: u.gpu_hours for job, u in usage.items()}
    first, unknown = run_objects(records, states, hours)
    assert set(first) == {
        "run_dir",
        "job_id",
        "state",
        "exit_code",
        "ending",
        "elapsed",
        "where",
        "step",
        "steps",
        "loss",
        "eta_s",
        "restarts",
        "checkpoint",
        "gpu_hours",
        "last_line",
        "verdict",
        "evidence",
        "restart_storm",
        "overrides",
        # the ledger (issue 59): null here, where the run directory recorded no start
        "goodput",
        "lost_steps",
        "startup_s",
        "queue_wait_s",
        # a pending job's wait (issue 67): null for one that is not pending
        "pending_reason",
        "pending_why",
        "start_estimate",
    }
    assert (first["state"], first["steps"], first["gpu_hours"]) == ("COMPLETED", 10, 12.0)
    assert (unknown["state"], unknown["gpu_hours"], unknown["checkpoint"]) == (
        "UNKNOWN",
        None,
        None,
    )
    json.dumps([first, unknown])  # plain JSON values only


def test_a_run_directory_of_two_jobs_has_one_ledger_over_both() -> None:
    """Job 51 cancelled after 1 h, job 52 submitted again on the same run directory for
    2 h more (2 GPUs each): its 3 starts' steps are the run's, so the run's goodput is over
    the 6 GPU hours of both jobs (a user trial saw 2.77 for the first job alone)."""
    from jeanzay_kit.launch.ledger import RunRecord, Start

    rows = (
        "51|CANCELLED by 0|01:00:00|0:0|n1|3600|cpu=2,gres/gpu=2,node=1|"
        "2026-11-28T10:00:00|2026-11-28T10:00:10\n"
        "52|COMPLETED|02:00:00|0:0|n1|7200|cpu=2,gres/gpu=2,node=1|"
        "2026-11-28T11:00:00|2026-11-28T11:00:05\n"
    )
    usage = parse_usage(rows)
    record = RunRecord(
        kept_step=5400,
        reached=5400,
        starts=(Start(0, None, 10.0), Start(1600, 1600, 10.0), Start(3000, 3550, 10.0)),
        step_s=1.5,  # 5400 kept steps x 1.5 s x 2 GPUs: 4.5 GPU hours of 6
    )
    views = [RunView(job, "/r/a", record=record) for job in ("51", "52")]
    states = {job: u.state for job, u in usage.items()}
    objs = run_objects(views, states, {j: u.gpu_hours for j, u in usage.items()}, usage)
    assert [o["gpu_hours"] for o in objs] == [2.0, 4.0]  # each job's own hours
    for obj in objs:  # the ledger: the run's, the same on both rows
        assert obj["goodput"] == pytest.approx(0.75) and obj["lost_steps"] == 550
        assert (obj["startup_s"], obj["queue_wait_s"]) == (30.0, 15.0)
    # A script run records no start: its queue wait is still sacct's.
    scripts = [RunView(job, "/r/s") for job in ("51", "52")]
    for obj in run_objects(scripts, states, {}, usage):
        assert (obj["goodput"], obj["lost_steps"], obj["queue_wait_s"]) == (None, None, 15.0)


def test_status_json_of_a_finished_local_run(tmp_path: Path, capsys) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "metrics.jsonl").write_text(json.dumps({"step": 20, "loss": 0.5}) + "\n")
    (run_dir / "model_final.sha256").write_text("abc\n")
    assert main(["status", "--json", "--watch", "1", str(run_dir)]) == 0  # ended: one pass
    (line,) = capsys.readouterr().out.splitlines()
    obj = json.loads(line)
    assert (obj["job_id"], obj["state"], obj["step"], obj["loss"]) == (
        "local",
        "COMPLETED",
        20,
        0.5,
    )
    assert obj["run_dir"] == str(run_dir) and obj["gpu_hours"] is None


def test_an_out_of_memory_end_is_said_with_the_estimate_made_at_submission(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 58 point 2: jzk submit keeps the plan's per-GPU estimate in the run's manifest
    line (launch/fit_check.py); an out-of-GPU-memory end is said with it."""
    from jeanzay_kit.cli.submit import _gpu_memory
    from jeanzay_kit.launch.request import spec_of
    from jeanzay_kit.launch.status import ending_lines

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    h100 = ["cluster=jeanzay_h100", "cluster.account=abc@h100", "model=gpt", "data=stdlib_text"]
    kept = _gpu_memory(spec_of(h100, None), h100)
    assert kept["gpu_memory"].endswith("on the 80 GiB GPU, 90% usable: 72.0 GiB"), kept
    oom = RunProgress(verdict="gpu_oom", evidence="out of GPU memory: CUDA out of memory")
    view = run_view({"job_id": "45", "run_dir": "/r/c", "overrides": h100, **kept})
    (said,) = [line for line in ending_lines([replace(view, progress=oom)]) if line]
    assert said == (
        f"45: out of GPU memory: CUDA out of memory (estimated before the queue: "
        f"{kept['gpu_memory']})"
    )


def test_a_remote_runs_row_joins_the_table_as_host_and_job() -> None:
    """Laptop mode: what `jzk status --json` said on the cluster, in this machine's table."""
    from jeanzay_kit.launch.status import remote_view, status_table

    row = {"host": "jean-zay", "run": "lap-1", "run_dir": "/w/p/outputs/lap-1", "job_id": "77",
           "state": "RUNNING", "elapsed": "0:42", "where": "n1", "step": 40, "steps": 400,
           "loss": 0.5, "eta_s": 120.0, "restarts": 1, "checkpoint": "step-50",
           "overrides": ["cluster=jeanzay_h100"]}  # fmt: skip
    view, state = remote_view(row)
    assert view.key == "jean-zay:77" and state.state == "RUNNING" and view.checkpoint == 50
    table = status_table([view], {view.key: state})
    line = table.splitlines()[1]
    assert (
        line.startswith("jean-zay:77")
        and "40/400" in line
        and "jean-zay:/w/p/outputs/lap-1" in line
    )
