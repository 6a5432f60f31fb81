"""`jzk status`: state, progress and heartbeats of the runs of a sweep or run directory."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from jeanzay_kit.errors import JzkError


def add(sub: argparse._SubParsersAction) -> None:
    status = sub.add_parser(
        "status",
        help="a table of the runs of a sweep or run directory: state, progress, heartbeats",
        description="Read DIR/manifest.jsonl (a sweep directory from `python train.py -m`, or "
        "a run directory from `jzk submit`; a local run directory has none and shows as "
        "`local`) and show each run's Slurm state (squeue, then sacct for jobs squeue no "
        "longer shows; without either, UNKNOWN), its step, last loss and ETA "
        "(metrics.jsonl), the age of its stalest heartbeat (a stuck rank shows here), its "
        "restarts and newest complete checkpoint. Without DIR: every manifest under "
        "multirun/ and outputs/ of the current directory.",
    )
    status.add_argument("dir", nargs="?", default=None, metavar="SWEEP_OR_RUN_DIR")
    status.set_defaults(run=run)


def _newest_complete_step(run_dir: str) -> int | None:
    from jeanzay_kit.ckpt.store import CheckpointStore

    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return None
    steps = [e.step for e in CheckpointStore(root).entries() if e.has_manifest]
    return max(steps) if steps else None


def run(args: argparse.Namespace) -> int:
    from jeanzay_kit.errors import SlurmCommandError
    from jeanzay_kit.launch import status
    from jeanzay_kit.launch.run_files import run_progress
    from jeanzay_kit.slurm.commands import sacct_text, squeue_text

    if args.dir is not None and _is_study(Path(args.dir)):
        return _study_status(Path(args.dir))
    records = _status_records(args.dir)
    for rec in records:
        run_dir = Path(rec.get("run_dir", ""))
        rec["checkpoint"] = _newest_complete_step(str(run_dir))
        rec.update(vars(run_progress(run_dir)))
    ids = list(dict.fromkeys(str(r["job_id"]) for r in records if r["job_id"] != "local"))
    notes, states = [], {}
    if ids:
        try:
            states = status.parse_squeue(squeue_text())
        except SlurmCommandError as err:
            notes.append(f"(squeue: {err})")
        gone = status.missing(ids, states)
        if gone:
            try:
                states = {**status.parse_sacct(sacct_text(gone)), **states}
            except SlurmCommandError as err:
                notes.append(f"(sacct: {err})")
    for rec in records:
        if rec["job_id"] == "local":
            states["local"] = status.JobState("local", _local_state(rec), "-", "this machine")
    print(status.status_table(records, states))
    shown = list(dict.fromkeys(str(r["job_id"]) for r in records))
    print("\n" + status.summary(states[i].state if i in states else "UNKNOWN" for i in shown))
    for note in notes:
        print(note, file=sys.stderr)
    return 0


def _is_study(path: Path) -> bool:
    from jeanzay_kit.tune.study import JOURNAL_FILE

    return (path / JOURNAL_FILE).is_file()


def _study_status(path: Path) -> int:
    """A study's folder (`jzk tune`): its trials, then its job array's tasks."""
    from jeanzay_kit.tune.study import summary_lines
    from jeanzay_kit.tune.view import format_rows, load_study_dir, trial_rows

    study = load_study_dir(path)
    print(format_rows(trial_rows(study)))
    print()
    for line in summary_lines(study, None):
        print(line)
    return 0


def _status_records(directory: str | None) -> list[dict]:
    """Manifest records (submitted runs and sweeps), or one record for a local run."""
    from jeanzay_kit.launch.manifest import MANIFEST, read_manifest
    from jeanzay_kit.node.outcome import OUTCOME_FILE

    if directory is not None:
        root = Path(directory)
        if (root / MANIFEST).is_file():
            return [dict(r) for r in read_manifest(root / MANIFEST)]
        if any((root / name).exists() for name in ("metrics.jsonl", "heartbeat", OUTCOME_FILE)):
            return [{"job_id": "local", "run_dir": str(root), "overrides": []}]
        raise JzkError(
            f"no {MANIFEST} and no metrics.jsonl in {directory}. HINT: give a sweep directory "
            "(multirun/<job.name>) or a run directory (outputs/<job.name>-<hash>)"
        )
    paths = sorted(Path("multirun").glob(f"*/{MANIFEST}")) + sorted(
        Path("outputs").glob(f"*/{MANIFEST}")
    )
    if not paths:
        raise JzkError(
            f"no {MANIFEST} under multirun/ or outputs/ here. HINT: pass the sweep or run directory"
        )
    return [dict(r) for p in paths for r in read_manifest(p)]


def _local_state(rec: dict) -> str:
    """A local run has no scheduler: its files say whether it finished or still beats
    (outcome.json: how `jzk train` ended, for the toolkit's loop and scripts alike)."""
    from jeanzay_kit.node.outcome import read_outcome

    ended = read_outcome(Path(rec["run_dir"]))
    if ended is not None:
        return ended
    if (Path(rec["run_dir"]) / "model_final.sha256").exists():
        return "COMPLETED"
    age = rec.get("oldest_beat_s")
    return "RUNNING" if age is not None and age < 60 else "STOPPED"


# A doctor job is short and never requeued; a longer resources.time given on the
# command line still wins (overrides come after these).
