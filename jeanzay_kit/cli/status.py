"""`jzk status`: state, progress and heartbeats of the runs of a sweep or run directory."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from jeanzay_kit.errors import JzkError
from jeanzay_kit.rundir.run_directory import RunDir

if TYPE_CHECKING:
    from jeanzay_kit.launch.status import RunView


def add(sub: argparse._SubParsersAction) -> None:
    status = sub.add_parser(
        "status",
        help="a table of the runs of a sweep or run directory: state, progress, heartbeats",
        description="Read DIR/manifest.jsonl (a sweep directory from `python train.py -m`, or "
        "a run directory from `jzk submit`; a local run directory has none and shows as "
        "`local`) and show each run's Slurm state (squeue, then sacct for jobs squeue no "
        "longer shows; without either, UNKNOWN), its step, last loss and ETA "
        "(metrics.jsonl), the age of its stalest heartbeat (a stuck rank shows here), its "
        "restarts and newest complete checkpoint. DIR may also be a folder of runs "
        "(outputs, a local sweep's folder). Without DIR: every run and sweep under "
        "outputs/ and multirun/ of the current directory, newest first.",
    )
    status.add_argument("dir", nargs="?", default=None, metavar="SWEEP_OR_RUN_DIR")
    status.add_argument(
        "--json",
        action="store_true",
        help="one JSON object per run and line: run_dir, job_id, state, exit_code, elapsed, "
        "where, step, steps, loss, eta_s, restarts, checkpoint, gpu_hours, last_line, "
        "verdict, evidence, restart_storm, overrides (docs/slurm.md)",
    )
    status.add_argument(
        "--watch",
        nargs="?",
        type=float,
        const=10.0,
        default=None,
        metavar="SECONDS",
        help="show it again every SECONDS (default 10) until every run has ended; one "
        "squeue and one sacct call a refresh, however many runs",
    )
    status.add_argument(
        "--hours",
        nargs="*",
        default=None,
        metavar="OVERRIDE",
        help="the account's allocation instead (cluster.allocation of the profile the "
        "overrides choose, e.g. --hours cluster=jeanzay_h100 cluster.account=abc@h100): "
        "used, left, the burn rate over the last 7 days and the day the hours run out",
    )
    status.add_argument(
        "--plan",
        action="store_true",
        help="for the run's queued job: `jzk plan` of the overrides it was submitted with "
        "(what would start sooner; `jzk plan ... --apply N` submits a row)",
    )
    status.set_defaults(run=run)


def _newest_complete_step(run: RunDir) -> int | None:
    from jeanzay_kit.ckpt.store import CheckpointStore

    root = run.checkpoints
    if not root.is_dir():
        return None
    steps = [e.step for e in CheckpointStore(root).entries() if e.has_manifest]
    return max(steps) if steps else None


def run(args: argparse.Namespace) -> int:
    import time

    if args.hours is not None:
        from jeanzay_kit.launch.allocation import standing_text
        from jeanzay_kit.launch.request import spec_of

        print(standing_text(spec_of([*([args.dir] if args.dir else []), *args.hours], None)))
        return 0
    if args.plan:
        return _plan_of(args)
    if args.dir is not None and _is_study(Path(args.dir)):
        return _study_status(Path(args.dir))
    remote = []
    if args.dir is None:  # laptop mode: the runs this laptop submitted elsewhere too
        from jeanzay_kit.cli.remote import remote_runs_here

        remote = remote_runs_here(getattr(args, "on", None))
    while True:
        ended = _show(args.dir, as_json=args.json, remote=remote)
        if args.watch is None or ended:
            return 0
        time.sleep(max(1.0, args.watch))
        if not args.json:
            print(f"\n--- {time.strftime('%H:%M:%S')} (every {args.watch:g} s; Ctrl-C stops)")


def _plan_of(args: argparse.Namespace) -> int:
    """`jzk status --plan RUN_DIR`: the plan of the newest submission of the run."""
    from jeanzay_kit.cli import plan

    if args.dir is None:
        raise JzkError("--plan needs the run: jzk status --plan RUN_DIR")
    records = [r for r in status_records(args.dir) if r.get("job_id") != "local"]
    if not records:
        raise JzkError(f"{args.dir} has no submitted job: nothing is queued to plan")
    overrides = [str(o) for o in records[-1].get("overrides") or []]  # the newest job
    print(f"plan of {args.dir}: {' '.join(overrides)}")
    return plan.run(
        argparse.Namespace(overrides=overrides, config_dir=None, json=args.json, apply=None)
    )


def _show(directory: str | None, as_json: bool, remote: list | None = None) -> bool:
    """Print the runs once, this machine's and the laptop's remote ones (laptop mode) in
    one table; True when every one has ended."""
    import json

    from jeanzay_kit.launch import status

    views = _local_views(directory, bool(remote))
    ids = list(dict.fromkeys(v.job_id for v in views if v.job_id != "local"))
    usage: dict = {}
    states, hours, notes = slurm_states(ids, usage)
    _local_states(views, states)
    waiting = _pending(views, states)
    trust = estimate_trust(waiting) if waiting else None  # recorded with --json too
    there = _remote_rows(remote or [])
    if as_json:
        for obj in status.run_objects(views, states, hours, usage, waiting):
            print(json.dumps(obj), flush=True)
        for row in there:
            print(json.dumps(row), flush=True)
    for row in there:  # one table: the remote runs as HOST:ID
        view, state = status.remote_view(row)
        views.append(view)
        states[view.key] = state
        if row.get("pending_reason"):
            waiting[view.key] = {k: row.get(k) for k in status.NOT_PENDING}
    now = [states[v.key].state if v.key in states else "UNKNOWN" for v in views]
    if not as_json:
        print(status.status_table(views, states))
        for job, facts in waiting.items():
            print(f"\njob {job} waits ({facts['pending_reason']}): {facts['pending_why']}")
        if trust:
            print(trust)
        used = f"; {sum(hours.values()):.2f} GPU hours" if hours else ""
        print("\n" + status.summary(now) + used, flush=True)
    for note in [*notes, *_purge_notes(views)]:
        print(note, file=sys.stderr)
    return all(s in status.ENDED or s == "STOPPED" for s in now)


def _purge_notes(views: list) -> list[str]:
    """A run whose newest checkpoint is on a purged tier (checkpoint.dir on scratch, or
    the run directory itself there), near its purge age and not kept in the run
    directory (config/storage_rules.py)."""
    import os
    import time

    import yaml

    from jeanzay_kit.ckpt.store import CheckpointStore
    from jeanzay_kit.config.storage_rules import purge_note, storage_tiers, tier_of

    def note_of(run: RunDir) -> str | None:
        step = _newest_complete_step(run)
        frozen = run.hydra / "config.yaml"
        if step is None or not frozen.is_file():
            return None
        cluster = (yaml.safe_load(frozen.read_text()) or {}).get("cluster") or {}
        tiers = storage_tiers(cluster.get("storage"))
        expanded = {t.name: os.path.realpath(os.path.expandvars(t.path)) for t in tiers}
        where = str(run.checkpoints.resolve())
        tier = next((t for t in tiers if t.name == tier_of(where, tiers, expanded)), None)
        written = CheckpointStore(run.checkpoints).step_dir(step).stat().st_mtime
        linked = run.checkpoints.is_symlink()  # else kept/ is on the same tier: no help
        kept_on = tier_of(os.path.realpath(run.kept), tiers, expanded)
        lasting = all(t.purge_days is None for t in tiers if t.name == kept_on)
        copied = (CheckpointStore(run.kept).step_dir(step) / "manifest.json").is_file()
        kept = linked and lasting and copied  # kept/ on a purged tier too keeps nothing
        age = (time.time() - written) / 86400
        return purge_note(str(run.root), step, age, tier, kept, linked)

    notes = []
    for view in views:
        run = RunDir(Path(view.run_dir)) if view.run_dir else None
        if run is None or not run.checkpoints.is_dir():
            continue
        try:  # a run whose record cannot be read has no note; the others still do
            note = note_of(run)
        except (JzkError, OSError, yaml.YAMLError):
            continue
        notes += [note] if note else []
    return notes


def _remote_rows(remote: list) -> list[dict[str, object]]:
    if not remote:
        return []
    from jeanzay_kit.cli.remote import collect_remote

    return collect_remote(remote)


def _local_views(directory: str | None, optional: bool) -> list[RunView]:
    """This machine's runs (none is no error beside remote ones: `optional`)."""
    from jeanzay_kit.launch import status
    from jeanzay_kit.launch.run_files import ledger_record, run_progress

    try:
        records = status_records(directory)
    except JzkError:
        if optional:
            return []
        raise
    return [
        replace(
            view,
            checkpoint=(kept := _newest_complete_step(run)),
            archived=run.archived.is_file(),
            record=ledger_record(run, kept),
            progress=run_progress(
                run,
                job_id=None if view.job_id == "local" else view.job_id,
                log=Path(str(record["log"])) if record.get("log") else None,
            ),
        )
        for record in records
        for view in [status.run_view(record)]
        for run in [RunDir.of(view.run_dir or "")]
    ]


def _local_states(views: list[RunView], states: dict) -> None:
    """A run on this machine: its state from its own directory."""
    from jeanzay_kit.ending.endings import read_signal
    from jeanzay_kit.launch import status

    for view in views:
        if view.job_id == "local":
            run = RunDir.of(view.run_dir or "")
            signum = read_signal(run)
            states[view.key] = status.JobState(
                "local",
                _local_state(view, run),
                "-",
                "this machine",
                f"0:{signum}" if signum else "",
            )


def _pending(views: list[RunView], states: dict) -> dict[str, dict[str, object]]:
    """Why each pending job waits (slurm/pending.py): one squeue, one sprio for those
    behind others, one sacct for the jobs they depend on; {} when none is pending."""
    from jeanzay_kit.errors import SlurmCommandError
    from jeanzay_kit.launch.status import parse_sacct
    from jeanzay_kit.slurm import pending
    from jeanzay_kit.slurm.commands import sacct_text, sprio_text, squeue_pending_text

    ids = [v.key for v in views if v.key in states and states[v.key].state == "PENDING"]
    if not ids:
        return {}
    try:
        waiting = pending.parse_pending(squeue_pending_text(ids))
        behind = [j for j, w in waiting.items() if w.reason == "Priority"]
        parts = pending.parse_sprio(sprio_text(behind)) if behind else {}
        needed = sorted({d for w in waiting.values() for d in pending.dependency_jobs(w)})
        after = {j: s.state for j, s in parse_sacct(sacct_text(needed)).items()} if needed else {}
    except SlurmCommandError:
        return {}
    out: dict[str, dict[str, object]] = {}
    for job, w in waiting.items():
        w = replace(w, priority=parts.get(job, {}))
        made = f" (made at {w.evaluated_at})" if w.start_estimate and w.evaluated_at else ""
        out[job] = {
            "pending_reason": w.reason,
            "pending_why": pending.pending_why(w, after).replace(
                f"estimate: {w.start_estimate}.", f"estimate: {w.start_estimate}{made}."
            ),
            "start_estimate": w.start_estimate,
        }
    return out


# Slurm's estimates this user has seen, kept to say how far to trust the next ones.
_ESTIMATES = "start_estimates.jsonl"
_KEPT_ESTIMATES = 20


def estimate_trust(waiting: dict[str, dict[str, object]]) -> str | None:
    """Record the first estimate seen of each pending job; say how far the estimates of
    this user's last jobs were from their real starts (sacct), or None."""
    import json
    import os

    from jeanzay_kit.errors import SlurmCommandError
    from jeanzay_kit.remote.transport import state_dir
    from jeanzay_kit.slurm import pending
    from jeanzay_kit.slurm.commands import sacct_starts_text

    path = state_dir(dict(os.environ)) / _ESTIMATES
    seen: dict[str, str] = {}
    try:
        for line in path.read_text().splitlines():
            record = json.loads(line)
            seen.setdefault(str(record["job"]), str(record["estimate"]))
    except (OSError, ValueError, KeyError):
        pass
    new = {j: str(f["start_estimate"]) for j, f in waiting.items() if f.get("start_estimate")}
    fresh = {j: e for j, e in new.items() if j not in seen}
    if fresh:
        seen.update(fresh)
        kept = list(seen.items())[-_KEPT_ESTIMATES:]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps({"job": j, "estimate": e}) + "\n" for j, e in kept))
    done = [j for j in seen if j not in waiting]
    if not done:
        return None
    try:
        rows = [line.split("|") for line in sacct_starts_text(done).splitlines()]
    except SlurmCommandError:
        return None
    starts = {r[0]: r[1] for r in rows if len(r) == 2}
    return pending.trust_line(pending.estimate_errors({j: seen[j] for j in done}, starts))


def slurm_states(
    ids: list[str], usage_out: dict | None = None
) -> tuple[dict, dict[str, float], list[str]]:
    """The jobs' states (squeue for those it shows, sacct for the rest) and GPU hours
    over every attempt (sacct): one call of each, however many runs. usage_out: filled
    with sacct's Usage of each job (its GPUs and queue wait, for the ledger)."""
    from jeanzay_kit.errors import SlurmCommandError
    from jeanzay_kit.launch import status
    from jeanzay_kit.slurm.commands import sacct_usage_text, squeue_text

    states: dict = {}
    hours: dict[str, float] = {}
    notes: list[str] = []
    if not ids:
        return states, hours, notes
    try:
        usage = status.parse_usage(sacct_usage_text(ids))
        states = {job: u.state for job, u in usage.items()}
        hours = {job: u.gpu_hours for job, u in usage.items()}
        if usage_out is not None:
            usage_out.update(usage)
    except SlurmCommandError as err:
        notes.append(f"(sacct: {err})")
    try:
        states.update(status.parse_squeue(squeue_text()))  # live: squeue's word wins
    except SlurmCommandError as err:
        notes.append(f"(squeue: {err})")
    return states, hours, notes


def _is_study(path: Path) -> bool:
    from jeanzay_kit.tune.files import is_study_dir

    return is_study_dir(path)


def _study_status(path: Path) -> int:
    """A study's folder (`jzk tune`): its trials, then its job array's tasks."""
    from jeanzay_kit.extras import require

    require("optuna", f"jzk status of a study ({path})")
    from jeanzay_kit.tune.study import summary_lines
    from jeanzay_kit.tune.view import format_rows, load_study_dir, trial_rows

    study = load_study_dir(path)
    print(format_rows(trial_rows(study)))
    print()
    for line in summary_lines(study, None):
        print(line)
    return 0


# Where runs and sweeps live under a project: the default job.run_dir's folder and
# Hydra's sweep folder (conf/jeanzay_kit.yaml), searched this deep.
_SEARCHED = ("outputs", "multirun")
_DEPTH = 3


def status_records(directory: str | None) -> list[dict]:
    """Every run under `directory` (or under outputs/ and multirun/ here), newest first:
    manifests (submitted runs, Slurm sweeps), run directories (local runs, a local
    sweep's points), and folders of them: what `jzk report` reads, `jzk status` reads."""
    if directory is not None:
        records = _records_in(Path(directory), _DEPTH)
        if not records:
            raise JzkError(
                f"no runs in {directory}: no manifest.jsonl, no run directory (metrics.jsonl, "
                "lease.json) and no folder of them. HINT: give a run directory "
                "(outputs/<job.name>-<hash>), a sweep directory (multirun/<job.name>), or "
                "nothing: every run under outputs/ and multirun/ here"
            )
        return records
    records = [r for top in _SEARCHED for r in _records_in(Path(top), _DEPTH)]
    if not records:
        raise JzkError(
            "no runs under outputs/ or multirun/ here. HINT: run `jzk status` in the project "
            "you trained or submitted from, or pass the run or sweep directory"
        )
    return records


def _records_in(root: Path, depth: int) -> list[dict]:
    """The runs of `root`, newest first; folders are searched `depth` levels down."""
    from jeanzay_kit.launch.manifest import read_manifest

    run = RunDir(root)
    if run.manifest.is_file():
        return [dict(r) for r in read_manifest(run.manifest)]
    if run.looks_like_a_run():
        listed = _listed_by_sweep(run)
        if listed:  # a point of a Slurm sweep: its job and log are in the sweep's manifest
            return listed
        # No manifest: a run of this machine, or one another launcher (hydra's submitit
        # launcher, the user's own sbatch) ran on Slurm, as its newest start recorded.
        job = run.newest_start_job() or "local"
        return [{"job_id": job, "run_dir": str(root), "overrides": run.hydra_overrides()}]
    if depth == 0 or not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        if child.is_dir() and not child.is_symlink():
            found.extend(_records_in(child, depth - 1))
    return sorted(found, key=_newest, reverse=True)


def _listed_by_sweep(run_dir: RunDir) -> list[dict]:
    """The lines of the sweep's manifest (in the folder above a point's run directory)
    that name this run directory: `jzk status|logs <one point>` as the sweep sees it."""
    from jeanzay_kit.launch.manifest import read_manifest

    manifest = run_dir.above.manifest
    if not manifest.is_file():
        return []
    here = run_dir.root.resolve()
    return [
        dict(r)
        for r in read_manifest(manifest)
        if Path(str(r.get("run_dir", ""))).resolve() == here
    ]


def _newest(record: dict) -> float:
    """When a run last moved: its metrics, else its folder."""
    run_dir = RunDir.of(str(record.get("run_dir", "")))
    for path in (run_dir.metrics, run_dir.root):
        try:
            return path.stat().st_mtime
        except OSError:
            continue
    return 0.0


def _local_state(view: RunView, run_dir: RunDir) -> str:
    """A local run has no scheduler: its files say whether it runs (a live writer holds
    its lease: a script of its own writes no heartbeat, and the outcome.json of an
    earlier start may still be there), finished or still beats (outcome.json: how `jzk
    train` ended, for the toolkit's loop and scripts alike)."""
    from jeanzay_kit.ending.endings import read_outcome
    from jeanzay_kit.rundir.lease import holder

    if holder(run_dir)[1]:
        return "RUNNING"
    ended = read_outcome(run_dir)
    if ended is not None:
        return ended
    if run_dir.model_digest.exists():
        return "COMPLETED"
    age = view.progress.oldest_beat_s
    return "RUNNING" if age is not None and age < 60 else "STOPPED"


# A doctor job is short and never requeued; a longer resources.time given on the
# command line still wins (overrides come after these).
