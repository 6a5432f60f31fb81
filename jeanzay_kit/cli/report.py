"""`jzk report`: PNG plots and a summary table of a run or a sweep."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from jeanzay_kit.errors import JzkError
from jeanzay_kit.rundir.run_directory import RunDir

if TYPE_CHECKING:
    from jeanzay_kit.analysis.collect import RunFiles


def add(sub: argparse._SubParsersAction) -> None:
    report_cmd = sub.add_parser(
        "report",
        help="PNG plots and a summary table of a run or a sweep",
        description="Read the metrics.jsonl of a run directory, of every run of a sweep "
        "(DIR/manifest.jsonl, or numbered run directories of a local Hydra sweep) and write "
        "loss.png (train and eval loss against step), throughput.png, step_time.png, "
        "data_wait.png (the share of the step time spent waiting for batches) and "
        "summary.csv to OUT (default DIR/report); print the summary table, best eval loss "
        "first (with the last value of each eval.metrics), and whether each run is "
        "input-bound. A sweep's legend shows each run's overrides.",
    )
    report_cmd.add_argument("dir", metavar="RUN_OR_SWEEP_DIR")
    report_cmd.add_argument(
        "-o", "--out", default=None, metavar="DIR", help="where to write (default DIR/report)"
    )
    report_cmd.set_defaults(run=run)


def _found(given: RunDir, out: Path, made: bool) -> list[RunFiles]:
    """The runs to report; when there are none, the report folder this call made is
    removed before the refusal (an empty report/ made its run the newest here)."""
    from jeanzay_kit.analysis.collect import find_runs

    try:
        return find_runs(given)
    except JzkError:
        if made:
            out.rmdir()
        raise


def run(args: argparse.Namespace) -> int:
    import csv

    from jeanzay_kit.analysis.plots import write_plots
    from jeanzay_kit.analysis.summary import (
        format_table,
        run_series,
        summary_rows,
        table_cells,
        verdict_lines,
    )

    directory = Path(args.dir)
    if not directory.is_dir():
        raise JzkError(f"{args.dir} is not a directory. HINT: give a run or sweep directory")
    from jeanzay_kit.ckpt.writable import check_writable
    from jeanzay_kit.tune.files import is_study_dir

    out = Path(args.out) if args.out else directory / "report"
    made = not out.exists()
    # A read-only run or study folder: one line naming --out, before anything is read.
    check_writable(out, "jzk report --out")
    given = RunDir(directory)  # a run directory, a sweep's or a study's folder
    if is_study_dir(directory):
        return _study_report(given, out)
    runs = [run_series(str(f.run_dir), f.overrides, f.records) for f in _found(given, out, made)]
    # Plots of runs that logged nothing (a script that writes no metrics.jsonl) would be
    # empty axes: none are written, and the line below says why.
    logged = any(r.loss or r.eval_loss or r.throughput or r.step_time for r in runs)
    out.mkdir(parents=True, exist_ok=True)
    written = write_plots(runs, out) if logged else []
    rows = summary_rows(runs)
    with (out / "summary.csv").open("w", newline="") as handle:
        csv.writer(handle).writerows(table_cells(rows))
    print(format_table(rows))
    verdicts = verdict_lines(rows)
    if verdicts:
        print("\ninput:\n" + "\n".join(f"  {line}" for line in verdicts))
    endings = ending_lines([r.name for r in runs])
    if endings:
        print("\nhow the newest attempt ended:\n" + "\n".join(f"  {line}" for line in endings))
    for line in gpu_hour_lines(directory):
        print(line)
    rehearsal = rehearsal_lines(given, runs, out)
    if rehearsal:
        written.append(out / "rehearsal.png")
        print("\nrehearsal (jzk rehearse):\n" + "\n".join(f"  {line}" for line in rehearsal))
    for line in ledger_lines(directory, out, written):
        print(line)
    empty = [r.name for r in runs if not r.loss]
    if empty:
        print(f"\nno metrics yet: {', '.join(empty)}" + ("" if logged else " (no plots)"))
    print("\nwrote " + ", ".join(str(p) for p in [*written, out / "summary.csv"]))
    return 0


def ending_lines(run_dirs: list[str]) -> list[str]:
    """`<run>: data error at step 4: ValueError: ...` for each run whose newest attempt
    did not complete (ending/endings.py), with the fix."""
    from jeanzay_kit.ending.endings import newest_ending

    lines = []
    for run_dir in run_dirs:
        verdict = newest_ending(RunDir.of(run_dir))
        if verdict is not None and verdict.kind != "completed":
            lines.append(f"{run_dir}: {verdict.line()}. HINT: {verdict.fix}")
    return lines


def gpu_hour_lines(directory: Path) -> list[str]:
    """GPU hours each Slurm run consumed, every attempt (requeues and resubmissions)
    included, and their sum: one `sacct` call for the whole sweep (as `jzk status`)."""
    from jeanzay_kit.cli.status import slurm_states, status_records
    from jeanzay_kit.launch import status

    runs = [status.run_view(r) for r in status_records(str(directory))]
    runs = [v for v in runs if v.job_id != "local"]
    ids = list(dict.fromkeys(v.key for v in runs))
    if not ids:
        return []
    _states, hours, notes = slurm_states(ids)
    per_run: dict[str, float] = {}
    for view in runs:
        run_dir = view.run_dir or ""
        per_run[run_dir] = per_run.get(run_dir, 0.0) + hours.get(view.key, 0.0)
    lines = ["", "GPU hours (sacct: elapsed x GPUs of every start, requeues included):"]
    lines += [f"  {h:10.2f}  {d}" for d, h in sorted(per_run.items(), key=lambda kv: -kv[1])]
    lines.append(f"  {sum(per_run.values()):10.2f}  in all, {len(ids)} job(s)")
    return lines + [f"  {note}" for note in notes]


def ledger_lines(directory: Path, out: Path, written: list[Path]) -> list[str]:
    """Where each run's GPU hours went (launch/ledger.py), and their sum over a sweep:
    sacct's hours, queue wait and GPUs of each run's jobs, its own starts and steps; the
    picture of it (hours.png) added to `written`."""
    from jeanzay_kit.cli.status import _newest_complete_step, slurm_states, status_records
    from jeanzay_kit.launch import status
    from jeanzay_kit.launch.ledger import ledger, ledger_table
    from jeanzay_kit.launch.run_files import ledger_record

    views = [status.run_view(r) for r in status_records(str(directory))]
    usage: dict = {}
    ids = list(dict.fromkeys(v.key for v in views if v.job_id != "local"))
    states = slurm_states(ids, usage)[0] if ids else {}
    rows = []
    for run_dir, run in status.run_usage(views, usage, states).items():
        folder = RunDir.of(run_dir)
        record = ledger_record(folder, _newest_complete_step(folder))
        if record is None:
            continue
        one = ledger(record, run.gpu_hours, run.gpus, run.queue_wait_s, ended=not run.live)
        rows.append((run_dir, one))
    if not rows:
        return []
    from jeanzay_kit.analysis.plots import write_hours_plot

    picture = write_hours_plot(rows, out)
    written.extend([picture] if picture else [])
    head = '\nwhere the GPU hours went (docs/operate.md, "Where the hours went"):'
    return [head, ledger_table(rows)]


def _study_report(directory: RunDir, out: Path) -> int:
    """A study's folder (`jzk tune`): Optuna's plots of it, and its trials."""
    from jeanzay_kit.extras import require

    require("optuna", f"jzk report of a study ({directory})")
    from jeanzay_kit.tune.study import summary_lines
    from jeanzay_kit.tune.view import format_rows, load_study_dir, trial_rows, write_study_plots

    study = load_study_dir(directory.root)
    written, notes = write_study_plots(study, out)
    print(format_rows(trial_rows(study)))
    print()
    for line in summary_lines(study, None):
        print(line)
    for note in notes:
        print(f"not drawn: {note}")
    for line in study_ledger_lines(directory, out, written):
        print(line)
    print("\nwrote " + ", ".join(str(p) for p in written))
    return 0


def study_ledger_lines(directory: RunDir, out: Path, written: list[Path]) -> list[str]:
    """Where a study's GPU hours went (launch/ledger.py study_total): a row per trial
    from its run directory, the study's row from its job array's sacct (every task);
    the picture of it (hours.png) added to `written`."""
    from jeanzay_kit.cli.status import _newest_complete_step, slurm_states
    from jeanzay_kit.launch import status
    from jeanzay_kit.launch.ledger import ledger, ledger_table, study_total
    from jeanzay_kit.launch.manifest import read_manifest
    from jeanzay_kit.launch.run_files import ledger_record

    manifest = directory.manifest
    arrays = [str(r["job_id"]) for r in read_manifest(manifest)] if manifest.exists() else []
    usage: dict = {}
    states = slurm_states(arrays, usage)[0] if arrays else {}
    # The array's tasks: sacct names them <array>_<task>.
    tasks = [u for key, u in usage.items() if key in arrays or key.split("_")[0] in arrays]
    live = any(st.state not in status.ENDED for st in states.values())
    gpus = max((u.gpus for u in tasks), default=0)
    rows = []
    # Trials' run directories (tune/files.py trial_dir); a stray trial-old/ is not one.
    numbered = [t for t in directory.inside() if t.root.name.startswith("trial-")]
    trials = sorted(
        (t for t in numbered if t.root.name[6:].isdigit()), key=lambda t: int(t.root.name[6:])
    )
    for trial in trials:
        record = ledger_record(trial, _newest_complete_step(trial))
        if record is not None:
            rows.append((trial.root.name, ledger(record, None, gpus, None, ended=not live)))
    if not rows:
        return []
    waits = [u.queue_wait_s for u in tasks if u.queue_wait_s is not None]
    study = study_total(
        [one for _, one in rows],
        sum(u.gpu_hours for u in tasks) if tasks else None,
        sum(waits) if waits else None,
    )
    from jeanzay_kit.analysis.plots import write_hours_plot

    picture = write_hours_plot([(f"study {directory.root.name}", study)], out)
    written.extend([picture] if picture else [])
    head = '\nwhere the study\'s GPU hours went (docs/operate.md, "Where the hours went"):'
    return [head, ledger_table(rows, in_all=study)]


def rehearsal_lines(run: RunDir, runs: list, out: Path) -> list[str]:
    """A rehearsal's run (jzk rehearse): its report's table, and rehearsal.png drawn
    against the run without faults beside it."""
    import json

    from jeanzay_kit.analysis.collect import find_runs
    from jeanzay_kit.analysis.plots import write_rehearsal_plot
    from jeanzay_kit.analysis.summary import run_series
    from jeanzay_kit.rehearse.rehearsal import reference_of, report_lines

    if len(runs) != 1 or not run.rehearsal.is_file():
        return []
    found = json.loads(run.rehearsal.read_text())
    reference = None
    if (where := reference_of(run)).metrics.is_file():
        (files,) = find_runs(where)
        reference = run_series(str(files.run_dir), (), files.records)
    faults = [(str(f["kind"]), int(f["step"])) for f in found["faults"]]
    write_rehearsal_plot(runs[0], reference, faults, out)
    return report_lines(found)
