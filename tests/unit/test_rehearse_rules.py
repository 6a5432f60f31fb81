"""A rehearsal's pure parts (issue 70): the seeded schedule (the same seed, the same
faults: faults.json replays it), each kind as often as the others; the verdict per fault;
Young's interval in the advice."""

from __future__ import annotations

import json
import math

import pytest

from jeanzay_kit.rehearse.report_rules import (
    NO_SAVE_ON_STOP,
    Measured,
    Totals,
    advice,
    goodput,
    noticed_by,
    report,
    row,
    watchdog_advice,
    young_interval_s,
)
from jeanzay_kit.rehearse.schedule import (
    CKPT_WRITE,
    FILL_LIMIT,
    KINDS,
    PREEMPT,
    STORAGE_FULL,
    Fault,
    from_json,
    kinds_for,
    misfit,
    paced,
    schedule,
    to_json,
)
from tests.unit.slurm_answers import Answers


def test_the_same_seed_replays_the_same_schedule_and_every_kind_comes() -> None:
    plan = schedule(14, 40.0, seed=7, ranks=2)
    assert plan == schedule(14, 40.0, seed=7, ranks=2) != schedule(14, 40.0, seed=8, ranks=2)
    assert sorted(f.kind for f in plan) == sorted(KINDS * 2)
    assert all(20.0 <= f.after_s <= 60.0 and f.rank in (0, 1) for f in plan)
    assert from_json(json.loads(json.dumps(to_json(plan, 7, 40.0)))) == plan


def test_a_full_filesystem_is_rehearsed_only_where_the_checkpoints_filesystem_is_small() -> None:
    assert kinds_for(KINDS, size_bytes=64 << 20) == (KINDS, None)  # a tmpfs of 64 MiB
    kinds, why = kinds_for(KINDS, size_bytes=500 << 30)  # a shared scratch: never filled
    assert kinds == tuple(k for k in KINDS if k != STORAGE_FULL)
    assert why is not None and "500.0 GiB in all" in why and "checkpoint.dir" in why
    assert kinds_for(KINDS, FILL_LIMIT)[1] is None and kinds_for(KINDS, FILL_LIMIT + 1)[1]


@pytest.mark.parametrize(
    ("kind", "step", "resumed_from", "resumed_s", "verdict"),
    [
        ("preempt", 120, 120, 4.0, "ok"),
        ("preempt", 120, 100, 4.0, "lost 20 step(s) on a stop signal (0 expected)"),
        ("kill_rank", 130, 100, 6.0, "ok"),  # within checkpoint.every_steps=50
        ("hang", 180, 100, 9.0, "lost 80 steps, more than checkpoint.every_steps=50"),
        ("kill_rank", 130, None, None, "not survived: the run did not go on"),
    ],
)
def test_the_verdict_of_a_fault(
    kind: str, step: int, resumed_from: int | None, resumed_s: float | None, verdict: str
) -> None:
    measured = Measured(kind, step, 1.0, "the launcher", resumed_s, resumed_from)
    assert row(measured, checkpoint_every=50).verdict == verdict


@pytest.mark.parametrize(
    ("kind", "evidence", "said"),
    [
        ("unknown", "killed by SIGKILL", "the launcher: a process killed (killed by SIGKILL)"),
        (
            "unknown",
            "srun: error: n2: task 3: Killed",
            "srun ended the job step: a process killed (srun: error: n2: task 3: Killed)",
        ),
        (
            "unknown",
            "srun: error: n1: task 1: Exited with exit code 137",  # a script task's rank
            "srun ended the job step: a process killed (srun: error: n1: task 1: Exited",
        ),
        ("unknown", "exit 137: killed by SIGKILL", "the launcher: a process killed (exit 137"),
        ("unknown", "exit 143: killed by SIGTERM", "unknown: exit 143"),  # not one it killed
        ("unknown", "exit 2", "unknown: exit 2"),  # no death seen: the record's words
        ("hang", "exit 4: the watchdog found a rank stuck", "hang: exit 4: the watchdog found"),
        ("user_error", "RuntimeError: killed by SIGKILL", "user_error: RuntimeError"),
    ],
)
def test_a_killed_process_is_said_noticed_by_what_saw_it_die(
    kind: str, evidence: str, said: str
) -> None:
    assert noticed_by(kind, evidence).startswith(said)


def test_the_advice_names_youngs_interval_and_each_fault_not_survived() -> None:
    assert young_interval_s(2.0, 3600.0) == pytest.approx(math.sqrt(14400.0))
    rows = [row(Measured("hang", 300, 1.0, "watchdog", None, None), 50)]
    lines = advice(rows, step_s=0.1, save_s=0.5, every_s=40.0, every_steps=1000)
    assert lines[0].startswith("fault 0: hang: not survived")
    assert "Young's interval is about 63 steps" in lines[1]  # sqrt(2 * 0.5 * 40) / 0.1
    assert lines[1].startswith("checkpoint.every_steps=1000: ")
    mine = advice(rows, 0.1, 0.5, 40.0, 1000, own_loop=True)
    assert mine[1].startswith("your script's checkpoint interval=1000: ")
    # No save time recorded (a loop of the user's own): no interval is made up from it.
    assert advice(rows, step_s=0.1, save_s=0.0, every_s=40.0, every_steps=1000) == lines[:1]
    found = report(rows, Totals(False, 0, 0.5), lines)
    assert set(found) == {"faults", "digest_equal", "lost_steps", "goodput", "advice"} | {
        "loss_close",
        "bitwise",
    }
    assert set(found["faults"][0]) == {  # type: ignore[index]
        "kind",
        "step",
        "detected_s",
        "by",
        "resumed_s",
        "lost_steps",
        "verdict",
    }


def test_the_schedules_seconds_become_steps_at_the_references_pace_and_must_fit() -> None:
    plan = schedule(4, 2.0, seed=3, ranks=2)
    at_pace = paced(plan, steps_per_s=100.0)
    assert [n for _, n in at_pace] == [round(f.after_s * 100) for f in plan]
    assert paced(plan, steps_per_s=0.01)[0][1] == 1  # at least one step of training


@pytest.mark.parametrize(
    ("plan", "needed"),
    [
        # 40 steps, 6 to be noticed, a tenth of 40; then an interval to resume past it
        ([(PREEMPT, 40)], 40 + 6 + 4 + 50),
        # a write interrupted waits up to an interval for the next save
        ([(PREEMPT, 40), (CKPT_WRITE, 20)], 40 + 6 + 4 + 20 + 6 + 2 + 2 * 50),
    ],
)
def test_a_schedule_fits_when_the_run_trains_past_its_last_fault(plan, needed) -> None:
    at_pace = [(Fault(i, kind, 1.0, 0), n) for i, (kind, n) in enumerate(plan)]
    assert misfit(at_pace, needed + 1, checkpoint_every=50) is None
    why = misfit(at_pace, needed, checkpoint_every=50)
    assert why is not None and f"about {needed} steps" in why and "train.steps" in why


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("COMPLETED|0:0\n", 0),
        ("REQUEUED|0:0\nFAILED|2:0\n", 2),  # the newest allocation of a requeued job
        ("CANCELLED by 0|0:15\n", 1),  # no code of its own: not a success
        ("RUNNING|0:0\n", None),
        ("", None),
    ],
)
def test_a_finished_jobs_exit_code_from_sacct(text: str, expected: int | None) -> None:
    from jeanzay_kit.slurm.commands import job_exit_code

    runner = Answers(text)
    assert job_exit_code("7", runner) == expected
    assert runner.argv == ["sacct", "-n", "-X", "-P", "-j", "7", "-o", "State,ExitCode"]


def test_steps_lost_on_a_stop_signal_tell_a_loop_of_your_own_to_save_there() -> None:
    lost = [row(Measured(PREEMPT, 120, 0.1, "the stop agreement", 2.0, 100), 50)]
    kept = [row(Measured(PREEMPT, 120, 0.1, "the stop agreement", 2.0, 120), 50)]
    mine = advice(lost, 0.1, 0.0, 40.0, 50, own_loop=True)
    assert mine == [
        "fault 0: preempt: lost 20 step(s) on a stop signal (0 expected)",
        NO_SAVE_ON_STOP,
    ]
    assert advice(kept, 0.1, 0.0, 40.0, 50, own_loop=True) == []
    assert NO_SAVE_ON_STOP not in advice(
        lost, 0.1, 0.0, 40.0, 50
    )  # the toolkit's loop saves itself


@pytest.mark.parametrize(
    ("stall_s", "slowest_s", "said"),
    [
        (300.0, 0.05, "a hang holds the allocation that long"),  # the default, tiny steps
        (1000.0, 10.0, "a hang holds the allocation that long"),  # 10 steps of 10 s: 100 s
        (300.0, 12.0, None),  # big steps and saves: 300 s fits
        (5.0, 0.05, None),  # the tests' timeout for a fast run
        (5.0, 4.0, "may be taken for a hang"),  # a save alone nearly reaches it
        (0.0, 0.05, None),  # the watchdog is off
        (300.0, 0.0, None),  # no step recorded: nothing to say
    ],
)
def test_the_advice_fits_the_watchdog_to_the_slowest_step(
    stall_s: float, slowest_s: float, said: str | None
) -> None:
    line = watchdog_advice(stall_s, slowest_s)
    if said is None:
        assert line is None
        return
    assert line is not None and said in line and f"watchdog.stall_seconds={stall_s:g}" in line
    suggested = max(60, math.ceil(10 * slowest_s))  # never under a minute
    assert f"about {suggested} s" in line, line


@pytest.mark.parametrize(
    ("step_s", "grew_ago", "expected"),
    [
        (0.0, 0.5, 40),  # the toolkit's loop logs every step: what it logged
        (0.01, None, 40),  # not seen moving yet (after a resume: re-training known steps)
        (0.01, 0.05, 45),  # a loop that logs at its saves, 5 steps' time after its log
        (0.01, 5.0, 50),  # never past its next log (its interval, 10)
    ],
)
def test_a_loop_that_logs_at_its_saves_is_met_between_them(step_s, grew_ago, expected) -> None:
    """Where the schedule meets a loop of the user's that logs only when it saves: at its
    step estimated at the reference's pace since its last log, not just after a save."""
    import time
    from pathlib import Path

    from jeanzay_kit.rehearse.launches import Here
    from jeanzay_kit.rehearse.runner import Timeline, _estimated
    from jeanzay_kit.rundir.run_directory import RunDir

    line = Timeline(Here([], Path("log")), RunDir(Path("run")), Path("log"))
    line.step_s, line.interval = step_s, 10
    grew = None if grew_ago is None else time.monotonic() - grew_ago
    assert _estimated(line, 40, grew) == pytest.approx(expected, abs=0.5)


def _noisy(steps: int, shift: float = 0.0) -> dict[int, float]:
    """A loss that falls, with a step-to-step wobble of +-0.01 at the end."""
    return {s: 2.0 / s + (0.01 if s % 2 else -0.01) + shift for s in range(1, steps + 1)}


@pytest.mark.parametrize(
    ("rehearsed", "close", "window"),
    [
        (_noisy(1000), True, 50),  # the same run: a twentieth of its steps
        (_noisy(1000, shift=0.005), True, 50),  # moved by less than its wobble (GPU rounding)
        (_noisy(1000, shift=0.1), False, 50),  # ten times its wobble: a resume went wrong
        (_noisy(100), True, 10),  # at least 10 steps
        ({s: v for s, v in _noisy(1000).items() if s % 10 == 0}, True, 10),  # logged at saves
    ],
)
def test_a_final_model_that_differs_is_held_to_the_references_final_loss(
    rehearsed: dict[int, float], close: bool, window: int
) -> None:
    from jeanzay_kit.rehearse.report_rules import final_loss_check

    reference = _noisy(max(rehearsed))
    check = final_loss_check(reference, rehearsed)
    assert check is not None and check.close is close, check
    assert f"(means of the last {window} steps)" in check.line
    assert final_loss_check(reference, {5: 1.0}) is None  # nothing to compare


def test_a_flat_final_loss_allows_for_rounding() -> None:
    from jeanzay_kit.rehearse.report_rules import final_loss_check

    flat = {s: 1.0 for s in range(1, 101)}
    near = final_loss_check(flat, {s: 1.0 + 1e-9 for s in flat})
    far = final_loss_check(flat, {s: 1.01 for s in flat})
    assert near is not None and near.close and far is not None and not far.close


@pytest.mark.parametrize(
    ("steps", "cut", "past"),
    [
        ([1, 2, 3, 4, 5, 6, 7], False, False),  # the old attempt's steps, 6 and 7 past 5
        ([1, 2, 3, 4, 5], True, False),  # cut back to the checkpoint's step by the new start
        ([1, 2, 3, 4, 5, 6], True, True),  # then a step of its own
        ([1, 2, 3, 4, 5, 6, 7, 8], False, True),  # cut and appended between two looks
        ([1, 2, 3, 4, 5, 6, 7], True, True),  # ... seen cut before: 6 and 7 are its own
    ],
)
def test_a_new_start_has_logged_past_its_checkpoint_only_once_it_cut_the_log(
    steps: list[int], cut: bool, past: bool
) -> None:
    """After a crash at step 7 and a resume from step-5, metrics.jsonl holds steps 6 and 7
    of the old attempt until the new start's writer cuts it back (runtime/metrics.py)."""
    from jeanzay_kit.rehearse.runner import NewSteps

    new = NewSteps([1, 2, 3, 4, 5, 6, 7], cut=cut)
    assert new.past(steps, start=5) is past


@pytest.mark.parametrize(
    ("step", "due", "said"),
    [
        (80, 106, "before the next fault at step 106: it trained fewer steps than"),
        # Past the fault's step: the rehearsal did not see it get there (a starved poller)
        (400, 106, "past step 106 where the next fault was due, before the rehearsal saw"),
        (106, 106, "the machine was too busy for the rehearsal to follow the run"),
    ],
)
def test_a_run_that_ends_before_its_next_fault_is_said_as_it_happened(step, due, said) -> None:
    """The rehearsal stops when the run ends before the next fault was sent: short of
    the fault's step, the run was too short; past it, the rehearsal could not follow
    (once on a loaded 2-core CI runner), and the hint says what to do."""
    from jeanzay_kit.rehearse.report_rules import ended_before_fault

    line = ended_before_fault(0, step, due, "run.log")
    assert line.startswith(f"the run ended (exit 0) at step {step}") and said in line, line
    # Each its own fix: a run too short gets more steps, a starved rehearsal free cores.
    assert ("HINT: rehearse where the cores are not all taken" in line) == (step >= due), line
    assert "HINT: give it more steps" in line or step >= due, line
    assert line.count("HINT: ") == 1 and line.endswith("; see run.log"), line


def test_a_run_that_failed_after_a_fault_is_said_not_survived_not_too_short() -> None:
    """A session script's job hung at step 33 and was not requeued: the rehearsal said
    "it trained fewer steps than its run without faults. HINT: give it more steps"."""
    from jeanzay_kit.rehearse.report_rules import ended_before_fault

    line = ended_before_fault(4, 0, 62, "run.log", after="#0 hang")
    assert line.startswith("the run ended (exit 4) at step 0 after fault #0 hang"), line
    assert "not survived" in line and "more steps" not in line and line.endswith("run.log")
    # A run that completed short of the next fault is still too short.
    assert "give it more steps" in ended_before_fault(0, 80, 106, "run.log", after="#0 hang")


class _EndsUnseen:
    """A launch whose run completes at step 400 while the rehearsal is not looking: the
    first poll finds it running, the metrics say 400 by the next read, and from then on
    it has ended (exit 0)."""

    def __init__(self, metrics) -> None:  # noqa: ANN001 - a Path
        self.metrics, self.polls = metrics, 0

    def start(self) -> None:
        raise AssertionError("a completed run is not started again")

    def ended(self) -> int | None:
        self.polls += 1
        if self.polls == 1:
            self.metrics.parent.mkdir(parents=True, exist_ok=True)
            self.metrics.write_text('{"step": 400, "loss": 1.0}\n')
            return None
        return 0


def test_no_fault_is_sent_to_a_run_that_completed_while_the_rehearsal_was_not_looking(
    tmp_path,  # noqa: ANN001
) -> None:
    """The run got past the fault's step and to its end between two polls (a starved
    rehearsal): the rehearsal stops, saying so, instead of sending the fault to a
    finished run and reporting it not survived."""
    from pathlib import Path

    from jeanzay_kit.errors import JzkError
    from jeanzay_kit.rehearse.runner import Timeline, _train_for
    from jeanzay_kit.rundir.run_directory import RunDir

    run = RunDir(Path(tmp_path) / "run")
    line = Timeline(_EndsUnseen(run.metrics), run, Path("run.log"))  # type: ignore[arg-type]
    with pytest.raises(JzkError) as refused:
        _train_for(line, 106)
    said = str(refused.value)
    assert said.startswith("the run ended (exit 0) at step 400, past step 106"), said


class _Resumed:
    """A run resumed from step 0 after a fault at step 34: each poll finds one more step
    logged (metrics.jsonl cut back to the resume, then appended to)."""

    def __init__(self, metrics) -> None:  # noqa: ANN001 - a Path
        self.metrics, self.steps = metrics, 3
        metrics.parent.mkdir(parents=True, exist_ok=True)
        metrics.write_text("".join(f'{{"step": {s}}}\n' for s in range(1, 4)))

    def ended(self) -> int | None:
        self.steps += 1
        with self.metrics.open("a") as out:
            out.write(f'{{"step": {self.steps}}}\n')
        return None


def test_the_next_fault_is_sent_past_the_step_the_last_one_met(tmp_path) -> None:  # noqa: ANN001
    """After a fault at step 34 and a resume from step 0, 31 steps of training end past
    step 34, not at it: two hangs at one step read as one that cannot pass, and the job
    was not retried (a rehearsal on Slurm ended with its run)."""
    from pathlib import Path

    from jeanzay_kit.rehearse.runner import Timeline, _train_for
    from jeanzay_kit.rundir.run_directory import RunDir

    run = RunDir(Path(tmp_path) / "run")
    line = Timeline(_Resumed(run.metrics), run, Path("run.log"))  # type: ignore[arg-type]
    line.met = 34
    _train_for(line, 31)
    assert 34 + 31 <= line.step() <= 34 + 32


class _Pending:
    def waiting(self):  # noqa: ANN201
        from jeanzay_kit.rehearse.report_rules import Where

        return Where("job 7 PENDING: Slurm says Resources", queued=True)


def test_a_run_without_a_new_step_is_said_waiting_each_interval(monkeypatch, capsys) -> None:  # noqa: ANN001
    """A job that pends for ever after its requeue was silent until a test's timeout
    killed the rehearsal: each QUIET_NOTE_S without a new step it says where the run is,
    once, and nothing while it moves."""
    from pathlib import Path

    from jeanzay_kit.rehearse import runner
    from jeanzay_kit.rundir.run_directory import RunDir

    clock = iter([0.0, 50.0, 91.0, 100.0, 182.0, 183.0, 190.0, 281.0])
    monkeypatch.setattr(runner.time, "monotonic", lambda: next(clock))
    line = runner.Timeline(_Pending(), RunDir(Path("run")), Path("run.log"))  # type: ignore[arg-type]
    quiet = runner.Quiet(line)
    for step in (5, 5, 5, 5, 5, 5, 6, 6):
        quiet.note(step)
    said = capsys.readouterr().out.splitlines()
    assert said == [
        "rehearse: no new step for 90 s (at step 5): job 7 PENDING: Slurm says Resources",
        "rehearse: no new step for 180 s (at step 5): job 7 PENDING: Slurm says Resources",
        "rehearse: no new step for 90 s (at step 6): job 7 PENDING: Slurm says Resources",
    ]


@pytest.mark.parametrize(
    ("row", "shown", "said", "never"),
    [
        (
            "PENDING|Resources|\n",
            "JobId=7 ExcNodeList=n2 NodeList=(null)",
            "job 7 PENDING: it is next, but the nodes it asks for are busy",
            False,
        ),
        (  # what the local cluster says of a 2-node job that leaves out one of its 2
            "PENDING|BadConstraints|\n",
            "JobId=7 ExcNodeList=n2 NodeList=(null)",
            "job 7 PENDING (BadConstraints): the node(s) it leaves out, n2, leave too few",
            True,
        ),
        ("PENDING|JobHeldAdmin|\n", "ExcNodeList=(null)", "job 7 PENDING: it is held by", True),
        ("RUNNING|None|n[1-2]\n", "JobId=7 ExcNodeList=(null)", "job 7 RUNNING on n[1-2]", False),
        ("", "", "job 7 not in the queue", False),
    ],
)
def test_where_a_quiet_job_is_in_words(row: str, shown: str, said: str, never: bool) -> None:
    from jeanzay_kit.rehearse.report_rules import job_waiting

    where = job_waiting("7", row, shown)
    assert where.words.startswith(said) and where.never is never, where
    assert ("n2" in where.words) == ("ExcNodeList=n2" in shown), where
    assert where.queued is row.startswith("PENDING"), where


def test_a_run_that_can_never_go_on_ends_the_rehearsal(monkeypatch) -> None:  # noqa: ANN001
    from pathlib import Path

    from jeanzay_kit.errors import JzkError
    from jeanzay_kit.rehearse import runner
    from jeanzay_kit.rehearse.report_rules import Where
    from jeanzay_kit.rundir.run_directory import RunDir

    class _Stuck:
        def __init__(self, where: Where) -> None:
            self.where = where

        def waiting(self) -> Where:
            return self.where

    held = Where("job 7 PENDING: it is held", never=True, queued=True)
    running = Where("job 7 RUNNING on n[1-2]")
    # Held: at the first note.
    # Running without a step: at the first note once STUCK_S have gone by (notes come
    # each QUIET_NOTE_S).
    stuck_s = math.ceil(runner.STUCK_S / runner.QUIET_NOTE_S) * runner.QUIET_NOTE_S
    for launch, quiet_s, said in ((held, 90, "held"), (running, stuck_s, "RUNNING")):
        clock = iter([0.0, *(90.0 * n + 1 for n in range(1, 20))])
        monkeypatch.setattr(runner.time, "monotonic", lambda clock=clock: next(clock))
        line = runner.Timeline(_Stuck(launch), RunDir(Path("run")), Path("run.log"))  # type: ignore[arg-type]
        quiet = runner.Quiet(line)
        quiet.note(5)
        with pytest.raises(
            JzkError, match=f"cannot go on: no new step for {quiet_s:.0f} s .*{said}"
        ):
            for _ in range(19):
                quiet.note(5)


def test_each_fault_is_said_as_it_ends() -> None:
    from jeanzay_kit.rehearse.report_rules import Measured, progress_line

    ok = Measured("hang", 120, 11.24, "hang: the watchdog", 30.0, 100)
    lost = Measured("kill_rank", 40, None, "nothing noticed it", None, None)
    assert progress_line(2, 3, 12, ok) == (
        "rehearse: #2 hang (3/12) at step 120: noticed in 11.2 s (hang: the watchdog); "
        "went on from step 100 30.0 s after it"
    )
    assert progress_line(3, 4, 12, lost).endswith("not noticed (nothing noticed it); did not go on")


@pytest.mark.parametrize(
    ("reference_s", "rehearsal_s", "expected", "said"),
    [
        (30.0, 60.0, 0.5, None),  # half the rehearsal's time was training
        (60.0, 60.0, 1.0, None),
        (64.2, 60.0, 1.0, "took 64.2 s, longer than the rehearsal with its faults (60.0 s)"),
        (0.0, 60.0, 0.0, None),  # no reference time: nothing to compare
    ],
)
def test_goodput_is_never_over_one_and_says_why_when_the_reference_was_slower(
    reference_s: float, rehearsal_s: float, expected: float, said: str | None
) -> None:
    ratio, line = goodput(reference_s, rehearsal_s)
    assert ratio == pytest.approx(expected)
    if said is None:
        assert line is None
    else:
        assert line is not None and said in line and "goodput not measured" in line


def test_the_stop_line_is_found_in_what_the_log_added_even_when_cut(tmp_path) -> None:  # noqa: ANN001
    """A preemption is timed to rank 0's stop line: each poll reads only what train.log
    added, and a line half written at one poll is found at the next."""
    from jeanzay_kit.rehearse.runner import _said_since
    from jeanzay_kit.rundir.rank_lines import STOPPING
    from jeanzay_kit.rundir.run_directory import RunDir

    run = RunDir(tmp_path)
    assert _said_since(run, 0, STOPPING) == (False, 0)  # no log yet
    run.train_log.write_text("[rank 0] step 1\n[rank 0] SIGUSR1 received: stop")
    said, offset = _said_since(run, 0, STOPPING)
    assert not said and 0 < offset < run.train_log.stat().st_size
    with run.train_log.open("a") as log:
        log.write("ping after step 2\n")
    assert _said_since(run, offset, STOPPING)[0]
    assert not _said_since(run, run.train_log.stat().st_size, STOPPING)[0]  # said before
