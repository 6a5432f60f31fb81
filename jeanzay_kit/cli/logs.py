"""`jzk logs` and `jzk cancel`: a run's output and its end, from the login node.

A run is named by its directory (its manifest.jsonl lists the jobs that ran it, each
with its log) or by a job id found in the manifests under outputs/ and multirun/ here.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from jeanzay_kit.ending.codes import Exit
from jeanzay_kit.errors import JzkError
from jeanzay_kit.rundir.run_directory import RunDir

# How often -f looks for new output, and asks Slurm whether the job has ended.
FOLLOW_POLL_S = 0.5
STATE_POLL_S = 5.0


def add(sub: argparse._SubParsersAction) -> None:
    logs = sub.add_parser(
        "logs",
        help="print a run's output, every start of its jobs; -f follows it",
        description="Print the log of each job of a run (a requeued job's starts are "
        "marked `jzk: start N of job ...`). TARGET is a run or sweep directory, or a job id "
        "(an array job's id gives all its tasks); without it, the run under outputs/ and "
        "multirun/ here that wrote last.",
    )
    logs.add_argument("target", nargs="?", default=None, metavar="RUN_DIR|JOB_ID")
    logs.add_argument(
        "-f",
        "--follow",
        action="store_true",
        help="follow the newest job's log until the job ends; exit with the job's code",
    )
    logs.add_argument(
        "--attempt", type=int, default=None, help="only the K-th start (1: the first, -1: the last)"
    )
    logs.add_argument("--err", action="store_true", help="the error log (.err) instead")
    logs.add_argument(
        "--trial",
        type=int,
        default=None,
        help="a study's trial N (TARGET: the study's folder, tune.dir): its log",
    )
    logs.add_argument(
        "--rank",
        type=int,
        default=None,
        help="only what rank N printed (from <run_dir>/train.log, where every rank's lines "
        "are kept whole and labelled)",
    )
    logs.set_defaults(run=run_logs)


def run_records(target: str | None) -> list[dict]:
    from jeanzay_kit.cli.status import status_records
    from jeanzay_kit.launch.log_rules import find_records

    if target is None:
        return _newest_run(status_records(None))
    if Path(target).exists():
        return status_records(target)
    found = find_records(status_records(None), target)
    if not found:
        raise JzkError(
            f"no run of job {target} in the manifests under outputs/ and multirun/ here. "
            "HINT: run it in the project you submitted from, or give the run directory"
        )
    return found


def _newest_run(records: list[dict]) -> list[dict]:
    """The records of the run that wrote last (its job logs, its run directory's
    files), said on stderr so that the output stays the log alone."""
    newest = max(records, key=_last_write)
    run_dir = newest.get("run_dir")
    print(
        f"jzk logs: {run_dir or 'job ' + str(newest.get('job_id'))}, the run here that wrote "
        "last (jzk status lists them all; jzk logs RUN_DIR|JOB_ID for another)",
        file=sys.stderr,
        flush=True,
    )
    return [r for r in records if r.get("run_dir") == run_dir] if run_dir else [newest]


def _last_write(record: Mapping) -> float:
    places = []
    if record.get("run_dir"):
        run = RunDir.of(str(record["run_dir"]))
        places += [run.train_log, run.metrics, run.root]
    if record.get("log"):
        places.append(Path(str(record["log"])))
    times = []
    for place in places:
        try:
            times.append(place.stat().st_mtime)
        except OSError:
            continue
    return max(times, default=0.0)


def _log_of(record: Mapping, err: bool) -> Path | None:
    log = record.get("log")
    if not log:
        return None
    path = Path(str(log))
    return path.with_suffix(".err") if err else path


def run_logs(args: argparse.Namespace) -> int:
    from jeanzay_kit.launch.log_rules import pick_start

    if args.target is not None and _is_study(Path(args.target)):
        return _trial_logs(Path(args.target), args)
    records = run_records(args.target)
    slurm = [r for r in records if r.get("job_id") != "local" and r.get("log")]
    if args.rank is not None or not slurm:
        return _train_logs(records, args)
    for record in slurm:
        path = _log_of(record, args.err)
        assert path is not None
        if len(slurm) > 1:
            print(f"==> job {record['job_id']}: {path} <==", flush=True)
        text = path.read_text(errors="replace") if path.exists() else ""
        try:
            sys.stdout.write(pick_start(text, args.attempt))
        except IndexError as err:
            raise JzkError(f"{path}: {err}") from err
        sys.stdout.flush()
    if not args.follow:
        return 0
    last = slurm[-1]
    path = _log_of(last, args.err)
    assert path is not None
    return _follow(path, str(last["job_id"]))


def _is_study(path: Path) -> bool:
    from jeanzay_kit.tune.files import is_study_dir

    return path.is_dir() and is_study_dir(path)


def _trial_logs(study_dir: Path, args: argparse.Namespace) -> int:
    """A study's trials: each trial's output (<tune.dir>/logs/trial-N.log), or with
    --rank one rank's lines of the trial's own run directory (<tune.dir>/trial-N)."""
    from jeanzay_kit.tune.files import trial_dir

    logs = sorted((study_dir / "logs").glob("trial-*.log"), key=lambda p: int(p.stem.split("-")[1]))
    if args.trial is not None:
        logs = [p for p in logs if p.stem == f"trial-{args.trial}"]
        if not logs:
            raise JzkError(
                f"{study_dir} has no log of trial {args.trial}. HINT: `jzk status "
                f"{study_dir}` lists its trials"
            )
    if args.rank is not None:
        records = [{"run_dir": str(trial_dir(study_dir, int(p.stem.split("-")[1])))} for p in logs]
        return _train_logs(records, args)
    for path in logs:
        if len(logs) > 1:
            print(f"==> {path} <==", flush=True)
        sys.stdout.write(path.read_text(errors="replace"))
    sys.stdout.flush()
    return 0


def _train_logs(records: list[dict], args: argparse.Namespace) -> int:
    """<run_dir>/train.log of each run: a local run's output (every start marked), or
    one rank's lines of any run (--rank)."""
    from jeanzay_kit.launch.log_rules import pick_start
    from jeanzay_kit.rundir.rank_lines import lines_of_rank, ranks_in

    named = dict.fromkeys(str(r.get("run_dir", "")) for r in records if r.get("run_dir"))
    run_dirs = [RunDir.of(d) for d in named]
    if args.err and args.rank is None:
        print(
            "jzk logs: --err is a Slurm job's .err; a run on this machine keeps one log, "
            "train.log (every rank's output and errors, labelled): shown whole",
            file=sys.stderr,
            flush=True,
        )
    for run_dir in run_dirs:
        path = run_dir.train_log
        text = path.read_text(errors="replace") if path.exists() else ""
        if len(run_dirs) > 1:
            print(f"==> {path} <==", flush=True)
        try:
            text = pick_start(text, args.attempt)
        except IndexError as err:
            raise JzkError(f"{path}: {err}") from err
        if args.rank is not None:
            found = ranks_in(text)
            if args.rank not in found:
                raise JzkError(
                    f"{path} holds no line of rank {args.rank} (ranks found: "
                    f"{', '.join(map(str, found)) or 'none'}). HINT: a rank that prints "
                    "nothing has no line (a script often prints on rank 0 only); a script "
                    "started by srun or torchrun on Slurm writes to the job's log only: "
                    "`jzk logs` without --rank"
                )
            text = lines_of_rank(text, args.rank)
        sys.stdout.write(text)
    sys.stdout.flush()
    if args.follow and run_dirs:
        return _follow_local(run_dirs[-1], args.rank)
    return 0


def _follow_local(run_dir: RunDir, rank: int | None) -> int:
    """Print what a local run adds to train.log while a live process holds the run
    directory; then its exit code (outcome.json: 0 completed, 3 stopped, 1 failed)."""
    from jeanzay_kit.ending.endings import read_outcome
    from jeanzay_kit.rundir.lease import holder
    from jeanzay_kit.rundir.rank_lines import lines_of_rank

    path = run_dir.train_log
    offset = path.stat().st_size if path.exists() else 0
    pending = ""
    while True:
        live = holder(run_dir)[1]
        if path.exists() and path.stat().st_size > offset:
            with path.open("rb") as handle:
                handle.seek(offset)
                chunk = handle.read()
            offset += len(chunk)
            pending += chunk.decode(errors="replace")
            whole, _, pending = pending.rpartition("\n")
            text = whole + "\n" if whole else ""
            sys.stdout.write(lines_of_rank(text, rank) if rank is not None else text)
            sys.stdout.flush()
        if not live:
            state = read_outcome(run_dir) or "STOPPED"
            print(f"jzk logs: the run ended {state}", file=sys.stderr)
            return {"COMPLETED": 0, "STOPPED": Exit.STOPPED}.get(state, 1)
        time.sleep(FOLLOW_POLL_S)


def _follow(path: Path, job_id: str) -> int:
    """Print what the job adds to its log until the job has ended; its exit code."""
    from jeanzay_kit.launch.log_rules import exit_code

    offset = path.stat().st_size if path.exists() else 0
    asked = 0.0
    while True:
        if path.exists() and path.stat().st_size > offset:
            with path.open("rb") as handle:
                handle.seek(offset)
                chunk = handle.read()
            offset += len(chunk)
            sys.stdout.write(chunk.decode(errors="replace"))
            sys.stdout.flush()
        if time.monotonic() - asked >= STATE_POLL_S:
            asked = time.monotonic()
            ended = _ended(job_id)
            if ended is not None:
                time.sleep(FOLLOW_POLL_S)  # the last lines Slurm flushes
                if path.exists() and path.stat().st_size > offset:
                    continue
                state, code = ended
                print(f"jzk logs: job {job_id} ended {state}", file=sys.stderr)
                return exit_code(state, code)
        time.sleep(FOLLOW_POLL_S)


def _ended(job_id: str) -> tuple[str, str] | None:
    """(state, exit code) once Slurm has ended the job for good; None while squeue still
    holds it (a requeued job waits there, PENDING)."""
    from jeanzay_kit.errors import SlurmCommandError
    from jeanzay_kit.launch import status
    from jeanzay_kit.slurm.commands import sacct_text, squeue_text

    try:
        if job_id in status.parse_squeue(squeue_text()):
            return None
        known = status.parse_sacct(sacct_text([job_id]))
    except SlurmCommandError:
        return None
    found = known.get(job_id)
    if found is None or found.state not in status.ENDED:
        return None
    return found.state, found.exit_code
