"""A rank that dies at exit after the run's work was done (issue 65, point 9): the rule
(ending_rules.died_at_exit, forgiven_at_exit, peers_undecided) from the real report, and the
wrapper's wait for the other tasks' last beats (node/script_watch.py after_the_work)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from jeanzay_kit.ending.ending_rules import (
    AtExit,
    died_at_exit,
    forgiven_at_exit,
    peers_undecided,
)
from jeanzay_kit.node import script_watch
from jeanzay_kit.node.script_watch import Ended, Watch, after_the_work
from jeanzay_kit.rundir.beats import ScriptBeat
from jeanzay_kit.rundir.run_directory import RunDir
from jeanzay_kit.script.script_files import write_script_beat

# PyTorch's DDP tutorial on the local Slurm cluster, torch 2.13, gloo: rank 1's stderr
# after its last epoch (a gloo worker thread released the last allreduce's work during
# Py_FinalizeEx; pytorch/pytorch#190489).
AT_EXIT = """[GPU1] Epoch 3 | Batchsize: 32
terminate called without an active exception
Fatal Python error: Aborted

Thread 0x00007fbd6907ab80 (most recent call first):
  <no Python frame>

Extension modules: numpy._core._multiarray_umath, torch._C, torch._C._nn (total: 3)
"""
# The same abort while the program still ran: the main thread is in the script.
IN_PROGRAM = """Fatal Python error: Aborted

Current thread 0x00007f0e5c1f8740 (most recent call first):
  File "/p/multinode.py", line 47 in <module>
"""
# An uncaught error, then the abort at exit: the program meant exit 1.
AFTER_TRACEBACK = (
    """Traceback (most recent call last):
  File "/p/multinode.py", line 47, in <module>
ValueError: bad batch
"""
    + AT_EXIT
)


@pytest.mark.parametrize(
    ("code", "tail", "at_exit"),
    [
        (-6, AT_EXIT, True),
        (-6, IN_PROGRAM, False),
        (-6, AFTER_TRACEBACK, False),
        (-6, "Aborted (core dumped)\n", False),  # no faulthandler report: unknown
        (1, AT_EXIT, False),  # an exit code, not the abort
        (-11, AT_EXIT, False),  # a segfault is not this
        (0, "", False),
    ],
)
def test_a_command_died_at_exit_when_faulthandler_shows_its_program_ended(
    code: int, tail: str, at_exit: bool
) -> None:
    assert died_at_exit(code, tail) is at_exit


NOTE_1 = "rank 1 died at exit after the work was done (exit 134)"


@pytest.mark.parametrize(
    ("rank", "code", "at_exit", "peers", "world", "note"),
    [
        # The report: task 0's command exited 0, rank 1 died at exit after it.
        (1, -6, True, {0: (0, False)}, 2, NOTE_1),
        # Rank 0 died at exit, rank 1 exited 0 (seen as often as the other way).
        (0, -6, True, {1: (0, False)}, 2, "rank 0 died at exit after the work was done (exit 134)"),
        # Both died at exit: each one's work was done.
        (1, -6, True, {0: (-6, True)}, 2, NOTE_1),
        (1, -6, True, {0: (0, False), 2: (0, False), 3: (-6, True)}, 4, NOTE_1),
        # A peer failed for real: a failure of the run.
        (1, -6, True, {0: (1, False)}, 2, None),
        (1, -6, True, {0: (4, False)}, 2, None),  # task 0 hung
        # A peer's end is unknown (still running, or its node lost): not known done.
        (1, -6, True, {}, 2, None),
        (1, -6, True, {0: (0, False)}, 3, None),
        # Not at exit: a crash, whatever the others did.
        (1, -6, False, {0: (0, False)}, 2, None),
        (1, 1, False, {0: (0, False)}, 2, None),
        # Alone: nothing says what the program meant to return (exit 3 asks for a requeue).
        (0, -6, True, {}, 1, None),
        (1, 0, False, {0: (0, False)}, 2, None),  # no failure to excuse
    ],
)
def test_a_rank_that_died_at_exit_after_the_work_spends_no_restart(
    rank: int,
    code: int,
    at_exit: bool,
    peers: dict[int, tuple[int, bool]],
    world: int,
    note: str | None,
) -> None:
    forgiven = forgiven_at_exit(rank, code, at_exit, peers, world)
    assert (forgiven and forgiven.note) == note and not (forgiven and forgiven.stopped)


STOP_1 = "rank 1 died at exit after the stop signal (exit 134)"


@pytest.mark.parametrize(
    ("code", "at_exit", "peers", "world", "note"),
    [
        # A stop signal was passed on: its program ended, so it handled it. Whatever the
        # others did (still saving, or stopped), it is the stop's end, not a crash.
        (-6, True, {}, 2, STOP_1),
        (-6, True, {0: (3, False)}, 2, STOP_1),
        (-6, True, {0: (-6, True)}, 4, STOP_1),
        # Died of something else, or while its program ran: still a crash.
        (-6, False, {0: (3, False)}, 2, None),
        (-11, False, {}, 2, None),
        (-6, True, {}, 1, None),  # alone: its own stop says nothing of the abort
    ],
)
def test_a_rank_that_died_at_exit_after_the_stop_signal_is_part_of_the_stop(
    code: int, at_exit: bool, peers: dict[int, tuple[int, bool]], world: int, note: str | None
) -> None:
    forgiven = forgiven_at_exit(1, code, at_exit, peers, world, stopped=True)
    assert (forgiven and forgiven.note) == note and (forgiven is None or forgiven.stopped)


@pytest.mark.parametrize(
    ("peers", "world", "undecided"),
    [
        ({}, 2, True),  # task 0 still exiting: wait for it
        ({0: (0, False)}, 2, False),
        ({0: (0, False)}, 3, True),
        ({0: (1, False)}, 3, False),  # one failed: decided at once
        ({0: (-6, True), 2: (0, False)}, 3, False),
    ],
)
def test_the_wait_ends_when_every_peer_ended_or_one_failed(
    peers: dict[int, tuple[int, bool]], world: int, undecided: bool
) -> None:
    assert peers_undecided(1, peers, world) is undecided


def test_a_scripts_last_beat_carries_its_end_and_an_older_beat_still_reads(tmp_path) -> None:
    beat = ScriptBeat(1, "n2", 7, "5-100", 1.0, "x", 2.0, 2.0, True, code=-6, at_exit=True)
    assert ScriptBeat.from_json(json.loads(json.dumps(beat.to_json()))) == beat
    old = {k: v for k, v in beat.to_json().items() if k not in ("code", "at_exit")}
    assert ScriptBeat.from_json(old) == ScriptBeat(1, "n2", 7, "5-100", 1.0, "x", 2.0, 2.0, True)


def _beat(run_dir: Path, rank: int, code: int | None, token: str = "5-100") -> None:
    now = time.time()
    write_script_beat(
        RunDir(run_dir),
        ScriptBeat(rank, f"n{rank}", 10 + rank, token, now, "", now, 2.0, code is not None, code),
    )


def test_the_wrapper_waits_for_task_0_then_ends_well(tmp_path, monkeypatch) -> None:
    watch = Watch(RunDir(tmp_path), 1, "5-100", 100.0)
    _beat(tmp_path, 0, None)  # task 0 still running
    _beat(tmp_path, 0, 0, token="5-50")  # an earlier attempt's end does not count
    monkeypatch.setattr(script_watch, "PEERS_WAIT_S", 0.3)
    assert after_the_work(watch, 2, Ended(-6, True)) is None  # never ended: a failure
    _beat(tmp_path, 0, 0)
    assert after_the_work(watch, 2, Ended(-6, True)) == AtExit(NOTE_1, stopped=False)
    assert after_the_work(watch, 2, Ended(1)) is None  # a crash never waits


def test_after_a_stop_signal_the_wrapper_does_not_wait(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(script_watch, "PEERS_WAIT_S", 30.0)
    watch = Watch(RunDir(tmp_path), 1, "5-100", 100.0)
    _beat(tmp_path, 0, None)  # task 0 still saving after the signal
    started = time.monotonic()
    assert after_the_work(watch, 2, Ended(-6, True, signalled=True)) == AtExit(STOP_1, True)
    assert time.monotonic() - started < 1.0


def test_a_crash_does_not_wait_for_the_others(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(script_watch, "PEERS_WAIT_S", 30.0)
    started = time.monotonic()
    assert after_the_work(Watch(RunDir(tmp_path), 1, "5-100", 100.0), 2, Ended(-6, False)) is None
    assert time.monotonic() - started < 1.0
