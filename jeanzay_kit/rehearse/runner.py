"""Run a rehearsal: the run without faults (the reference), then the same run under the
schedule, each fault injected for real into its processes (rehearse/launches.py: here, or
on the Slurm cluster), timed from what the run directory records (metrics.jsonl's steps,
starts.jsonl's starts, endings.jsonl's ends, the heartbeats' processes).
"""

from __future__ import annotations

import contextlib
import json
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from jeanzay_kit.config.spec import JobSpec
from jeanzay_kit.errors import JzkError
from jeanzay_kit.rehearse import report_rules as rules
from jeanzay_kit.rehearse.launches import Here, OnSlurm
from jeanzay_kit.rehearse.schedule import (
    CKPT_WRITE,
    HANG,
    KILL_RANK,
    NAN,
    NODE_LOST,
    STARTUP,
    STORAGE_FULL,
    Fault,
)
from jeanzay_kit.rundir.beats import Beat
from jeanzay_kit.rundir.progress import record_step
from jeanzay_kit.rundir.rank_lines import STOPPING
from jeanzay_kit.rundir.run_directory import RunDir
from jeanzay_kit.rundir.run_layout import HANG_PREFIX

POLL_S = 0.2
# A script whose loop does not use the session API records none of what a rehearsal
# follows a run by: its steps, its processes' heartbeats, its final model's digest.
NOT_RECORDED = (
    "the run without faults completed but recorded no steps, heartbeats or final model "
    "digest: your script's loop does not use the toolkit's session API, and a rehearsal "
    "of a plain script is not built yet (docs/rehearse.md, What is not rehearsed yet). "
    "HINT: run your loop through the session (docs/your-own-loop.md, part b), or rehearse "
    "the toolkit's loop (without job.entry)"
)
# After its recovery a fault must be followed by progress within this (and the watchdog).
# On Slurm a requeued job waits for the queue and for its credential to expire too.
RESUME_GRACE_S = 180.0
# A run that has made no step for this long is said to be waiting, with where it is (a
# job pending in the queue and why, the nodes it leaves out), and again each time as long.
QUIET_NOTE_S = 90.0
# A run that is running (not queued) and has made no step for this long is broken: its
# watchdog ends a hang within its timeout, a killed peer ends a GPU job within NCCL's.
STUCK_S = RESUME_GRACE_S + 600


@dataclass
class Timeline:
    """The run (its launch) and what it has done: started with `train.log_every=1`, so
    metrics.jsonl has every step."""

    launch: Here | OnSlurm
    run: RunDir
    log: Path
    nonfinite: str = "stop"  # train.nonfinite: what a NaN does to the run
    on_write_error: str = "stop"  # checkpoint.on_write_error: what a full disk does
    # A script's run here is not restarted by its launcher after a crash or a hang (on
    # Slurm its job requeues itself): the rehearsal runs it again, as its user would.
    rerun_failures: bool = False
    # A loop of the user's own may log only when it saves (every `interval` steps):
    # between two logs its step is estimated at the reference's pace (seconds a step;
    # 0: the toolkit's loop, which logs every step of a rehearsal).
    step_s: float = 0.0
    interval: int = 0
    # The step the latest fault met: the next one is sent past it. Two faults of a kind
    # at one step read, to the job's restart rule, as one that cannot pass (ending_rules
    # `decide`): a hang at step 34, a resume from step 0, a hang at 34 again ended a
    # rehearsal on Slurm with its run (exit 4) instead of retrying it.
    met: int = 0
    done: int = 0  # the faults ended so far
    last: Fault | None = None  # the fault ended last

    def start(self) -> None:
        self.launch.start()

    def ended(self) -> int | None:
        return self.launch.ended()

    def goes_on(self) -> bool:
        """Start it again after a stop (3), or after a failure when its user would."""
        code = self.ended()
        if code == 3 or (code not in (None, 0) and self.rerun_failures):
            self.start()
        return code is None or code == 3 or self.rerun_failures and code != 0

    def step(self) -> int:
        """The newest step metrics.jsonl holds (0: none yet)."""
        steps = _logged_steps(self.run)
        return steps[-1] if steps else 0


def timeline(
    overrides: Sequence[str],
    run: RunDir,
    log: Path,
    slurm: bool,
    spec: JobSpec | None = None,
) -> Timeline:
    """The run's command: `jzk train` here, `jzk submit` on the Slurm cluster. spec:
    what the faults meet (train.nonfinite, checkpoint.on_write_error, a script of the
    user's own as job.entry); None for the run without faults."""
    command = "submit" if slurm else "train"
    argv = [sys.executable, "-m", "jeanzay_kit.cli", command, *overrides]
    argv += [f"job.run_dir={run.root}", "train.log_every=1"]
    launch = OnSlurm(argv, log) if slurm else Here(argv, log)
    if spec is None:
        return Timeline(launch, run, log)
    rerun = spec.job.runs_script and not slurm
    # checkpoint.on_write_error is the toolkit's loop's: a script's own loop stops.
    on_error = "stop" if spec.job.runs_script else spec.checkpoint.on_write_error
    nonfinite = spec.train.nonfinite
    return Timeline(launch, run, log, nonfinite, on_error, rerun_failures=rerun)


@dataclass(frozen=True)
class Reference:
    """The run without faults: its time, its model's digest, and its pace (steps a second
    of training, from when its first step was logged to its last: the schedule's seconds
    become steps at this pace, so a faster or slower machine meets the same faults)."""

    seconds: float
    digest: str
    steps_per_s: float
    last_step: int  # the steps it trained (a script's own --steps, the toolkit's train.steps)
    checkpoint_every: int | None  # the interval of the checkpoints it kept (None: < 2 kept)


def run_reference(line: Timeline) -> Reference:
    line.launch.rehearsal = False  # no fault's file is looked for
    with stopped_if_left(line):
        return _reference(line)


def _reference(line: Timeline) -> Reference:
    started = time.monotonic()
    line.start()
    first: tuple[float, int] | None = None
    last = (started, 0)
    while (code := line.ended()) is None:
        step = line.step()
        if step > last[1]:
            last = (time.monotonic(), step)
            first = first or last
        time.sleep(POLL_S)
    if code != 0:
        raise JzkError(f"the run without faults failed (exit {code}): see {line.log}")
    seconds = time.monotonic() - started
    if not line.run.model_digest.exists():  # nor heartbeats, nor steps
        raise JzkError(NOT_RECORDED)
    pace = (last[1] - first[1]) / (last[0] - first[0]) if first and last[0] > first[0] else 0.0
    digest = line.run.model_digest.read_text().strip()
    pace = pace or max(line.step(), 1) / seconds
    return Reference(seconds, digest, pace, line.step(), _interval(line.run))


def _interval(run: RunDir) -> int | None:
    """The steps between the complete checkpoints a run kept (the toolkit's
    checkpoint.every_steps, or what a script's own loop chose)."""
    from jeanzay_kit.ckpt.store import CheckpointStore

    steps = sorted(e.step for e in CheckpointStore(run.checkpoints).entries() if e.has_manifest)
    gaps = [b - a for a, b in zip(steps, steps[1:], strict=False) if b > a]
    return min(gaps) if gaps else None


def rehearse_run(
    line: Timeline, plan: Sequence[tuple[Fault, int]]
) -> tuple[list[rules.Measured], float]:
    """The run under the schedule (each fault with the steps of training before it): each
    fault measured; the run's total time (started again after each stop, as a requeue
    would, until it is done)."""
    started = time.monotonic()
    with stopped_if_left(line):
        line.start()
        measured = [_said(line, fault, steps, len(plan)) for fault, steps in plan]
        while (code := _wait_end(line)) == 3:
            line.start()  # a stop after a save: run again, as Slurm's requeue would
    if code != 0:
        raise JzkError(f"the rehearsal's run ended with exit {code}: see {line.log}")
    return measured, time.monotonic() - started


@contextlib.contextmanager
def stopped_if_left(line: Timeline) -> Iterator[None]:
    """The run ended (its process group killed, its job cancelled) when the rehearsal
    leaves before it: an error, Ctrl-C, a SIGTERM (exit 143). `timeout 300 jzk rehearse`
    left the run and its ranks training on, unwatched; on Slurm its job would hold the
    nodes."""
    previous = signal.getsignal(signal.SIGTERM)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupted)
    try:
        yield
    except BaseException as left:
        line.launch.stop()
        if isinstance(left, SystemExit | KeyboardInterrupt):
            print("rehearse: interrupted: its run is stopped too", file=sys.stderr, flush=True)
        raise
    finally:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, previous)


def _interrupted(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def _said(line: Timeline, fault: Fault, steps: int, total: int) -> rules.Measured:
    """One fault, measured, and said as it ends."""
    measured = _one(line, fault, steps)
    line.met = max(line.met, measured.step)
    line.done += 1
    line.last = fault
    print(rules.progress_line(fault.number, line.done, total, measured), flush=True)
    return measured


def _wait_end(line: Timeline) -> int:
    quiet = Quiet(line)
    while (code := line.ended()) is None:
        quiet.note(_reached(line))
        time.sleep(POLL_S)
    return code


@dataclass
class Quiet:
    """Says where a run is each QUIET_NOTE_S it makes no new step (a job pending for
    nodes it left out waited silently until a test's timeout killed the rehearsal), and
    ends the rehearsal when the run can never go on by itself (a held job, one Slurm
    refuses as it stands)."""

    line: Timeline
    step: int = -1
    since: float = 0.0
    notes: int = 0  # said since the step last moved

    def note(self, step: int) -> None:
        now = time.monotonic()
        if step != self.step:
            self.step, self.since, self.notes = step, now, 0
        elif now - self.since >= QUIET_NOTE_S * (self.notes + 1):
            self.notes += 1
            where = self.line.launch.waiting()
            quiet = QUIET_NOTE_S * self.notes
            said = f"no new step for {quiet:.0f} s (at step {step}): {where.words}"
            # It would wait for ever, or it is stuck: the rehearsal ends, saying why.
            if where.never or (quiet >= STUCK_S and not where.queued):
                raise JzkError(f"the run cannot go on: {said}")
            print(f"rehearse: {said}", flush=True)


def _train_for(line: Timeline, steps: int) -> None:
    """Let the run train `steps` past the newest step it reached so far (after a resume
    from an older checkpoint, past that step again), starting it again after a stop. The
    heartbeats count too: a loop of the user's that logs only when it saves would
    otherwise meet every fault right after a save, and never lose a step. Whether the
    run has ended is asked before whether it got there: a rehearsal starved of the CPU
    sees both at once, and a fault sent to a run that had completed was reported as not
    survived."""
    target = seen = max(_reached(line), line.met)
    target += steps
    grew: float | None = None  # when `seen` last grew, while waiting here
    quiet = Quiet(line)
    while True:
        if line.ended() is not None and not line.goes_on():
            after = f"#{line.last.number} {line.last.kind}" if line.last else None
            raise JzkError(
                rules.ended_before_fault(line.ended(), line.step(), target, str(line.log), after)
            )
        if _estimated(line, seen, grew) >= target:
            return
        time.sleep(POLL_S / 4)
        quiet.note(reached := _reached(line))
        if reached > seen:
            seen, grew = reached, time.monotonic()


def _estimated(line: Timeline, seen: int, grew: float | None) -> float:
    """The step the run is at: the newest it was seen to reach and, for a loop of the
    user's that logs only when it saves, the steps since at the reference's pace, up to
    its next log (without it, every fault met such a loop just after a save, and a stop
    that does not save lost nothing). Not before it was seen to move in this wait: after
    a resume from an older checkpoint it first trains steps seen already."""
    if not line.step_s or grew is None:
        return seen
    return seen + min((time.monotonic() - grew) / line.step_s, line.interval)


def _one(line: Timeline, fault: Fault, steps: int) -> rules.Measured:
    _train_for(line, steps)
    if fault.kind == STARTUP:  # a stop, then the warning again while it starts
        _stop_and_restart(line)
    step, injected, wall = _reached(line), time.monotonic(), time.time()
    endings_before = len(_records(line.run.endings))
    starts_before, ends_before = _tokens(line.run), _stops(line.run)
    if fault.kind == NAN:
        return _nan(line, fault, starts_before)
    if fault.kind == STORAGE_FULL:
        return _storage_full(line, starts_before)
    if fault.kind == CKPT_WRITE:
        (beat,) = _targets(line.run, fault.rank)
        line.launch.kill_in_save(beat, line.run, RESUME_GRACE_S)
        step, injected = line.step(), time.monotonic()
        detected, by = _detected(line, endings_before, injected)
    elif fault.kind in (KILL_RANK, HANG, NODE_LOST):
        beats = _targets(line.run, fault.rank, whole_node=fault.kind == NODE_LOST)
        line.launch.signal_ranks(beats, signal.SIGSTOP if fault.kind == HANG else signal.SIGKILL)
        detected, by = _detected(line, endings_before, injected)
        fired = _watchdog_fired(line.run, wall)
        if fault.kind == HANG and fired is not None:  # when it fired, not when it was done
            detected = fired
    if fault.kind in (CKPT_WRITE, KILL_RANK, HANG, NODE_LOST):
        # The ranks may have gone a step further than seen when the fault was sent: the
        # attempt's end records the step its heartbeats reached, as the run's ledger
        # (starts.jsonl, `jzk status`'s lost steps) counts it.
        step = max(step, _ending_step(line.run, endings_before))
    else:
        said_from = _log_size(line.run)
        line.launch.warn()
        detected, by = _stopped(line, ends_before, injected, said_from)
        # Where it stopped, a step or two later: what it trained since its newest save
        # is what a stop without a save loses (its heartbeats, before a new start).
        step = max([step, *(b.step for b in line.run.beats() if b.token in starts_before)])
    resumed_s, resumed_from = _resumed(line, injected, starts_before)
    took = None if detected is None else round(detected, 2)
    return rules.Measured(fault.kind, step, took, by, resumed_s, resumed_from)


def _stop_and_restart(line: Timeline) -> None:
    """The warning, the stop after a save, and a new start, caught while it starts
    (launches.py: `starting_again`)."""
    before, tokens, said_from = _stops(line.run), _tokens(line.run), _log_size(line.run)
    line.launch.warn()
    _stopped(line, before, time.monotonic(), said_from)
    line.launch.starting_again(line.run, tokens, RESUME_GRACE_S)


def _nan(line: Timeline, fault: Fault, starts_before: set[str]) -> rules.Measured:
    """A NaN for the next step's loss (rank 0 takes the file): with train.nonfinite=stop
    the run stops before the update (exit 2) and is run again, as its user would, from
    its newest checkpoint; with skip it drops the update and goes on."""
    step, injected = line.step(), time.monotonic()
    line.run.fault_nan.write_text(f"fault {fault.number}\n")
    quiet = Quiet(line)
    while line.run.fault_nan.exists() and line.ended() is None:
        quiet.note(_reached(line))
        time.sleep(POLL_S / 4)
    if line.nonfinite == "skip":  # the update dropped, on it goes
        detected = round(time.monotonic() - injected, 2)
        while line.step() <= step and line.ended() is None:
            time.sleep(POLL_S)
        by = "the step's agreement: train.nonfinite=skip, the update dropped"
        return rules.Measured(NAN, step, detected, by, detected, step)
    code = _wait_end(line)
    detected = round(time.monotonic() - injected, 2)
    by = f"the step's agreement: train.nonfinite=stop (exit {code})"
    if code == 0:
        raise JzkError(f"the run completed despite the NaN: see {line.log}")
    line.start()  # what the user does after reading why it stopped
    resumed_s, resumed_from = _resumed(line, injected, starts_before)
    return rules.Measured(NAN, step, detected, by, resumed_s, resumed_from)


def _storage_full(line: Timeline, starts_before: set[str]) -> rules.Measured:
    """The checkpoints' filesystem full until the next save has met it (rehearse/
    storage_fill.py), then space again. With checkpoint.on_write_error=stop the run
    stops (exit 2) and is run again, as its user would once space is freed, from its
    newest complete checkpoint; with continue it says so and trains on."""
    from jeanzay_kit.rehearse.storage_fill import filled

    step, injected = _reached(line), time.monotonic()
    endings, logs = len(_records(line.run.endings)), _Said(line)
    where = line.run.checkpoints if line.run.checkpoints.is_dir() else line.run.root
    with filled(where.resolve()) as top_up:
        detected, by = _save_failed(line, endings, logs, top_up)
    if detected is None:  # no save met it: not survived, nothing to wait for
        return rules.Measured(STORAGE_FULL, step, None, by, None, None)
    took = round(detected - injected, 2)
    if line.on_write_error == "continue" and line.ended() is None:  # said; on it goes
        while line.step() <= step and line.ended() is None:
            time.sleep(POLL_S)
        resumed = round(time.monotonic() - injected, 2)
        return rules.Measured(STORAGE_FULL, step, took, by, resumed, step)
    if _wait_end(line) not in (0, 3):
        line.start()  # what its user does once space is freed
    resumed_s, resumed_from = _resumed(line, injected, starts_before)
    return rules.Measured(STORAGE_FULL, step, took, by, resumed_s, resumed_from)


def _save_failed(
    line: Timeline, endings: int, logs: _Said, top_up: Callable[[], None]
) -> tuple[float | None, str]:
    """When a save met the full filesystem (time.monotonic()) and what said it: the
    attempt's ending (endings.jsonl, on a stop), the run's line saying the checkpoint
    could not be written, or the run's end. Space freed meanwhile is taken again."""
    deadline = time.monotonic() + RESUME_GRACE_S
    while time.monotonic() < deadline:
        if len(records := _records(line.run.endings)) > endings:
            return time.monotonic(), _noticed(records[endings])
        if said := logs.new():
            return time.monotonic(), said
        if line.ended() is not None:
            return time.monotonic(), f"the run ended (exit {line.ended()})"
        top_up()
        time.sleep(POLL_S / 4)
    return None, f"no save met the full filesystem within {RESUME_GRACE_S:.0f} s"


class _Said:
    """The run's logs (the launcher's output, train.log) read from where they were when
    the fault began: the first new line saying a checkpoint could not be written."""

    def __init__(self, line: Timeline) -> None:
        self.paths = (line.log, line.run.train_log)
        self.offsets = {p: p.stat().st_size if p.exists() else 0 for p in self.paths}

    def new(self) -> str | None:
        for path in self.paths:
            try:
                with path.open("rb") as handle:
                    handle.seek(self.offsets[path])
                    added = handle.read()
            except OSError:
                continue
            whole = added[: added.rfind(b"\n") + 1]  # a line still being written: later
            self.offsets[path] += len(whole)
            for text in whole.decode(errors="replace").splitlines():
                if "could not be written" in text:
                    return text.strip()
        return None


def _targets(run: RunDir, rank: int, whole_node: bool = False) -> list[Beat]:
    """The live training process of `rank` in the newest start (its heartbeat is recent),
    or with whole_node every one on its node."""
    deadline = time.monotonic() + 30.0
    while time.monotonic() < deadline:
        now = time.time()
        beats = [
            b for b in run.beats() if not b.finished and now - b.wall_time < 3 * b.interval_s + 1
        ]
        if beats:
            newest = max(beats, key=lambda b: b.wall_time).token
            live = {b.rank: b for b in beats if b.token == newest}
            hit = live.get(rank, next(iter(live.values())))
            return [b for b in live.values() if b.host == hit.host] if whole_node else [hit]
        time.sleep(POLL_S)
    raise JzkError("no live training process to inject the fault into")


def _noticed(record: Mapping[str, object]) -> str:
    """What noticed the end an endings.jsonl record tells (report_rules.noticed_by)."""
    return rules.noticed_by(str(record.get("kind")), str(record.get("evidence")))


def _detected(line: Timeline, before: int, injected: float) -> tuple[float | None, str]:
    """Until endings.jsonl records the attempt's end (the stop agreement, the launcher,
    the watchdog, the job's restart step)."""
    deadline, quiet = injected + RESUME_GRACE_S + 600, Quiet(line)
    while time.monotonic() < deadline:
        quiet.note(_reached(line))
        records = _records(line.run.endings)
        if len(records) > before:
            return time.monotonic() - injected, _noticed(records[before])
        if line.ended() not in (None, 3):
            return None, f"the run ended (exit {line.ended()})"
        time.sleep(POLL_S)
    return None, "nothing noticed it"


def _stopped(
    line: Timeline, before: int, injected: float, said_from: int
) -> tuple[float | None, str]:
    """Detected when the ranks agreed to stop (rank 0's line in train.log past
    `said_from`, rank_lines.STOPPING), not when the save after it ended (a user trial read
    a save's seconds as the signal's); confirmed once the attempt records its stop:
    starts.jsonl's end record (the toolkit's loop, here and on Slurm) or an ending of kind
    stopped (a session's launcher). A loop that says nothing is timed to that record."""
    deadline, agreed = injected + RESUME_GRACE_S, None
    while time.monotonic() < deadline:
        if agreed is None:
            said, said_from = _said_since(line.run, said_from, STOPPING)
            agreed = time.monotonic() - injected if said else None
        if _stops(line.run) > before:
            took = time.monotonic() - injected if agreed is None else agreed
            return took, "the stop agreement: stopped, exit 3"
        if line.ended() not in (None, 3):
            return None, f"the run ended (exit {line.ended()})"
        time.sleep(POLL_S / 4)
    return None, "nothing noticed it"


def _log_size(run: RunDir) -> int:
    try:
        return run.train_log.stat().st_size
    except OSError:
        return 0


def _said_since(run: RunDir, offset: int, text: str) -> tuple[bool, int]:
    """Whether train.log holds `text` past byte `offset`, and where to read from next
    time: each poll reads only what was added (a run logging every step writes megabytes),
    less the last len(text) bytes, read again in case `text` was being written."""
    try:
        with run.train_log.open("rb") as log:
            log.seek(offset)
            added = log.read()
    except OSError:
        return False, offset
    return text.encode() in added, max(offset, offset + len(added) - len(text))


def _stops(run: RunDir) -> int:
    ends = [r for r in _records(run.starts) if "end_step" in r]
    stopped = [r for r in _records(run.endings) if r.get("kind") == "stopped"]
    return len(ends) + len(stopped)


def _tokens(run: RunDir) -> set[str]:
    """The attempts whose processes have written a heartbeat."""
    return {b.token for b in run.beats()}


def _watchdog_fired(run: RunDir, since: float) -> float | None:
    """Seconds from `since` (wall clock) to the watchdog's dump of the ranks' stacks (its
    hang-<step>/ folder), or None."""
    made = [
        p.stat().st_mtime
        for p in run.root.glob(f"{HANG_PREFIX}*")
        if p.is_dir() and p.stat().st_mtime >= since
    ]
    return round(min(made) - since, 2) if made else None


def _resumed(line: Timeline, injected: float, before: set[str]) -> tuple[float | None, int | None]:
    """Until a start after the fault (the heartbeat of a new attempt) has logged a step
    past the one it resumed from: the newest complete checkpoint when it began (a loop
    of the toolkit or of a session resumes from it; its beats' first step may precede
    the resume)."""
    deadline, start, new = time.monotonic() + RESUME_GRACE_S, None, NewSteps([])
    quiet = Quiet(line)
    while time.monotonic() < deadline:
        quiet.note(_reached(line))
        if start is None and any(b.token not in before for b in line.run.beats()):
            start = _newest_complete(line.run)
            new = NewSteps(_logged_steps(line.run))  # the steps logged before this start
        # A step past it: logged by the new start (the steps logged before the fault are
        # past it too, after a crash), or in its heartbeat (a loop that logs only when
        # it saves is not kept waiting for its next save).
        if start is not None and (
            new.past(_logged_steps(line.run), start) or _past(line, before, start)
        ):
            return round(time.monotonic() - injected, 2), start
        if not line.goes_on():
            break
        time.sleep(POLL_S / 4)
    return None, None


@dataclass
class NewSteps:
    """Whether a new start has logged a step past the one it resumed from. Its metrics
    writer first cuts metrics.jsonl back to the steps up to that one (runtime/metrics.py),
    then appends: until then the file still holds the steps the old attempt logged past
    it, with the same numbers."""

    before: list[int]  # the steps logged when the new start appeared
    cut: bool = False  # the file was seen shorter than that: cut back by the new start

    def past(self, steps: list[int], start: int) -> bool:
        self.cut = self.cut or len(steps) < len(self.before)
        # Longer than before: cut back, then appended to.
        rewritten = self.cut or len(steps) > len(self.before)
        return rewritten and bool(steps) and steps[-1] > start


def _past(line: Timeline, before: set[str], start: int) -> bool:
    """A new attempt's heartbeat shows a step past `start`."""
    return any(b.step > start for b in line.run.beats() if b.token not in before)


def _logged_steps(run: RunDir) -> list[int]:
    """The steps metrics.jsonl holds, in the order they were logged."""
    return [step for record in _records(run.metrics) if (step := record_step(record)) is not None]


def logged_losses(run: RunDir) -> dict[int, float]:
    """Each logged step's loss (metrics.jsonl); for a step trained again after a resume,
    the last attempt's."""
    losses = {}
    for record in _records(run.metrics):
        step, loss = record_step(record), record.get("loss")
        if step is not None and isinstance(loss, int | float) and not isinstance(loss, bool):
            losses[step] = float(loss)
    return losses


def _ending_step(run: RunDir, before: int) -> int:
    """The step the first attempt end recorded after the `before` first ones reached (0:
    none recorded, or no step in it)."""
    records = _records(run.endings)[before:]
    step = records[0].get("step") if records else None
    return step if isinstance(step, int) else 0


def _reached(line: Timeline) -> int:
    """The newest step the run reached: its metrics', or its heartbeats' (a session's
    loop may log less often than it steps)."""
    return max([line.step(), *(b.step for b in line.run.beats() if not b.finished)])


def _newest_complete(run: RunDir) -> int:
    from jeanzay_kit.ckpt.store import CheckpointStore

    return max(
        (e.step for e in CheckpointStore(run.checkpoints).entries() if e.has_manifest), default=0
    )


def _records(path: Path) -> list[dict[str, object]]:
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return []
    out = []
    for text in lines:
        try:
            out.append(json.loads(text))
        except ValueError:
            continue
    return out


def slowest_step_seconds(run: RunDir) -> float:
    """The slowest step of a run with its save (metrics.jsonl: every step, as a rehearsal
    logs them): what the watchdog's timeout must wait out."""
    slowest = 0.0
    for record in _records(run.metrics):
        try:
            took = float(str(record.get("step_time_s", 0))) + float(
                str(record.get("ckpt_block_s", 0))
            )
        except ValueError:
            continue
        slowest = max(slowest, took)
    return slowest


def save_seconds(run: RunDir) -> float:
    """The mean time a save blocked the loop (starts.jsonl's end records)."""
    blocks = [float(str(r["ckpt_block_s"])) for r in _records(run.starts) if "ckpt_block_s" in r]
    return sum(blocks) / len(blocks) if blocks else 0.0


def check_launch(spec: JobSpec, slurm: bool) -> None:
    """--slurm with a Slurm cluster profile; here with cluster=local."""
    if slurm and not spec.cluster.is_slurm:
        raise JzkError(
            f"--slurm with cluster={spec.cluster.name}: the rehearsal is submitted to a "
            "Slurm cluster. HINT: add cluster=<your profile> (jzk validate lists them), or "
            "leave out --slurm to rehearse here"
        )
    if spec.cluster.is_slurm and not slurm:
        raise JzkError(
            f"cluster={spec.cluster.name} without --slurm: a rehearsal runs here unless "
            "told. HINT: add --slurm to submit it (a small allocation: two runs of the "
            "request, one under the schedule), or cluster=local to rehearse here"
        )
