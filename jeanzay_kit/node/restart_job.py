"""After a failed job step: requeue the Slurm job while the restart budget allows.

The rendered script runs `python -m jeanzay_kit.node.restart_job` when srun ends with
an error: a hang (the watchdog's exit 4), a crashed rank (srun's --kill-on-bad-exit has
already ended the others), a lost node; a sweep's script task calls
restart_after_failure itself (node/script_task.py). The restart is recorded in
`<run_dir>/restarts.json` (ending/endings.py) and the job requeued: it resumes from its
newest complete checkpoint. A refusal (exit 2) or a preemption stop (exit 3, already
requeued by rank 0) is left alone, and a run out of budget stops with a message saying so.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from jeanzay_kit.distributed.ranks import RankInfo, array_id
from jeanzay_kit.ending.codes import Exit
from jeanzay_kit.ending.ending_rules import NODE_FAULTS, Verdict, excluded_nodes, node_of_rank
from jeanzay_kit.ending.endings import (
    AS_A_JOB,
    classify_attempt,
    not_retried_line,
    read_endings,
    record_ending,
    retry_after_failure,
)
from jeanzay_kit.errors import HostlistError, SlurmCommandError
from jeanzay_kit.rundir.run_directory import RunDir

NOT_RESTARTED = (0, Exit.REFUSED, Exit.STOPPED)
# How long the other ranks of a sweep's task wait for rank 0's requeue to end the job.
REQUEUE_WAIT_S = 60.0
# A script's step asking to run again: its "requeue me" exit (node/script_task.py turns
# it, and a death by the time-limit warning SIGUSR1, into RunDir.requeue_mark).
SCRIPT_REQUEUE = (Exit.STOPPED,)


class Requeued(str):
    """A line of restart_after_failure saying the job was requeued: a caller that must
    know (a sweep's task, which then ends as stopped) asks isinstance, not the words."""


def wrote_since(run_dir: RunDir, since: float | None) -> bool:
    """The user's script made progress: it wrote a file in its run directory (its own
    checkpoint, a session's checkpoints or metrics) after the step started. The
    toolkit's own files (the restart record, a session's heartbeats from its first
    second, hang dumps) are not progress (RunDir.script_files)."""
    from jeanzay_kit.script.script_files import script_writes

    return True if since is None else script_writes(run_dir, since)[1]


def sweep_point_limit(env: Mapping[str, str], max_restarts: int) -> int | None:
    """preemption.max_restarts for a task that submitit runs (a sweep's point: submitit
    sets SUBMITIT_FOLDER in it, submitit/core/submission.py process_job), which has no
    restart step after its srun; None for `srun jzk train` typed in an allocation, which
    is never requeued."""
    return max_restarts if env.get("SUBMITIT_FOLDER") else None


def after_task_failure(
    info: RankInfo,
    status: int,
    run_dir: RunDir,
    start: float,
    env: Mapping[str, str],
    limit: int | None,
    *,
    runner: Any = None,
    sleep: Callable[[float], None] = time.sleep,
    script: bool = False,
) -> int:
    """A hang or a crash in a sweep's task (a script's, the toolkit's loop's): the exit
    code the task ends with. Its point (limit: sweep_point_limit) goes the way of a
    rendered script's job: task 0 applies the restart step's rule (progress made,
    restarts left, not a failure that repeats), records the end and requeues the array
    task, which then ends as stopped (submitit writes no error result: its sweeper waits
    on). The other tasks wait for that requeue (ending first would have srun's
    --kill-on-bad-exit end task 0 in the middle of it). limit None: the failure stands."""
    if limit is None:
        return status
    if info.rank != 0:
        sleep(REQUEUE_WAIT_S)  # task 0 ending without a requeue ends this wait with the step
        return status
    try:
        said = restart_after_failure(
            run_dir, status, limit, env=env, runner=runner, since=start, script=script,
            exited="the script's exit" if script else "exit",
        )  # fmt: skip
    except OSError as err:  # the run's record cannot be written: the failure stands
        print(f"jzk: warning: the run's end not recorded: {err}", file=sys.stderr, flush=True)
        return status
    if said:
        print(said, file=sys.stderr, flush=True)
    return Exit.STOPPED if isinstance(said, Requeued) else status


def restart_after_failure(
    run_dir: RunDir,
    status: int,
    max_restarts: int,
    *,
    env: Mapping[str, str],
    runner=None,
    since: float | None = None,
    script: bool = False,
    slurm_log: str = "",
    exited: str = "srun exit",
) -> str:
    """Record and requeue (or refuse to); returns the line to print. since: when the
    failed job step started (a step failing before any progress is not requeued).
    slurm_log: the tail of the job's own stderr log (slurmstepd's and srun's words, a
    script's traceback), read with train.log for the verdict.
    script: the step ran the user's own command (job.entry a script), which asks for a
    requeue with exit 3 (or was ended by the time-limit signal it did not handle) and
    shows progress by writing in its run directory (a checkpoint).
    exited: whose exit status is `status` ("srun exit": the job step's; a sweep's task
    passes its script's)."""
    from jeanzay_kit.ending.requeue import requeue_job

    job = array_id(env) or env.get("SLURM_JOB_ID")
    request_file = env.get("JZK_REQUEUE_FILE") or None  # in a container: slurm/container.py
    mark = run_dir.requeue_mark
    how, died = f"exit {status}", None
    if script and mark.exists():  # a task's command exited 3 (node/script_task.py)
        # "<pid> [SIGNAL]": the signal it died of when it did not handle the warning
        words = mark.read_text(errors="replace").split()
        died = words[1] if len(words) > 1 else None
        how = f"killed by {died}, which it does not handle" if died else "exit 3"
        mark.unlink(missing_ok=True)
        status = Exit.STOPPED
    if script and status in SCRIPT_REQUEUE:
        _record(run_dir, status, since, job, retried=job is not None, died=died)
        if job is None:
            return ""
        try:
            requeue_job(job, request_file, runner)
        except SlurmCommandError as err:
            return f"jzk: the script asked for a requeue; could not requeue job {job}: {err}"
        return Requeued(f"jzk: the script stopped ({how}); requeued job {job}: no restart spent")
    if status in NOT_RESTARTED:
        if status != 0:
            stopped = status == Exit.STOPPED
            _record(run_dir, status, since, job, retried=stopped, slurm_log=slurm_log)
        return ""
    return _restart(
        run_dir, status, max_restarts, job=job, runner=runner, since=since, script=script,
        request_file=request_file, env=env, slurm_log=slurm_log, exited=exited,
    )  # fmt: skip


def _restart(
    run_dir: RunDir,
    status: int,
    max_restarts: int,
    *,
    job: str | None,
    runner: Any,
    since: float | None,
    script: bool,
    request_file: str | None = None,
    env: Mapping[str, str] | None = None,
    slurm_log: str = "",
    exited: str = "srun exit",
) -> str:
    """After a hang or a crash: requeue from the newest checkpoint when the rule both
    launchers follow allows it (ending/endings.py retry_after_failure), leaving a node
    at fault out of the next start.
    request_file: in a container, where the batch shell is asked to requeue."""
    # A script's hang: the tasks that found it ended with 4, but srun reports the
    # highest code of the step (a peer killed after them), so their folder tells.
    hung = status == 4 or (script and since is not None and run_dir.hang_dir(int(since)).is_dir())
    reason = "hang" if hung else f"failure ({exited} {status})"
    # Progress: a step completed (the toolkit's loop's beats, or a session's in a script),
    # or, for a script that says no step, a file it wrote into the run directory.
    progressed = run_dir.progressed_since(since or 0) or (script and wrote_since(run_dir, since))
    ended = classify_attempt(run_dir, 4 if hung else status, since, extra_log=slurm_log)
    verdict = at_fault(ended, env or {})
    if job is None:  # run by hand, outside a job: its end recorded, nothing restarted
        with contextlib.suppress(OSError):
            record_ending(run_dir, verdict, since=since, retried=False)
        return f"jzk: {reason} ({verdict.line()}), and this is not a Slurm job: nothing to requeue"
    retry = retry_after_failure(
        run_dir, verdict, since=since, progressed=progressed, limit=max_restarts,
        reason=reason, job_id=job, other_nodes=True,
    )  # fmt: skip
    if retry.why is not None:  # a broken node fails before any step too: not here
        said = not_retried_line(
            retry, verdict, reason, limit=max_restarts, run_dir=run_dir, by=AS_A_JOB
        )
        return f"jzk: {said}"
    return _requeue(
        run_dir, verdict, reason, f"{retry.count}/{max_restarts}", job=job, runner=runner,
        request_file=request_file, env=env or {},
    )  # fmt: skip


def _requeue(
    run_dir: RunDir,
    verdict: Verdict,
    reason: str,
    spent: str,
    *,
    job: str,
    runner: Any,
    request_file: str | None,
    env: Mapping[str, str],
) -> str:
    """Requeue the job (its restart already spent: `spent`, "1/3"), its nodes at fault
    left out."""
    from jeanzay_kit.ending.requeue import requeue_job

    try:
        requeue_job(job, request_file, runner)
    except SlurmCommandError as err:
        return f"jzk: {reason}; could not requeue job {job}: {err}"
    left_out = leave_out(run_dir, job, runner, env) if verdict.kind in NODE_FAULTS else ""
    return Requeued(
        f"jzk: {reason}; requeued job {job} ({spent}): it resumes from the "
        f"newest complete checkpoint{left_out}"
    )


def at_fault(verdict: Verdict, env: Mapping[str, str]) -> Verdict:
    """A node failure or GPU hardware error with the node it names: the node of the rank
    whose line showed it, or the job's only node."""
    if verdict.kind not in NODE_FAULTS or verdict.node is not None:
        return verdict
    nodelist = env.get("SLURM_JOB_NODELIST", "")
    per_node = env.get("SLURM_TASKS_PER_NODE", "")
    node = None
    if verdict.rank is not None and nodelist and per_node:
        node = node_of_rank(verdict.rank, nodelist, per_node)
    elif nodelist and "," not in nodelist and "[" not in nodelist:
        node = nodelist  # one node: it is the one
    return replace(verdict, node=node)


def leave_out(run_dir: RunDir, job: str, runner: Any, env: Mapping[str, str]) -> str:
    """Leave every node this job's attempts put at fault out of its next start
    (accumulated in endings.jsonl); the words that say so."""
    from jeanzay_kit.slurm.commands import exclude_nodes

    nodes = excluded_nodes([e for e in read_endings(run_dir) if e.get("job_id") == job])
    if not nodes:
        return " (the node at fault is unknown: nothing left out)"
    try:
        exclude_nodes(job, nodes, runner)
    except SlurmCommandError as err:
        return (
            f"; could not leave out {','.join(nodes)}: {err}. HINT: if no node is left for "
            f"the job, cancel it (scancel {job}) and submit with other nodes"
        )
    return f", without node(s) {','.join(nodes)} (ExcNodeList, kept in {run_dir.endings.name})" + (
        _nodes_left(job, nodes, env, runner)
    )


def _nodes_left(job: str, excluded: list[str], env: Mapping[str, str], runner: Any) -> str:
    """Said when the nodes left in the job's partition (sinfo) are fewer than it asks:
    it would pend for ever."""
    from jeanzay_kit.slurm.commands import show_text
    from jeanzay_kit.slurm_syntax.hostlist import expand_hostlist

    partition = env.get("SLURM_JOB_PARTITION")
    if not partition:
        return ""
    try:
        text = show_text(["sinfo", "-h", "-p", partition, "-o", "%N"], runner)
        nodes = {n for line in text.split() for n in expand_hostlist(line)}
    except (SlurmCommandError, HostlistError):
        return ""
    need = int(env.get("SLURM_JOB_NUM_NODES") or env.get("SLURM_NNODES") or 1)
    left = len(nodes - set(excluded))
    if not nodes or left >= need:
        return ""
    return (
        f"; but partition {partition} is left with {left} node(s) for the job's {need}: "
        f"it will wait for ever. HINT: scancel {job} and submit to another partition "
        f"(resources.partition), or once the nodes are repaired: scontrol update "
        f"JobId={job} ExcNodeList="
    )


def _record(
    run_dir: RunDir,
    status: int,
    since: float | None,
    job: str | None,
    *,
    retried: bool,
    died: str | None = None,
    slurm_log: str = "",
) -> None:
    """The end of a step the restart logic leaves alone (a refusal, a stop), recorded.
    died: the stop signal a script died of (it did not handle it: nothing saved).
    slurm_log: the job's stderr log, where a script's own words are (a session's full
    disk said there, not in train.log, was recorded `unknown: exit 2`)."""
    with contextlib.suppress(OSError):
        ended = classify_attempt(run_dir, status, since, signal_name=died, extra_log=slurm_log)
        record_ending(run_dir, ended, job_id=job, since=since, retried=retried)


def job_err_log(job_id: str | None, runner: Any = None) -> str:
    """The tail of the job's stderr log (scontrol's StdErr=): where slurmstepd and srun
    write, and a script's traceback; "" when unknown."""
    from jeanzay_kit.ending.endings import log_tail
    from jeanzay_kit.slurm.commands import show_text

    if not job_id:
        return ""
    try:
        text = show_text(["scontrol", "show", "job", "-o", job_id], runner)
    except SlurmCommandError:
        return ""
    # The path runs to the next `Key=` of scontrol's line (or the line's end): a folder
    # with a space in its name ("own loop") was cut there, and no log was read.
    found = re.search(r"\bStdErr=(.+?)(?=\s+\w+=|\s*$)", text, re.M)
    return log_tail(Path(found.group(1))) if found else ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jeanzay_kit.node.restart_job")
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--status", type=int, required=True)
    parser.add_argument("--max-restarts", type=int, required=True)
    parser.add_argument("--since", type=float, default=None, help="the step's start (epoch s)")
    parser.add_argument("--script", action="store_true", help="the step ran job.entry, a script")
    args = parser.parse_args(argv)
    # Our own `scontrol requeue` makes Slurm send SIGTERM to the batch step, this process
    # included: it must not cut the line that says what was done.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # The environment is read here, once.
    env = dict(os.environ)
    line = restart_after_failure(
        RunDir.of(args.run_dir),
        args.status,
        args.max_restarts,
        env=env,
        since=args.since,
        script=args.script,
        slurm_log=job_err_log(env.get("SLURM_JOB_ID")) if args.status not in (0, 3) else "",
    )
    if line:
        print(line, file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
