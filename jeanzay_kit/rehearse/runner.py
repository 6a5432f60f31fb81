"""Run a rehearsal here: the run without faults (the reference), then the same run under
the schedule, each fault injected for real into its processes (signals to the launcher
and to one training process), timed from what the run directory records.

Local runs only (cluster=local): the run's processes are this machine's.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from jeanzay_kit.ckpt.layout import TMP_PREFIX
from jeanzay_kit.config.spec import JobSpec
from jeanzay_kit.distributed.script_env import REHEARSAL_ENV
from jeanzay_kit.errors import JzkError
from jeanzay_kit.rehearse import report_rules as rules
from jeanzay_kit.rehearse.schedule import CKPT_WRITE, HANG, KILL_RANK, NAN, STARTUP, Fault
from jeanzay_kit.rundir.run_directory import RunDir
from jeanzay_kit.rundir.run_layout import HANG_PREFIX

POLL_S = 0.2
# After its recovery a fault must be followed by progress within this (and the watchdog).
RESUME_GRACE_S = 120.0


@dataclass
class Timeline:
    """The run's command and what it has done: started with `train.log_every=1`, so
    metrics.jsonl has every step."""

    argv: list[str]
    run: RunDir
    proc: subprocess.Popen[bytes] | None = None
    log: Path | None = None
    nonfinite: str = "stop"  # train.nonfinite: what a NaN does to the run

    def start(self, rehearsal: bool = True) -> None:
        assert self.log is not None
        env = dict(os.environ)
        if rehearsal:
            env[REHEARSAL_ENV] = "1"  # rank 0 looks for the NaN fault's file
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                self.argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env
            )

    def step(self) -> int:
        """The newest step metrics.jsonl holds (0: none yet)."""
        try:
            lines = self.run.metrics.read_text().splitlines()
        except OSError:
            return 0
        for line in reversed(lines):
            try:
                return int(json.loads(line)["step"])
            except (ValueError, KeyError, TypeError):
                continue
        return 0

    def ended(self) -> int | None:
        return None if self.proc is None else self.proc.poll()


@dataclass(frozen=True)
class Reference:
    """The run without faults: its time, its model's digest, and its pace (steps a second
    of training, from when its first step was logged to its last: the schedule's seconds
    become steps at this pace, so a faster or slower machine meets the same faults)."""

    seconds: float
    digest: str
    steps_per_s: float


def run_here(overrides: Sequence[str], run_dir: Path, log: Path) -> Reference:
    line = Timeline(_argv(overrides, run_dir), RunDir(run_dir), log=log)
    started = time.monotonic()
    line.start(rehearsal=False)
    first: tuple[float, int] | None = None
    last = (started, 0)
    while line.ended() is None:
        step = line.step()
        if step > last[1]:
            last = (time.monotonic(), step)
            first = first or last
        time.sleep(POLL_S)
    if (code := line.ended()) != 0:
        raise JzkError(f"the run without faults failed (exit {code}): see {log}")
    seconds = time.monotonic() - started
    pace = (last[1] - first[1]) / (last[0] - first[0]) if first and last[0] > first[0] else 0.0
    digest = RunDir(run_dir).model_digest.read_text().strip()
    return Reference(seconds, digest, pace or max(line.step(), 1) / seconds)


def _argv(overrides: Sequence[str], run_dir: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "jeanzay_kit.cli",
        "train",
        *overrides,
        f"job.run_dir={run_dir}",
        "train.log_every=1",
    ]


def rehearse_run(
    overrides: Sequence[str],
    run_dir: Path,
    plan: Sequence[tuple[Fault, int]],
    log: Path,
    nonfinite: str,
) -> tuple[list[rules.Measured], float]:
    """The run under the schedule (each fault with the steps of training before it): each
    fault measured; the run's total time (it is started again after each stop, as a
    requeue would, until it is done)."""
    line = Timeline(_argv(overrides, run_dir), RunDir(run_dir), log=log, nonfinite=nonfinite)
    started = time.monotonic()
    line.start()
    measured = [_one(line, fault, steps) for fault, steps in plan]
    while (code := _wait(line)) == 3:
        line.start()  # a stop after a save: run again, as Slurm's requeue would
    if code != 0:
        raise JzkError(f"the rehearsal's run ended with exit {code}: see {log}")
    return measured, time.monotonic() - started


def _wait(line: Timeline) -> int:
    assert line.proc is not None
    return line.proc.wait()


def _train_for(line: Timeline, steps: int) -> None:
    """Let the run train `steps` past the newest step logged so far (after a resume from
    an older checkpoint, past that step again), starting it again after a stop."""
    target = line.step() + steps
    while line.step() < target:
        if line.ended() is not None:
            if line.ended() != 3:
                raise JzkError(
                    f"the run ended (exit {line.ended()}) at step {line.step()}, before the "
                    f"next fault at step {target}: see {line.log}"
                )
            line.start()
        time.sleep(POLL_S / 4)


def _one(line: Timeline, fault: Fault, steps: int) -> rules.Measured:
    _train_for(line, steps)
    if fault.kind == STARTUP:  # a stop, then the warning again while it starts
        _stop(line)
        line.start()
        time.sleep(1.0)
    step, injected, wall = line.step(), time.monotonic(), time.time()
    endings_before = len(_records(line.run.endings))
    starts_before = len(_starts(line.run))
    if fault.kind == NAN:
        return _nan(line, fault, starts_before)
    if fault.kind == CKPT_WRITE:
        pid = _rank_pid(line.run, fault.rank)
        _during_a_save(line)
        step, injected = line.step(), time.monotonic()
        os.kill(pid, signal.SIGKILL)
        detected, by = _detected(line, endings_before, injected)
    elif fault.kind in (KILL_RANK, HANG):
        pid = _rank_pid(line.run, fault.rank)
        os.kill(pid, signal.SIGKILL if fault.kind == KILL_RANK else signal.SIGSTOP)
        detected, by = _detected(line, endings_before, injected)
        fired = _watchdog_fired(line.run, wall)
        if fault.kind == HANG and fired is not None:  # when it fired, not when it was done
            detected = fired
    else:
        assert line.proc is not None
        line.proc.send_signal(signal.SIGUSR1)
        code = _wait(line)
        detected, by = time.monotonic() - injected, f"the stop agreement (exit {code})"
        line.start()
    resumed_s, resumed_from = _resumed(line, injected, starts_before)
    took = None if detected is None else round(detected, 2)
    return rules.Measured(fault.kind, step, took, by, resumed_s, resumed_from)


def _during_a_save(line: Timeline) -> None:
    """Until a save is being written: a checkpoint's temporary folder is there (the
    commit renames it when complete). Polled fast: a small model's save lasts tens of
    milliseconds."""
    deadline = time.monotonic() + RESUME_GRACE_S
    while time.monotonic() < deadline:
        if any(line.run.checkpoints.glob(f"{TMP_PREFIX}*")):
            return
        if line.ended() is not None:
            raise JzkError(f"the run ended (exit {line.ended()}) before a save to interrupt")
        time.sleep(0.002)
    raise JzkError(f"no save began within {RESUME_GRACE_S:.0f} s: checkpoint.every_steps?")


def _nan(line: Timeline, fault: Fault, starts_before: int) -> rules.Measured:
    """A NaN for the next step's loss (rank 0 takes the file): with train.nonfinite=stop
    the run stops before the update (exit 2) and is run again, as its user would, from
    its newest checkpoint; with skip it drops the update and goes on."""
    step, injected = line.step(), time.monotonic()
    line.run.fault_nan.write_text(f"fault {fault.number}\n")
    while line.run.fault_nan.exists() and line.ended() is None:
        time.sleep(POLL_S / 4)
    if line.nonfinite == "skip":  # the update dropped, on it goes
        detected = round(time.monotonic() - injected, 2)
        while line.step() <= step and line.ended() is None:
            time.sleep(POLL_S)
        by = "the step's agreement: train.nonfinite=skip, the update dropped"
        return rules.Measured(NAN, step, detected, by, detected, step)
    assert line.proc is not None
    code = line.proc.wait()
    detected = round(time.monotonic() - injected, 2)
    by = f"the step's agreement: train.nonfinite=stop (exit {code})"
    if code not in (2, 3):
        raise JzkError(f"the run ended with exit {code} on the NaN: see {line.log}")
    line.start()  # what the user does after reading why it stopped
    resumed_s, resumed_from = _resumed(line, injected, starts_before)
    return rules.Measured(NAN, step, detected, by, resumed_s, resumed_from)


def _stop(line: Timeline) -> None:
    assert line.proc is not None
    line.proc.send_signal(signal.SIGUSR1)
    _wait(line)


def _rank_pid(run: RunDir, rank: int) -> int:
    """The pid of a live training process of the newest start (its heartbeat is recent)."""
    deadline = time.monotonic() + 30.0
    while time.monotonic() < deadline:
        now = time.time()
        beats = [
            b for b in run.beats() if not b.finished and now - b.wall_time < 3 * b.interval_s + 1
        ]
        if beats:
            newest = max(beats, key=lambda b: b.wall_time).token
            pids = {b.rank: b.pid for b in beats if b.token == newest}
            return pids.get(rank, next(iter(pids.values())))
        time.sleep(POLL_S)
    raise JzkError("no live training process to inject the fault into")


def _detected(line: Timeline, before: int, injected: float) -> tuple[float | None, str]:
    """Until endings.jsonl records the attempt's end (the launcher or the watchdog)."""
    deadline = injected + RESUME_GRACE_S + 600
    while time.monotonic() < deadline:
        records = _records(line.run.endings)
        if len(records) > before:
            new = records[before]
            return time.monotonic() - injected, f"{new.get('kind')}: {new.get('evidence')}"
        if line.ended() not in (None, 3):
            return None, f"the run ended (exit {line.ended()})"
        time.sleep(POLL_S)
    return None, "nothing noticed it"


def _starts(run: RunDir) -> list[dict[str, object]]:
    return [r for r in _records(run.starts) if "start_step" in r]


def _watchdog_fired(run: RunDir, since: float) -> float | None:
    """Seconds from `since` (wall clock) to the watchdog's dump of the ranks' stacks (its
    hang-<step>/ folder), or None."""
    made = [
        p.stat().st_mtime
        for p in run.root.glob(f"{HANG_PREFIX}*")
        if p.is_dir() and p.stat().st_mtime >= since
    ]
    return round(min(made) - since, 2) if made else None


def _resumed(line: Timeline, injected: float, before: int) -> tuple[float | None, int | None]:
    """Until a start after the fault has logged a step past the one it resumed from."""
    deadline = time.monotonic() + RESUME_GRACE_S
    while time.monotonic() < deadline:
        starts = _starts(line.run)
        if len(starts) > before:
            start = int(str(starts[-1]["start_step"]))
            if line.step() > start:
                return round(time.monotonic() - injected, 2), start
        if line.ended() not in (None, 3):
            break
        if line.ended() == 3:
            line.start()
        time.sleep(POLL_S)
    return None, None


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


def save_seconds(run: RunDir) -> float:
    """The mean time a save blocked the loop (starts.jsonl's end records)."""
    blocks = [float(str(r["ckpt_block_s"])) for r in _records(run.starts) if "ckpt_block_s" in r]
    return sum(blocks) / len(blocks) if blocks else 0.0


def check_local(spec: JobSpec) -> None:
    if spec.cluster.is_slurm:
        raise JzkError(
            f"cluster={spec.cluster.name}: jzk rehearse runs here (cluster=local) for now; "
            "a rehearsal on the Slurm cluster is not built yet. HINT: rehearse with "
            "cluster=local and the same model, data and checkpoint settings"
        )
