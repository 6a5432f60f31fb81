"""Which processes a rank ends with it after a hang (runtime/child_processes.py): the
/proc stat lines read as Linux writes them, and the live tree of this test's own child."""

from __future__ import annotations

import subprocess
import sys

import pytest

from jeanzay_kit.runtime.child_processes import (
    descendants,
    parent_and_state,
    read_stats,
)


@pytest.mark.parametrize(
    ("stat", "expected"),
    [
        ("41 (python) S 40 41 40 0 -1 4194560 1375", (40, "S")),
        # The command name may hold spaces and parentheses: the last ")" ends it.
        ("77 (pt_data_worker) T 41 41 40 0", (41, "T")),
        ("78 (a b) c)) R 1 78 78 0", (1, "R")),
    ],
)
def test_a_stat_line_gives_the_parent_and_the_state(stat: str, expected: tuple) -> None:
    assert parent_and_state(stat) == expected


def test_descendants_are_the_whole_tree_under_the_process_and_nothing_else() -> None:
    stats = {
        10: "10 (rank) S 1 10 10",
        11: "11 (worker) T 10 10 10",
        12: "12 (worker) S 10 10 10",
        13: "13 (helper) S 11 10 10",
        20: "20 (other rank) S 1 20 20",
        21: "21 (its worker) S 20 20 20",
    }
    assert descendants(10, stats) == [(11, "T"), (12, "S"), (13, "S")]
    assert descendants(13, stats) == []


def test_a_live_child_is_found_in_proc() -> None:
    import os

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        found = dict(descendants(os.getpid(), read_stats()))
        assert child.pid in found and found[child.pid] in "SR"
    finally:
        child.kill()
        child.wait()
