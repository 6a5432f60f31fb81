"""The files of a script task's run directory: whose they are, which command owns the
directory, and another run of the same script beside a new one (`jzk train
job.entry=train.py -- --epochs 14` after `-- --epochs 12` starts a new run directory,
since the arguments name the run, while the old one holds the script's checkpoint: by
design, but said in one line at start, with job.args_may_change). Edge (reads and writes
files); the rules are script/script_rules.py."""

from __future__ import annotations

import contextlib
import glob
import json
import os
import socket
import time
from collections.abc import Sequence
from pathlib import Path

from jeanzay_kit.errors import JzkError
from jeanzay_kit.project.places import resume_values
from jeanzay_kit.rundir.beats import ScriptBeat
from jeanzay_kit.rundir.progress import format_duration
from jeanzay_kit.rundir.run_directory import RunDir
from jeanzay_kit.script.script_rules import (
    ResumeTarget,
    ScriptCommand,
    changed_options,
    command_differences,
    refusal,
    resume_refusal,
)


def script_writes(run_dir: RunDir, since: float, hydra_job: str | None = None) -> tuple[bool, bool]:
    """(files of the script's older than `since` are in run_dir, it wrote one since):
    what the script left to resume from, and whether this attempt saved anything. The
    toolkit's own files (RunDir.script_files) are not the script's, nor,
    for a Hydra app (`hydra_job`: its job name), what Hydra writes at every start
    (script/hydra_app_rules.py is_hydra_record)."""
    mtimes = [mtime for _, mtime in _script_files(run_dir, hydra_job)]
    return any(t < since for t in mtimes), any(t >= since for t in mtimes)


def _script_files(run_dir: RunDir, hydra_job: str | None = None) -> list[tuple[Path, float]]:
    """Every file of the script's under run_dir, with its mtime (hydra_job: script_writes)."""
    from jeanzay_kit.script.hydra_app_rules import is_hydra_record

    if hydra_job is None:
        return run_dir.script_files()
    return run_dir.script_files(skip=lambda parts: is_hydra_record(parts, hydra_job))


def wrote_since(
    run_dir: RunDir, since: float, args: Sequence[str], base: Path, hydra_job: str | None = None
) -> bool:
    """Whether the attempt that started at `since` wrote a file: under its run
    directory (its working directory included), or under a path its arguments name
    (`--out_dir=/scratch/x`, `ckpt/`). Observed, never assumed (hydra_job: script_writes)."""
    if script_writes(run_dir, since, hydra_job)[1]:
        return True
    for value in argument_paths(args, base):
        path = Path(value)
        try:
            if path.is_file() and path.stat().st_mtime >= since:
                return True
            if path.is_dir() and _newest_under(path) >= since:
                return True
        except OSError:
            continue
    return False


def argument_paths(args: Sequence[str], base: Path) -> list[str]:
    """The values of `args` that name something on disk (`--out=X`, `X`), relative
    ones taken from `base` (the script's working directory)."""
    found = []
    for arg in args:
        value = arg.split("=", 1)[1] if arg.startswith("-") and "=" in arg else arg
        if not value or value.startswith("-"):
            continue
        path = os.path.join(base, value)  # an absolute value stays itself
        if os.path.exists(path):
            found.append(path)
    return found


def _newest_under(folder: Path, limit: int = 5000) -> float:
    newest, seen = 0.0, 0
    for root, dirs, files in os.walk(folder):
        for name in files:
            seen += 1
            with contextlib.suppress(OSError):
                newest = max(newest, os.stat(os.path.join(root, name)).st_mtime)
        if seen > limit:
            dirs.clear()
    return newest


def first_start(run_dir: RunDir) -> float | None:
    """When the run's first attempt started (attempts.jsonl's first line), None: never."""
    try:
        with run_dir.attempts.open() as f:
            first = json.loads(f.readline())
    except (OSError, ValueError):
        return None
    start = first.get("start") if isinstance(first, dict) else None
    return float(start) if isinstance(start, (int, float)) else None


def check_resume(run_dir: RunDir, resume_args: Sequence[str]) -> None:
    """JzkError (script/script_rules.py resume_refusal) when a path of job.resume_args
    would read something other than the run's own files; before the script starts."""
    cwd = run_dir.script_cwd
    run_real = os.path.realpath(run_dir.root)
    targets = []
    for value in resume_values(resume_args):
        real = os.path.realpath(os.path.join(cwd, value))
        try:
            mtime = os.stat(real).st_mtime
        except OSError:
            targets.append(ResumeTarget(value, None, False, None))
            continue
        inside = real == run_real or real.startswith(run_real + os.sep)
        targets.append(ResumeTarget(value, real, inside, mtime))
    start = first_start(run_dir)
    problem = resume_refusal(targets, str(run_dir), start if start is not None else 0.0)
    if problem:
        raise JzkError(problem)


def record_attempt(
    run_dir: RunDir, start: float, job_id: str | None, array_id: str | None = None
) -> None:
    """One line per start of the script in attempts.jsonl (written by task 0): who
    requeued it (the toolkit, Slurm's preemption, the script itself) does not matter,
    `jzk status` counts the starts."""
    line = json.dumps(
        {"start": start, "job_id": job_id, "array_id": array_id, "host": socket.gethostname()}
    )
    try:
        with run_dir.attempts.open("a") as f:
            f.write(line + "\n")
    except OSError:
        pass  # a status aid: never a reason to fail the task


def claim_run_dir(run_dir: RunDir, command: ScriptCommand, write: bool = True) -> None:
    """The run directory belongs to this command: refuse it (JzkError naming the
    difference) when command.json records another; record this one when there is none
    (write=False: only check, as `jzk submit` does before the queue)."""
    path = run_dir.command
    try:
        old = json.loads(path.read_text())
    except FileNotFoundError:
        old = None
    except (OSError, ValueError):
        old = None  # unreadable: rewritten below
    if isinstance(old, dict):
        differences = command_differences(command.recorded_identity(old), command.identity())
        if differences:
            raise JzkError(refusal(str(run_dir), differences))
        return
    if write:
        run_dir.root.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(json.dumps(command.record(), indent=1) + "\n")
        os.replace(tmp, path)  # every task writes the same text: the last rename wins


def write_script_beat(run_dir: RunDir, beat: ScriptBeat) -> None:
    """Write aside, rename: a reader never sees half a beat. A full or slow filesystem
    must not end the task: the watch goes on without this beat."""
    path = run_dir.script_beat(beat.rank)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(json.dumps(beat.to_json()))
        os.replace(tmp, path)
    except OSError:
        pass


def earlier_run_line(
    run_dir: RunDir, job_name: str, command: ScriptCommand, now: float | None = None
) -> str | None:
    """One line when `run_dir` is a new run of the script and another run directory of
    the same job.name and script (other arguments) holds the script's files; None
    otherwise (this run directory exists: it resumes)."""
    if run_dir.command.exists():
        return None
    now = time.time() if now is None else now
    entry = command.identity()["entry"]
    found: list[tuple[float, Path, list[str], str]] = []
    for other in run_dir.siblings(f"{glob.escape(job_name)}-*"):
        path = other.root
        if not path.is_dir():
            continue
        try:
            record = json.loads(other.command.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(record, dict) or record.get("entry") != entry:
            continue
        checkpoint = other.newest_script_checkpoint()
        written = checkpoint[1] if checkpoint else other.newest_script_write()
        if written is None:
            continue  # it left nothing to lose
        what = f"{checkpoint[0].relative_to(path)}, " if checkpoint else "files, "
        args = [str(a) for a in record.get("args") or []]
        found.append((written, path, args, what + f"written {format_duration(now - written)} ago"))
    if not found:
        return None
    _, where, args, what = max(found, key=lambda item: item[0])
    changed = changed_options(args, command.args)
    may_change = (
        f"job.args_may_change='[{','.join(changed)}]'" if changed else "job.args_may_change"
    )
    return (
        f"jzk: {where} holds a run of the same script with other arguments "
        f"({' '.join(args) or 'none'}) and its files ({what}); this command starts a new run "
        f"in {run_dir}. HINT: another experiment (another learning rate) needs nothing; "
        "if these arguments only take the same one further (more epochs), go on in that "
        f"run instead: job.run_dir={where} {may_change}"
    )
