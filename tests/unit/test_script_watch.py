"""The rules of a script task's watch: which signal copies are passed on (each reaches
the command once), when a script that writes no heartbeat is hung, what looks like a
checkpoint."""

from __future__ import annotations

import json
import signal

import pytest

from jeanzay_kit.ending.preemption import read_stop_note
from jeanzay_kit.ending.signal_rules import SETTLE_S, WINDOW_S, SignalRelay, from_step_daemon
from jeanzay_kit.node.script_watch_rules import StopSeen, script_hang, session_beat
from jeanzay_kit.rundir.beats import Beat, ScriptBeat

USR1, USR2 = int(signal.SIGUSR1), int(signal.SIGUSR2)


@pytest.mark.parametrize(
    ("copies", "sent"),
    [
        # (time, reached the child already?): what Slurm and the others delivered
        ([(0.0, True)], []),  # srun's step: the daemon signalled the command too
        ([(0.0, False)], [USR1]),  # the batch shell alone (--signal=B:): pass it on
        ([(0.0, True), (0.2, False)], []),  # scancel --full: shell note after the step's
        ([(0.0, False), (0.3, True)], []),  # ... or before it, within SETTLE_S
        ([(0.0, False), (0.1, False)], [USR1]),  # torchrun's agent and the note: once
        ([(0.0, True), (WINDOW_S + 1, False)], [USR1]),  # a new delivery, much later
    ],
)
def test_each_signal_reaches_the_command_once(
    copies: list[tuple[float, bool]], sent: list[int]
) -> None:
    relay = SignalRelay()
    out: list[int] = []
    times = sorted({t for t, _ in copies} | {t + SETTLE_S for t, _ in copies})
    pending = sorted(copies)
    for now in times:
        while pending and pending[0][0] <= now:
            t, reached = pending.pop(0)
            relay.received(USR1, reached, t)
        out += relay.due(now)
    out += relay.due(times[-1] + 2 * SETTLE_S)
    assert out == sent


def test_two_signals_are_two_deliveries() -> None:
    relay = SignalRelay()
    relay.received(USR1, False, 0.0)
    relay.received(USR2, False, 0.0)
    assert relay.due(SETTLE_S) == [USR1, USR2]


@pytest.mark.parametrize(
    ("name", "daemon"),
    [("slurmstepd\n", True), ("slurmstepd", True), ("torchrun", False), ("bash\n", False)],
)
def test_the_step_daemon_is_known_by_its_name(name: str, daemon: bool) -> None:
    assert from_step_daemon(name) is daemon
    assert from_step_daemon(None) is False


def _beat(rank: int, output_time: float, wall_time: float = 100.0, line: str = "") -> ScriptBeat:
    return ScriptBeat(rank, f"n{rank}", 1000 + rank, "job-1", output_time, line, wall_time, 2.0)


@pytest.mark.parametrize(
    ("beats", "newest_write", "hung", "named"),
    [
        # rank 0 prints, rank 1 never does: the run lives while rank 0 prints
        ([_beat(0, 95.0), _beat(1, 0.0)], None, False, None),
        ([_beat(0, 50.0, line="step 10"), _beat(1, 0.0)], None, True, 1),
        # a checkpoint written recently is life too
        ([_beat(0, 50.0), _beat(1, 0.0)], 90.0, False, None),
        # a task whose wrapper stopped writing beats is named first
        ([_beat(0, 50.0), _beat(1, 60.0, wall_time=80.0)], None, True, 1),
        # nothing printed or written yet: starting, 60 s at least (then hung)
        ([_beat(0, 0.0), _beat(1, 0.0)], None, True, 0),
        ([_beat(0, 0.0), _beat(1, 0.0)], -5.0, True, 0),
        # another attempt's beats are not judged
        ([ScriptBeat(0, "n1", 1, "job-0", 0.0, "", 100.0, 2.0)], None, False, None),
    ],
)
def test_a_script_is_hung_when_no_task_prints_and_no_file_changes(
    beats: list[ScriptBeat], newest_write: float | None, hung: bool, named: int | None
) -> None:
    verdict = script_hang(
        beats, newest_write, start=0.0, now=100.0, stall_seconds=30.0, token="job-1"
    )
    assert (verdict is not None) is hung
    if verdict is not None:
        assert verdict.named.rank == named
        assert "watchdog.stall_seconds=30" in verdict.message("/runs/x", 100.0)


@pytest.mark.parametrize(
    ("signalled_at", "hung"),
    [
        (None, False),  # quiet for 50 s: well under stall_seconds
        (75.0, False),  # warned 25 s ago: the script may still be saving
        (60.0, True),  # warned 40 s ago and quiet since: its handler is stuck
    ],
)
def test_after_the_stop_signal_a_quiet_script_is_hung_sooner(
    signalled_at: float | None, hung: bool
) -> None:
    beats = [_beat(0, 50.0, line="step 20"), _beat(1, 0.0)]
    verdict = script_hang(
        beats,
        None,
        0.0,
        100.0,
        stall_seconds=300.0,
        token="job-1",
        signalled_at=signalled_at,
        after_signal_s=30.0,
    )
    assert (verdict is not None) is hung
    if verdict is not None:
        assert "after the stop signal" in verdict.message("/runs/x", 100.0)


def _session_beat(
    wall_time: float, phase: str = "forward_backward", progress: float | None = None
) -> Beat:
    moved = wall_time if progress is None else progress
    return Beat(0, "n1", 7, "1", 10, 100, phase, moved, wall_time, "1-0", 2.0)


@pytest.mark.parametrize(
    ("session", "hung"),
    [
        ([], True),  # a script that writes no heartbeat: its quiet is all there is
        ([_session_beat(95.0)], False),  # a session loop still beating: its watchdog judges
        ([_session_beat(40.0)], True),  # its beats stopped too (every rank frozen)
        ([_session_beat(-1.0)], True),  # an earlier attempt's beat
        ([_session_beat(99.0, phase="done")], True),  # it said it ended
        # still beating (its own thread) but stuck since 40 s: after a stop signal its
        # save in a collective, where its own watchdog has no shorter rule
        ([_session_beat(99.0, progress=40.0)], True),
        # stuck for 35 s of 30: its own watchdog (checking every 5 s) names it first, from
        # inside; this watch only 2 checks + 5 s later (both at once: two hang folders)
        ([_session_beat(99.0, progress=65.0)], False),
        # starting (model, data, imports): its own watchdog gives it START_GRACE_S
        ([_session_beat(99.0, phase="start", progress=10.0)], False),
    ],
)
def test_a_quiet_session_loop_is_left_to_its_own_watchdog_while_it_beats(
    session: list[Beat], hung: bool
) -> None:
    """A loop on the session API that prints and saves less often than stall_seconds
    is alive while its heartbeats say it moves (seen: a local rehearsal's loop, quiet
    for 5 s, was ended as hung); beats alone, written by a thread, do not say so."""
    verdict = script_hang(
        [_beat(0, 10.0), _beat(1, 0.0)],
        None,
        0.0,
        100.0,
        stall_seconds=30.0,
        token="job-1",
        session_beat=session_beat(session, 0.0),
    )
    assert (verdict is not None) is hung


def test_no_watch_with_stall_seconds_zero() -> None:
    assert script_hang([_beat(0, 0.0)], None, 0.0, 1e6, stall_seconds=0.0, token="job-1") is None


def test_a_scripts_beats_and_a_sessions_share_the_folder_without_overwriting(tmp_path) -> None:
    """A session-API script under a script task: the session writes rank-<N>.json, the
    task's wrapper its own task-<N>.json; each reader sees its own kind only."""
    from jeanzay_kit.rundir.beats import Beat
    from jeanzay_kit.rundir.run_directory import RunDir
    from jeanzay_kit.script.script_files import write_script_beat

    session = Beat(0, "n1", 7, "1", 3, 10, "forward", 5.0, 6.0, "tok", 2.0)
    RunDir(tmp_path).heartbeats.mkdir()
    (RunDir(tmp_path).heartbeats / "rank-0.json").write_text(json.dumps(vars(session)))
    beat = _beat(0, 5.0, line="epoch 1")
    write_script_beat(RunDir(tmp_path), beat)
    assert RunDir(tmp_path).script_beats() == [beat]
    assert RunDir(tmp_path).beats() == [session]


@pytest.mark.parametrize(
    ("key", "bad"), [("rank", "0"), ("pid", 7.5), ("host", None), ("wall_time", True)]
)
def test_a_beat_of_the_wrong_types_is_skipped_as_damaged(tmp_path, key: str, bad: object) -> None:
    """A beat file is JSON the run wrote: a value of the wrong type means it is damaged
    (read as it was before, a string rank compared with ints later); both readers skip it."""
    from jeanzay_kit.rundir.beats import Beat
    from jeanzay_kit.rundir.run_directory import RunDir, read_beats
    from jeanzay_kit.script.script_files import write_script_beat

    folder = RunDir(tmp_path).heartbeats
    folder.mkdir()
    session = vars(Beat(0, "n1", 7, "1", 3, 10, "forward", 5.0, 6.0, "tok", 2.0))
    (folder / "rank-0.json").write_text(json.dumps(session))
    (folder / "rank-1.json").write_text(json.dumps(session | {"rank": 1, key: bad}))
    write_script_beat(RunDir(tmp_path), _beat(0, 5.0, line="epoch 1"))
    (folder / "task-1.json").write_text(json.dumps(vars(_beat(1, 5.0)) | {key: bad}))
    assert [b.rank for b in read_beats(folder)] == [0]
    assert [b.rank for b in RunDir(tmp_path).script_beats()] == [0]


@pytest.mark.parametrize(
    ("signals", "warned_at", "ending", "every"),
    [
        ([], None, False, 30.0),  # a tenth of stall_seconds
        ([(5.0, USR1)], 5.0, False, 6.0),  # warned: a tenth of the after-signal rule
        ([(5.0, USR1), (9.0, USR2)], 5.0, False, 6.0),  # the first warning counts
        ([(5.0, USR1), (9.0, int(signal.SIGTERM))], 5.0, True, 6.0),  # Slurm ends the job
        ([(5.0, int(signal.SIGINT))], None, False, 30.0),  # not a warning
    ],
)
def test_what_the_watch_makes_of_the_stop_signals(
    signals: list[tuple[float, int]], warned_at: float | None, ending: bool, every: float
) -> None:
    seen = StopSeen()
    for now, signum in signals:
        seen.saw(signum, now)
    assert (seen.warned_at, seen.ending) == (warned_at, ending)
    assert seen.check_every(300.0, 60.0, 2.0) == every


def test_a_rank_stops_on_the_batch_shells_note(tmp_path) -> None:
    """The toolkit's ranks read the note once a second (StopRequest.watch_note)."""
    from jeanzay_kit.ending.preemption import StopRequest

    stop = StopRequest(names=())
    stop.watch_note(tmp_path / ".jzk-signal")
    assert stop.signum == 0
    (tmp_path / ".jzk-signal").write_text("USR1\n")
    stop._next_check = 0.0  # the next look, without waiting the second
    assert stop.signum == USR1


@pytest.mark.parametrize(
    ("name", "looks"),
    [
        ("ckpt.pt", True),
        ("last.ckpt", True),
        ("model.safetensors", True),
        ("checkpoint_0010", True),
        ("hpc_ckpt_1.ckpt", True),
        ("last.pth.tar", True),  # timm
        ("cwd/output/train/tiny/checkpoint-3.pth.tar", True),
        ("checkpoint-last", True),
        ("cwd/checkpoint-500/trainer_state.json", True),  # Hugging Face's folder
        ("log.txt", False),
        ("metrics.csv", False),
        ("cwd/output/train/tiny/summary.csv", False),
        ("archive.tar", False),
    ],
)
def test_checkpoint_looking_names(name: str, looks: bool) -> None:
    from jeanzay_kit.rundir.run_directory import looks_like_checkpoint

    assert looks_like_checkpoint(name) is looks


def test_the_batch_shells_note_is_read_once_written_in_this_attempt(tmp_path) -> None:
    note = tmp_path / ".jzk-signal"
    assert read_stop_note(note, 0.0) == 0
    note.write_text("USR1\n")
    assert read_stop_note(note, 0.0) == USR1
    assert read_stop_note(note, note.stat().st_mtime + 5) == 0  # an earlier attempt's
    note.write_text("BOGUS\n")
    assert read_stop_note(note, 0.0) == 0


def test_status_shows_a_scripts_starts_last_line_and_checkpoint() -> None:
    from jeanzay_kit.launch.status import JobState, RunProgress, RunView, status_table

    progress = RunProgress(
        attempts=2,
        restarts=1,
        last_line="Epoch 3: 40%|####      | 8/20 [00:02<00:03, loss=0.31]",
        last_line_age_s=4.0,
        checkpoint_file="lightning_logs/version_0/checkpoints/last.ckpt",
        checkpoint_age_s=75.0,
    )
    rec = RunView("42", "outputs/own-1", progress=progress)
    table = status_table([rec], {"42": JobState("42", "RUNNING", "1:00", "n[1-2]")})
    assert "last.ckpt (1m15s ago)" in table
    assert "42 (script, 2 start(s)): last line 4s ago: 'Epoch 3: 40%" in table
    # A long line keeps its head and its tail (it lost its head: "ank 0] done: ...").
    done = "[rank 0] done: 30 steps, model digest " + "672def74" * 8
    progress = RunProgress(attempts=1, last_line=done, last_line_age_s=1.0)
    said = status_table([RunView("7", "outputs/own-2", progress=progress)], {}).splitlines()[-1]
    assert "ago: '[rank 0] done: 30 steps, model digest 672def74" in said, said
    assert said.endswith(" … " + done[-37:] + "'") and len(said.split("ago: ")[1]) == 102
    row = table.splitlines()[1].split()
    header = table.splitlines()[0].split()
    assert row[:2] == ["42", "RUNNING"]
    assert row[header.index("RESTARTS")] == "1"  # the second start


def test_status_shows_the_newest_checkpoint_written_whatever_its_name(tmp_path) -> None:
    """timm writes checkpoint-N.pth.tar then last.pth.tar; `jzk status` names the newest."""
    import os

    from jeanzay_kit.rundir.run_directory import RunDir

    folder = tmp_path / "cwd" / "output" / "train" / "tiny"
    folder.mkdir(parents=True)
    for age, name in ((30, "checkpoint-3.pth.tar"), (20, "last.pth.tar"), (10, "summary.csv")):
        (folder / name).write_text("x")
        os.utime(folder / name, (1000 - age, 1000 - age))
    found = RunDir(tmp_path).newest_script_checkpoint()
    assert found is not None and found[0].name == "last.pth.tar"


def test_a_stop_signal_after_the_command_ended_leaves_the_tasks_code_its_own(tmp_path) -> None:
    """srun ends a step's other tasks (SIGTERM) once one has exited: a task whose command
    had ended (exit 2, a NaN on every rank) died of it, 143, and the restart step read a
    crash and requeued. The signal now waits in the mask and goes with the task."""
    import os
    import sys
    import threading

    from jeanzay_kit.node.script_watch import STOP_SIGNALS, Watch, supervise
    from jeanzay_kit.rundir.run_directory import RunDir

    before = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    delivered: list[int] = []  # not pytest's own end: a handler that notes it
    previous = signal.signal(signal.SIGTERM, lambda signum, _: delivered.append(signum))
    watch = Watch(RunDir(tmp_path), 0, "1-100", 100.0)
    try:
        ended = supervise([sys.executable, "-c", "raise SystemExit(2)"], dict(os.environ), watch)
        # srun's, after the command ended, to this thread: a process-directed one goes
        # to any thread that does not block it (pytest-xdist's own); the task's threads
        # all block them (its pumps start after the mask is set, the lease's blocks all).
        signal.pthread_kill(threading.get_ident(), signal.SIGTERM)
        assert ended.code == 2 and signal.SIGTERM in signal.sigpending() and not delivered
    finally:
        signal.sigtimedwait(STOP_SIGNALS, 0)  # this test's process goes on: take it back
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
        signal.signal(signal.SIGTERM, previous)


def test_a_script_that_has_printed_nothing_yet_has_a_minute_to_start() -> None:
    """Importing torch and joining the process group on a CPU-starved node took over
    10 s with no fault (a rehearsal on the local cluster): not a hang before 60 s."""
    quiet = [_beat(0, 0.0), _beat(1, 0.0)]
    assert script_hang(quiet, None, 0.0, 50.0, stall_seconds=10.0, token="job-1") is None
    hung = script_hang(quiet, None, 0.0, 61.0, stall_seconds=10.0, token="job-1")
    assert hung is not None and "60 s while it starts" in hung.message("/runs/x", 61.0)
    printed = [_beat(0, 5.0, line="step 1"), _beat(1, 0.0)]
    assert script_hang(printed, None, 0.0, 20.0, stall_seconds=10.0, token="job-1") is not None


def test_here_a_script_still_hung_after_a_sigterm_is_judged(tmp_path) -> None:  # noqa: ANN001
    """On Slurm a SIGTERM ends the watch (KillWait's SIGKILL follows); `jzk train` here
    has nothing after it, so a handler stuck in a collective is still named hung (a
    review found the launcher held for ever)."""
    import os
    import time
    from types import SimpleNamespace

    from jeanzay_kit.node.script_local_watch import LocalWatch
    from jeanzay_kit.rundir.run_directory import RunDir

    now = time.time()
    watch = LocalWatch(RunDir(tmp_path), now - 100, stall_seconds=5, heartbeat_seconds=0.5)
    watch.seen.saw(signal.SIGTERM, now - 30)
    alive = SimpleNamespace(pid=os.getpid(), poll=lambda: None)
    quiet = [
        SimpleNamespace(last_time=now - 40, last_line="step 7"),
        SimpleNamespace(last_time=0.0, last_line=""),
    ]
    hang = watch.hang([alive], quiet)
    assert hang is not None and hang.quiet_s >= 30 and hang.named.last_line == "step 7"
