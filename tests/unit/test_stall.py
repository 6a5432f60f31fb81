"""The watchdog's verdict from heartbeats (runtime/stall.py), as a table."""

from __future__ import annotations

from pathlib import Path

import pytest

from jeanzay_kit.rundir.beats import Beat
from jeanzay_kit.rundir.run_directory import RunDir
from jeanzay_kit.runtime.stall import find_stall

NOW = 1000.0


def beat(rank: int, progress_age: float, beat_age: float, **kw) -> Beat:
    fields = dict(
        rank=rank,
        host=f"n{rank}",
        pid=100 + rank,
        job_id="42",
        step=7,
        total_steps=50,
        phase="forward_backward",
        progress_time=NOW - progress_age,
        wall_time=NOW - beat_age,
        token="t",
        interval_s=1.0,
    )
    fields.update(kw)
    return Beat(**fields)


@pytest.mark.parametrize(
    ("beats", "expected"),
    [
        pytest.param([beat(0, 1, 0.5), beat(1, 2, 0.2)], None, id="all moving"),
        pytest.param([beat(0, 11, 0.5), beat(1, 12, 11)], (1, True), id="one frozen (SIGSTOP)"),
        pytest.param(
            [beat(0, 11, 0.5), beat(1, 9, 9)],
            (0, False),
            id="stuck alive, its peer frozen too briefly to count",
        ),
        pytest.param([beat(0, 20, 0.5), beat(1, 15, 0.5)], (0, False), id="stuck, oldest named"),
        pytest.param(
            [beat(0, 20, 0.5, phase="backward"), beat(1, 15, 0.5, phase="own_step")],
            (1, False),
            id="a session rank in its own code before one waiting in the backward",
        ),
        pytest.param(
            [beat(0, 30, 30, token="old"), beat(1, 1, 0.5)], None, id="earlier attempt ignored"
        ),
        pytest.param(
            [beat(0, 30, 30, phase="done"), beat(1, 1, 0.5)], None, id="finished rank ignored"
        ),
        pytest.param([], None, id="no beats yet"),
        # Starting (imports, the rendezvous): 60 s at least before the first step.
        pytest.param([beat(0, 30, 0.5, phase="start"), beat(1, 1, 0.5)], None, id="starting"),
        pytest.param(
            [beat(0, 70, 0.5, phase="start"), beat(1, 1, 0.5)], (0, False), id="start hung"
        ),
    ],
)
def test_find_stall(beats: list[Beat], expected: tuple[int, bool] | None) -> None:
    stall = find_stall(beats, NOW, stall_seconds=10, token="t")
    if expected is None:
        assert stall is None
        return
    assert stall is not None
    assert (stall.beat.rank, stall.frozen) == expected


def test_the_lowest_live_rank_reports_and_the_message_names_everything() -> None:
    stall = find_stall([beat(0, 12, 12), beat(1, 11, 0.5), beat(2, 11, 0.4)], NOW, 10, "t")
    assert stall is not None and stall.reporter == 1 and stall.live_ranks == (1, 2)
    assert stall.message(10) == (
        "rank 0 (host n0, pid 100) has written no heartbeat and made no progress for 12 s "
        "(the process is stopped, dead, or hung in native code), at step 7/50 in phase "
        "forward_backward; watchdog.stall_seconds=10"
    )
    assert RunDir(Path("run")).hang_dir(stall.beat.step) == Path("run", "hang-7")


def test_a_frozen_rank_is_named_at_the_step_the_run_reached_not_its_last_beat() -> None:
    """SIGSTOP freezes a rank's heartbeat writer with it: its beat is up to an interval
    old (81 steps of 6 ms in a rehearsal: hang-769 for a run stopped at 850). The others
    wait for it at the step the run reached, which names the hang and its folder."""
    at = {"total_steps": 3000}
    frozen = beat(1, 12, 12, step=769, phase="optimizer", **at)
    waiting = [beat(0, 11, 0.4, step=850, phase="backward", **at), beat(2, 11, 0.5, step=850, **at)]
    stall = find_stall([frozen, *waiting], NOW, 10, "t")
    assert stall is not None and stall.beat.rank == 1 and stall.frozen
    assert stall.step == 850
    said = (
        "while the run is at step 850/3000 (this rank's last heartbeat: step 769, "
        "in phase optimizer)"
    )
    assert said in stall.message(10)
