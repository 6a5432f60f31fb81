"""How the run's attempts ended, as the run directory records it. Edge (files).

- `endings.jsonl`: one line per end of an attempt, written by whoever saw it end (the
  local launcher, node/local.py; the batch script's step after srun,
  node/restart_job.py): the class and its one line of evidence (ending/ending_rules.py),
  the step reached, the nodes, the newest complete checkpoint then. `jzk status` and
  `jzk report` read the newest; the next failure is compared with it (a repeat ends the
  run instead of a restart).
- `restarts.json`: the restart budget. After a hang (Exit.HUNG) or a crash, a run with
  restarts left goes again from its newest complete checkpoint; the count lives in the
  run directory, so it survives the process that made it, and a run that keeps failing
  stops after preemption.max_restarts restarts instead of looping. A run that finishes
  clears it.
- `outcome.json`: how a local run ended, for `jzk status`. A Slurm job's end is in
  Slurm's accounting; a run on this machine has no scheduler, and a script task writes
  neither heartbeats nor model_final.pt. It is removed when a run starts, so a run in
  progress never shows the end of the one before.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jeanzay_kit import report
from jeanzay_kit.durable_io import write_durably
from jeanzay_kit.ending.codes import Exit
from jeanzay_kit.ending.ending_rules import (
    COMPLETED,
    NODE_FAULTS,
    Decision,
    Verdict,
    attempt_part,
    classify,
    decide,
    verdict_of,
)
from jeanzay_kit.rundir.run_directory import RunDir
from jeanzay_kit.script.script_rules import rerun_note

LOG_TAIL_BYTES = 256 * 1024  # an attempt's end is near the end of the log


def log_tail(path: Path) -> str:
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - LOG_TAIL_BYTES))
            return handle.read().decode(errors="replace")
    except OSError:
        return ""


def attempt_log(run_dir: RunDir) -> str:
    """The newest attempt's lines of train.log, labels removed."""
    from jeanzay_kit.slurm.sbatch import START_MARK

    return attempt_part(log_tail(run_dir.train_log), START_MARK)


def attempt_beats(run_dir: RunDir, since: float | None) -> tuple[int | None, list[str]]:
    """The step the attempt started at `since` reached (its ranks' newest beats), and
    the hosts of its ranks."""
    beats = [b for b in run_dir.beats() if since is None or b.wall_time >= since]
    step = max((b.step for b in beats), default=None)
    return step, sorted({b.host for b in beats})


def newest_checkpoint(run_dir: RunDir) -> int | None:
    from jeanzay_kit.ckpt.store import CheckpointStore

    root = run_dir.checkpoints
    if not root.is_dir():
        return None
    steps = [e.step for e in CheckpointStore(root).entries() if e.has_manifest]
    return max(steps, default=None)


def classify_attempt(
    run_dir: RunDir,
    exit_code: int | None,
    since: float | None,
    *,
    signal_name: str | None = None,
    slurm_state: str = "",
    extra_log: str = "",
) -> Verdict:
    """The end of the attempt started at `since`, from train.log (and `extra_log`: the
    job's own Slurm log, where slurmstepd writes) and its heartbeats."""
    from jeanzay_kit.slurm.sbatch import START_MARK

    step, _ = attempt_beats(run_dir, since)
    log = attempt_log(run_dir)
    if extra_log:  # the newest attempt's part of it (the batch script marks each start)
        log += "\n" + attempt_part(extra_log, START_MARK)
    return classify(
        exit_code=exit_code,
        log=log,
        signal_name=signal_name,
        slurm_state=slurm_state,
        step=step,
    )


def read_endings(run_dir: RunDir) -> list[dict[str, Any]]:
    """How each attempt ended, oldest first (endings.jsonl, one JSON object a line)."""
    return run_dir.ending_records()


def newest_ending(run_dir: RunDir) -> Verdict | None:
    endings = read_endings(run_dir)
    return verdict_of(endings[-1]) if endings else None


def rerun_line(run_dir: RunDir, resume_args: Sequence[str]) -> str | None:
    """When the run's newest end is its script's completion: the line saying that the
    same command runs the script again, in place (script/script_rules.py rerun_note);
    None otherwise. Said by the task (node/script_task.py) and, before the queue, by
    `jzk submit` (cli/common.py)."""
    ended = newest_ending(run_dir)
    if ended is None or ended.kind != COMPLETED:
        return None
    return rerun_note(str(run_dir), resume_args, ended.evidence)


def record_ending(
    run_dir: RunDir,
    verdict: Verdict,
    *,
    job_id: str | None = None,
    since: float | None = None,
    retried: bool | None = None,
    nodes: list[str] | None = None,
) -> None:
    """Append one end of an attempt (one write on a file opened for appending). nodes:
    the attempt's nodes when known without heartbeats (the health gate's, before any)."""
    checkpoint = newest_checkpoint(run_dir)
    hosts = nodes if nodes is not None else attempt_beats(run_dir, since)[1]
    record = {
        **verdict.record(),
        "job_id": job_id,
        "nodes": hosts,
        "checkpoint": checkpoint,
        "retried": retried,
        "time": time.time(),
    }
    run_dir.root.mkdir(parents=True, exist_ok=True)
    fd = os.open(run_dir.endings, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(record) + "\n").encode())
    finally:
        os.close(fd)


def record_completed(
    run_dir: RunDir, evidence: str, *, step: int | None = None, job_id: str | None = None
) -> None:
    """The run ran to its end: its newest end is "completed" (not a Slurm job's earlier
    failure, nor the stop before its requeue, which `jzk status` kept saying with its
    "run the same command again"), and its restart budget starts afresh. Written by rank
    0 of the toolkit's loop (node/worker_start.py) and task 0 of a script
    (node/script_task.py); a peer that fails after it is recorded later, by the restart
    step, and wins. Never a reason to fail the run."""
    done = Verdict(COMPLETED, f"done: {evidence}", step=step)
    try:
        record_ending(run_dir, done, job_id=job_id)
        clear_restarts(run_dir)
    except OSError as err:
        print(f"jzk: warning: the run's end not recorded: {err}", file=sys.stderr, flush=True)


def record_unretried_end(
    run_dir: RunDir, code: int, signum: int, since: float, job_id: str | None = None
) -> None:
    """A run of the user's own script that nothing restarts (`jzk train job.entry=...`
    here, or `srun jzk train job.entry=...` by hand, job_id its job): its end, classified
    from its code, the signal a process died of and its train.log, as a Slurm job's are
    (retried false)."""
    import signal

    name = signal.Signals(signum).name if signum > 0 else None
    with contextlib.suppress(OSError):  # the record never fails the run
        verdict = classify_attempt(run_dir, code, since, signal_name=name)
        record_ending(run_dir, verdict, job_id=job_id, since=since, retried=False)


def judge(run_dir: RunDir, verdict: Verdict) -> Decision:
    """Whether restarting after `verdict` can help, against the run's record: the end
    before it (when this attempt was a restart) and the checkpoints since."""
    restarted = bool(read_restarts(run_dir))
    endings = read_endings(run_dir) if restarted else []
    previous = verdict_of(endings[-1]) if endings else None
    before = endings[-1].get("checkpoint") if endings else None
    return decide(
        verdict,
        previous,
        new_checkpoint=newest_checkpoint(run_dir) != before,
        restarted_before=restarted,
    )


# Why a failed attempt is not tried again (Retry.why), each said in its launcher's words.
NO_PROGRESS, CANNOT_PASS, BUDGET_SPENT = "no progress", "cannot pass", "budget spent"


@dataclass(frozen=True)
class Retry:
    """After a failed attempt: another one (`count`: the restarts spent, this one
    included), or why not (`why`; `decision` when the rules say it cannot pass)."""

    why: str | None = None
    decision: Decision | None = None
    count: int = 0


def retry_after_failure(
    run_dir: RunDir,
    verdict: Verdict,
    *,
    since: float | None,
    progressed: bool,
    limit: int,
    reason: str,
    job_id: str | None = None,
    other_nodes: bool = False,
) -> Retry:
    """The one rule both launchers follow after a hang or a crash (node/local.py
    restarts the workers, node/restart_job.py requeues the Slurm job): an attempt that
    completed no step would fail the same way, unless a node was at fault and the next
    attempt may run on other nodes (`other_nodes`: a Slurm job); then the rules'
    judgement on the run's record (ending_rules.decide); then the restart budget
    (preemption.max_restarts). The attempt's end is recorded either way and, on a
    retry, one restart spent."""
    node_fault = other_nodes and verdict.kind in NODE_FAULTS
    if since is not None and not progressed and not node_fault:
        record_ending(run_dir, verdict, job_id=job_id, since=since, retried=False)
        return Retry(NO_PROGRESS)
    decision = judge(run_dir, verdict)
    if not decision.retry:
        record_ending(run_dir, verdict, job_id=job_id, since=since, retried=False)
        return Retry(CANNOT_PASS, decision)
    budget_left = len(read_restarts(run_dir)) < limit
    record_ending(run_dir, verdict, job_id=job_id, since=since, retried=budget_left)
    if not budget_left:
        return Retry(BUDGET_SPENT)
    return Retry(count=record_restart(run_dir, reason, job_id))


def verdict_line(verdict: Verdict, decision: Decision) -> str:
    """`data error at step 4: ValueError: ...; not restarted: the attempt before failed
    the same way at the same step. HINT: ...`"""
    return f"{verdict.line()}; not restarted: {decision.why}. HINT: {verdict.fix}"


@dataclass(frozen=True)
class GoesOn:
    """How a failed run is tried again where it runs, in the words of its line."""

    verb: str  # what is not done: "restarted" (the local launcher), "requeued" (a job)
    again: str  # what its user does once the cause is fixed


LOCALLY = GoesOn("restarted", "run the same command again")
AS_A_JOB = GoesOn("requeued", "submit the job again")


def not_retried_line(
    retry: Retry, verdict: Verdict, reason: str, *, limit: int, run_dir: RunDir, by: GoesOn
) -> str:
    """Why a failed attempt (retry.why set) is not tried again: one line, the same rule
    and words for the local launcher and a Slurm job (node/restart_job.py)."""
    if retry.why == NO_PROGRESS:
        return (
            f"the run ended in a {reason} before completing any step of this attempt: not "
            f"{by.verb}, since it would fail the same way (no restart of "
            f"preemption.max_restarts={limit} spent; {verdict.line()}). HINT: read the error "
            f"above, fix its cause, then {by.again}: it resumes from the newest complete "
            "checkpoint"
        )
    if retry.decision is not None:
        return (
            f"the run failed: {verdict_line(verdict, retry.decision)} (history in "
            f"{run_dir.endings.name})"
        )
    return (
        f"the run ended in a {reason}: {verdict.line()}; it has used its {limit} restart(s) "
        f"(preemption.max_restarts={limit}, history in {run_dir.restarts}): not {by.verb}. "
        "HINT: read the error above (and any hang-<step>/ folder), fix the cause, then "
        f"{by.again}: it resumes from the newest complete checkpoint (delete "
        f"{run_dir.restarts.name} to reset the budget)"
    )


def restart_local_attempt(
    run_dir: RunDir, code: int, since: float, died: str | None, *, stopping: bool, limit: int
) -> bool:
    """The local launcher's end of an attempt (node/local.py; `died`: the signal its
    first failed worker died of): recorded, then restarted (True) after a hang or a
    crash while a stop was not asked, by the rule a Slurm job follows too, or the reason
    it is not said (False)."""
    verdict = classify_attempt(run_dir, code, since, signal_name=died)
    if code not in (Exit.RAISED, Exit.HUNG) or stopping:
        if code != Exit.OK:  # a completed run's rank 0 records its end (node/worker_start.py)
            with contextlib.suppress(OSError):
                record_ending(run_dir, verdict, since=since)
        return False
    reason = "hang" if code == Exit.HUNG else "crash"
    progressed = run_dir.progressed_since(since)
    retry = retry_after_failure(
        run_dir, verdict, since=since, progressed=progressed, limit=limit, reason=reason
    )
    if retry.why is not None:
        _say(not_retried_line(retry, verdict, reason, limit=limit, run_dir=run_dir, by=LOCALLY))
    else:
        _say(
            f"restarting after a {reason} ({retry.count}/{limit}), from the newest complete "
            f"checkpoint ({verdict.line()})"
        )
    return retry.why is None


def _say(line: str) -> None:
    print(f"{report.TRAIN}: {line}", file=sys.stderr, flush=True)


# The restart budget: restarts.json


def _restart_records(run_dir: RunDir) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(restarts that count against the budget now, those of earlier finished runs)."""
    return run_dir.restart_records()


def _write_restarts(run_dir: RunDir, restarts: list, history: list) -> None:
    run_dir.root.mkdir(parents=True, exist_ok=True)
    body = {"restarts": restarts, "history": history}
    write_durably(run_dir.restarts, json.dumps(body, indent=1).encode())


def read_restarts(run_dir: RunDir) -> list[dict[str, Any]]:
    """The restarts that count against preemption.max_restarts now."""
    return _restart_records(run_dir)[0]


def record_restart(run_dir: RunDir, reason: str, job_id: str | None = None) -> int:
    """Add one restart (of Slurm job `job_id`, the manifest's form: "123" or an array
    task's "123_4"; None: a local run); returns how many the run has had, this one
    included."""
    current, history = _restart_records(run_dir)
    current.append({"reason": reason, "time": time.time(), "job_id": job_id})
    _write_restarts(run_dir, current, history)
    return len(current)


def clear_restarts(run_dir: RunDir) -> None:
    """The run finished: its budget starts afresh; what happened moves to the history."""
    current, history = _restart_records(run_dir)
    if current:
        _write_restarts(run_dir, [], history + current)


# A local run's end: outcome.json


def state_of(exit_code: int) -> str:
    """Slurm's words for how a run ended: COMPLETED, STOPPED (run again to go on), FAILED."""
    if exit_code == 0:
        return "COMPLETED"
    return "STOPPED" if exit_code == Exit.STOPPED else "FAILED"


def clear_outcome(run_dir: RunDir) -> None:
    run_dir.outcome.unlink(missing_ok=True)


def record_outcome(run_dir: RunDir, exit_code: int, signum: int = 0) -> None:
    """signum: the signal a process of the run died of (0: none), e.g. a script's
    SIGUSR1 it does not handle, which stops the run (exit 3) but is what happened."""
    record = {
        "state": state_of(exit_code),
        "exit_code": exit_code,
        "signal": signum or None,
        "ended_at": time.time(),
    }
    write_durably(run_dir.outcome, (json.dumps(record) + "\n").encode())


def read_signal(run_dir: RunDir) -> int:
    """The signal a process of the last local run died of (0: none, or not recorded)."""
    try:
        record = json.loads(run_dir.outcome.read_text())
    except (OSError, ValueError):
        return 0
    signum = record.get("signal") if isinstance(record, dict) else None
    return signum if isinstance(signum, int) and signum > 0 else 0


def read_outcome(run_dir: RunDir) -> str | None:
    """The recorded state of the last local run, or None (running, or never recorded)."""
    try:
        record = json.loads(run_dir.outcome.read_text())
    except (OSError, ValueError):
        return None
    state = record.get("state") if isinstance(record, dict) else None
    return state if isinstance(state, str) else None


class Outcome:
    code = 1  # until the launcher returns: an exception is a failure
    signal = 0  # the signal a process of the run died of (a script's launcher sets it)


@contextmanager
def recorded_outcome(run_dir: RunDir) -> Iterator[Outcome]:
    """A local run's end, recorded whatever happens in the block: the earlier run's
    removed first, so a run in progress never shows it."""
    run_dir.root.mkdir(parents=True, exist_ok=True)
    clear_outcome(run_dir)
    outcome = Outcome()
    try:
        yield outcome
    except SystemExit as done:  # one worker trains in this process, and exits 3 on a stop
        outcome.code = done.code if isinstance(done.code, int) else 1
        raise
    finally:
        record_outcome(run_dir, outcome.code, outcome.signal)
