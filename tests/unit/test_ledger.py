"""Where a run's GPU hours went (issue 59 point 3): the ledger's arithmetic, pure
(launch/ledger.py), and sacct's queue wait. The run's own records are tested on real runs
in tests/distributed/test_ledger_runs.py, sacct's on the local cluster."""

from __future__ import annotations

import pytest

from jeanzay_kit.launch.ledger import (
    Ledger,
    RunRecord,
    Start,
    ledger,
    ledger_table,
    run_record,
    study_total,
    total,
)
from jeanzay_kit.launch.status import parse_usage, queue_wait

HOURS = ("productive_h", "retrained_h", "after_save_h", "startup_h", "checkpoint_h", "idle_h")


def parts_sum(one: Ledger) -> float:
    return sum(getattr(one, key) for key in HOURS)


@pytest.mark.parametrize(
    ("case", "starts", "kept", "reached", "ended", "lost"),
    [
        # crashed at step 130 with step-100 saved: the restart trains 100..130 again
        ("crash", [Start(0, None, 30.0), Start(100, 130, 20.0)], 200, 200, True, 30),
        # stopped by a signal: saved at the step it stopped at, nothing trained twice
        ("signal", [Start(0, None, 30.0), Start(120, 120, 20.0)], 200, 200, True, 0),
        # cancelled at 150 with step-100 saved: 50 steps after the last save, lost
        ("ended", [Start(0, None, 30.0)], 100, 150, True, 50),
        # the same run still running: those steps are in flight, not lost
        ("running", [Start(0, None, 30.0)], 100, 150, False, 0),
        ("two crashes", [Start(0, None, 5), Start(10, 17, 5), Start(20, 29, 5)], 40, 40, True, 16),
    ],
)
def test_lost_steps_and_a_ledger_that_sums_to_sacct(case, starts, kept, reached, ended, lost):
    record = RunRecord(kept, reached, tuple(starts), step_s=2.0, checkpoint_s=12.0)
    one = ledger(record, allocated_h=1.0, gpus=4, queue_wait_s=60.0, ended=ended)
    assert one.lost_steps == lost, case
    assert parts_sum(one) == pytest.approx(1.0)  # sacct's GPU hours, exactly
    assert one.productive_h == pytest.approx(kept * 2.0 * 4 / 3600)
    assert one.startup_h == pytest.approx(sum(s.startup_s for s in starts) * 4 / 3600)
    assert one.goodput == pytest.approx(one.productive_h / 1.0)
    assert (one.queue_wait_s, one.starts) == (60.0, len(starts))


def test_without_accounting_hours_are_unknown_but_steps_are_counted() -> None:
    one = ledger(RunRecord(10, 14, (Start(0, None, 3.0),), 1.0), None, 0)
    assert one.allocated_h is None and one.idle_h is None and one.goodput is None
    assert (one.lost_steps, one.startup_s) == (4, 3.0)


def test_a_sweep_sums_its_runs() -> None:
    a = ledger(RunRecord(100, 100, (Start(0, None, 10.0),), 1.0), 2.0, 8, 30.0)
    b = ledger(RunRecord(50, 70, (Start(0, None, 10.0),), 1.0), 1.0, 8, None)
    both = total([a, b])
    assert both.allocated_h == pytest.approx(3.0)
    assert parts_sum(both) == pytest.approx(3.0)
    assert (both.lost_steps, both.kept_steps, both.queue_wait_s) == (20, 150, 30.0)
    assert both.goodput == pytest.approx((a.productive_h + b.productive_h) / 3.0)
    table = ledger_table([("a", a), ("b", b)]).splitlines()
    assert [line.split()[0] for line in table] == ["RUN", "a", "b", "in"]
    assert "in all  3.00" in table[-1]
    # A short run's hours keep three significant digits, not 0.00 (a user trial's run of
    # 0.0194 GPU hours showed 0.02 and six columns of 0.00 beside 550 lost steps).
    small = ledger(RunRecord(3000, 3000, (Start(0, None, 3.0),), 0.0084), 0.019444, 2)
    row = ledger_table([("short", small)]).splitlines()[1].split()
    assert row[1:4] == ["0.0194", "0.014", "0"], row


def test_the_run_record_reads_starts_and_steady_step_times() -> None:
    starts = [
        {"start_step": 0, "reached_before": None, "startup_s": 31.5},
        {"start_step": "x"},  # damaged: left out
        {"end_step": 4, "ckpt_block_s": 1.5},  # the first attempt's end: its last save
        {"start_step": 4, "reached_before": 6, "startup_s": 8.5},
    ]
    metrics = [
        {"step": 1, "step_time_s": 30.0, "compile_s": 30.0},  # the compiling window
        {"step": 2, "step_time_s": 0.5, "ckpt_block_s": 0.25},
        {"step": 3, "step_time_s": 0.7, "ckpt_block_s": 0.0},
        {"step": 4, "step_time_s": 0.6},
    ]
    record = run_record(starts, metrics, 4, 6)
    assert [s.retrained for s in record.starts] == [0, 2]
    assert len(record.starts) == 2 and record.kept_step == 4
    assert (record.step_s, record.checkpoint_s) == (0.6, 0.25 + 1.5)


def test_queue_wait_of_every_start_from_sacct() -> None:
    rows = (
        "41|REQUEUED|00:30:00|0:0|n1|1800|gres/gpu=8|2026-11-27T10:00:00|2026-11-27T10:05:00\n"
        "41|COMPLETED|01:00:00|0:0|n1|3600|gres/gpu=8|2026-11-27T10:35:10|2026-11-27T10:36:00\n"
        "43|PENDING|00:00:00|0:0|None assigned|0||2026-11-27T11:00:00|Unknown\n"
    )
    usage = parse_usage(rows)
    assert usage["41"].queue_wait_s == pytest.approx(300 + 50)
    assert (usage["41"].gpus, usage["41"].gpu_hours) == (8, pytest.approx(12.0))
    assert usage["43"].queue_wait_s is None
    assert queue_wait("2026-11-27T10:00:00", "None") is None


def test_the_picture_of_where_the_hours_went(tmp_path) -> None:
    from jeanzay_kit.analysis.plots import write_hours_plot

    a = ledger(RunRecord(100, 100, (Start(0, None, 10.0),), 1.0), 2.0, 8)
    b = ledger(RunRecord(50, 70, (Start(0, None, 10.0),), 1.0), 1.0, 8)
    path = write_hours_plot([("a", a), ("b", b)], tmp_path)
    assert path is not None and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    local = ledger(RunRecord(10, 10, (Start(0, None, 1.0),), 1.0), None, 0)
    assert write_hours_plot([("local", local)], tmp_path / "none") is None


def test_a_study_weighs_its_trials_against_its_arrays_hours() -> None:
    # Two trials run one after the other in a task of 2 GPUs: their parts in GPU hours
    # without an allocation of their own; the study's row takes the array's hours.
    a = ledger(RunRecord(90, 90, (Start(0, None, 18.0),), 20.0, checkpoint_s=9.0), None, 2)
    b = ledger(RunRecord(45, 60, (Start(0, None, 18.0),), 20.0), None, 2)
    assert a.allocated_h is None and a.idle_h is None and a.goodput is None
    assert a.productive_h == pytest.approx(90 * 20.0 * 2 / 3600)
    study = study_total([a, b], allocated_h=2.0, queue_wait_s=40.0)
    assert parts_sum(study) == pytest.approx(2.0)  # the array's sacct hours, exactly
    trials_h = sum(getattr(one, key) for one in (a, b) for key in HOURS[:-1])
    assert study.idle_h == pytest.approx(2.0 - trials_h)
    assert (study.kept_steps, study.lost_steps, study.starts) == (135, 15, 2)
    assert study.goodput == pytest.approx((90 + 45) * 20.0 * 2 / 3600 / 2.0)
    rows = ledger_table([("trial-0", a), ("trial-1", b)], in_all=study).splitlines()
    assert [line.split()[0] for line in rows] == ["RUN", "trial-0", "trial-1", "in"]
    assert rows[-1].split()[2] == "2.00" and rows[1].split()[1] == "-"
