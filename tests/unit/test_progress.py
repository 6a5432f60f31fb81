"""Progress lines: ETA, time left in the allocation, and the one requeue note."""

from __future__ import annotations

import io
import time
from pathlib import Path

import pytest

from jeanzay_kit.rundir.progress import format_duration, outlook
from jeanzay_kit.rundir.run_directory import RunDir
from jeanzay_kit.runtime.metrics import MetricsWriter
from tests.unit.slurm_answers import Answers


@pytest.mark.parametrize(
    ("seconds", "text"), [(0, "0s"), (12.4, "12s"), (245, "4m05s"), (3720, "1h02m")]
)
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


@pytest.mark.parametrize(
    ("left_s", "requeues"),
    [
        (None, 0),  # no Slurm time limit: nothing to say
        (3000.0, 0),  # 1000 s of work fit in 3000 s - 120 s lead
        (600.0, 1),  # 480 s usable now, 520 s more fit in one 3600 s allocation
        (100.0, 1),  # nothing usable now (the lead eats it): 1000 s in the next one
    ],
)
def test_outlook_counts_the_allocations_still_needed(left_s, requeues) -> None:
    view = outlook(
        step=0, total=1000, step_time_s=1.0, left_s=left_s, allocation_s=3600.0, lead_s=120.0
    )
    assert view.eta_s == 1000.0 and view.requeues == requeues


def test_log_lines_show_eta_time_left_and_say_once_that_requeues_are_needed(
    tmp_path: Path,
) -> None:
    out = io.StringIO()  # not a terminal: plain lines, no progress bar
    writer = MetricsWriter(
        RunDir(tmp_path),
        True,
        total_steps=1000,
        stream=out,
        end_time=time.time() + 600,
        allocation_s=3600,
        lead_s=120,
    )
    for step in (100, 200):
        writer.log({"step": step, "loss": 1.0, "step_time_s": 2.0, "samples_per_s": 16.0})
    writer.close()
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("step 100/1000 | loss 1.0000 | 2.000 s/step")
    assert "ETA 30m00s" in lines[0] and "left in the allocation" in lines[0]
    notes = [line for line in lines if "more allocation(s)" in line]
    assert len(notes) == 1 and "the remaining 900 steps take 30m00s" in notes[0]
    assert "\r" not in out.getvalue()


@pytest.mark.parametrize(
    ("text", "expected"),
    [("2026-11-23T15:30:00\n", "2026-11-23T15:30:00"), ("Unknown\n", None), ("", None)],
)
def test_job_end_time_reads_squeue_once(text: str, expected: str | None) -> None:
    from datetime import datetime

    from jeanzay_kit.slurm.commands import job_end_time

    runner = Answers(text)
    end = job_end_time("42", runner)
    assert runner.argv == ["squeue", "-h", "-j", "42", "-o", "%e"]
    assert end == (datetime.fromisoformat(expected).timestamp() if expected else None)


def test_the_input_bound_verdict_needs_three_windows_over_the_threshold() -> None:
    from jeanzay_kit.rundir.progress import input_bound, input_bound_note

    assert not input_bound([0.5, 0.5])  # too few windows
    assert input_bound([0.0, 0.2, 0.5, 0.11])
    assert not input_bound([0.5, 0.5, 0.09])
    # 11% of a toy 5 ms step is the loader's own bookkeeping, not a reason to act.
    assert not input_bound([0.11, 0.11, 0.11], [0.0005] * 3)
    assert input_bound([0.11, 0.11, 0.11], [0.004] * 3)
    note = input_bound_note([0.2, 0.4, 0.3], "loader.num_workers=2")
    assert "20%-40%" in note and "loader.num_workers=2" in note and "HINT" in note
