"""`jzk cancel`: end a run's Slurm jobs (requeued ones keep their id), or SIGTERM the
process holding a local run (it saves at the next step boundary and ends)."""

from __future__ import annotations

import argparse

from jeanzay_kit.cli.logs import run_records
from jeanzay_kit.errors import JzkError
from jeanzay_kit.rundir.run_directory import RunDir


def add(sub: argparse._SubParsersAction) -> None:
    cancel = sub.add_parser(
        "cancel",
        help="end a run's Slurm jobs (requeued ones too), or a local run",
        description="scancel every job of the run that Slurm still holds (a requeued job "
        "keeps its id); a run on this machine gets SIGTERM (it saves at the next step).",
    )
    cancel.add_argument("target", metavar="RUN_DIR|JOB_ID")
    cancel.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from jeanzay_kit.errors import SlurmCommandError
    from jeanzay_kit.launch import status
    from jeanzay_kit.slurm.commands import scancel, squeue_text

    records = run_records(args.target)
    jobs = list(dict.fromkeys(str(r["job_id"]) for r in records if r["job_id"] != "local"))
    local = [r for r in records if r["job_id"] == "local"]
    if jobs:
        try:
            held = status.parse_squeue(squeue_text())
        except SlurmCommandError as err:
            raise JzkError(f"cannot ask Slurm which jobs are live: {err}") from err
        live = [j for j in jobs if j in held]
        if live:
            scancel(live)
            print(f"cancelled {len(live)} job(s): {' '.join(live)}")
        else:
            print(f"no job of {args.target} is queued or running ({' '.join(jobs)})")
    for record in local:
        print(_stop_local(RunDir.of(str(record["run_dir"]))))
    return 0


def _stop_local(run_dir: RunDir) -> str:
    """SIGTERM to the process holding a local run (its lease): it saves and ends."""
    import os
    import signal
    import socket

    from jeanzay_kit.rundir.lease_rules import parse_record, saves_on_stop

    path = run_dir.lease
    record = parse_record(path.read_text()) if path.exists() else None
    if record is None or record.released:
        return f"{run_dir}: no run holds it"
    if record.host != socket.gethostname():
        return f"{run_dir}: held by pid {record.pid} on {record.host}: stop it there"
    try:
        os.kill(record.pid, signal.SIGTERM)
    except ProcessLookupError:
        return f"{run_dir}: its holder (pid {record.pid}) is gone"
    return f"{run_dir}: SIGTERM sent to pid {record.pid} ({saves_on_stop(record)}, then ends)"
