"""`jzk rehearse`: a seeded schedule of faults on your run, here, before an allocation
(rehearse/; docs/rehearse.md)."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from jeanzay_kit.cli.common import add_config_args, build_spec


def add(sub: argparse._SubParsersAction) -> None:
    rehearse = sub.add_parser(
        "rehearse",
        help="run your job under a seeded schedule of faults and report what each cost",
        description="Run the request without faults (the reference), then under a seeded "
        "schedule of faults injected for real (the time-limit warning, a training process "
        "killed, one stopped, the warning during start-up, a NaN loss, a process killed "
        "during a save, the checkpoints' filesystem full when it is a small one of its own; "
        "with --slurm every process of a node), each after some seconds of "
        "training; then say per fault when it was noticed and by what, when training went "
        "on, the steps lost, and whether the final model equals the reference's. "
        "<dir>/run/faults.json is written first; <dir>/run/rehearsal.json keeps the report. "
        "Rehearsed: the toolkit's loop, and a loop of yours on the session API (job.entry); "
        "a plain script is not yet (docs/rehearse.md).",
    )
    rehearse.add_argument(
        "--faults", type=int, default=4, metavar="N", help="how many faults (default 4)"
    )
    rehearse.add_argument(
        "--every",
        type=float,
        default=20.0,
        metavar="S",
        help="seconds of training between them, on average (default 20)",
    )
    rehearse.add_argument(
        "--seed", type=int, default=0, metavar="K", help="the schedule's seed (default 0)"
    )
    rehearse.add_argument(
        "--dir",
        default=None,
        help="the rehearsal's folder (default outputs/rehearse-<job.name>-seed<K>)",
    )
    rehearse.add_argument("--json", action="store_true", help="the report as JSON on the last line")
    rehearse.add_argument(
        "--slurm",
        action="store_true",
        help="submit both runs to the Slurm cluster of the cluster= profile (faults reach "
        "the nodes through the job: scancel --signal, srun --overlap), and add node_lost",
    )
    add_config_args(rehearse)
    rehearse.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from jeanzay_kit.launch.request import workdir_of
    from jeanzay_kit.rehearse.rehearsal import Options, rehearse, report_lines

    spec = build_spec(args)
    folder = Path(args.dir or f"outputs/rehearse-{spec.job.name}-seed{args.seed}")
    env, project = dict(os.environ), workdir_of(spec)
    opts = Options(args.faults, args.every, args.seed, folder, args.slurm, env, project)
    found = rehearse(spec, args.overrides, opts)
    print("\n".join(report_lines(found)))
    if args.json:
        print(json.dumps(found))
    rows = found["faults"]
    assert isinstance(rows, list)
    # Bit for bit where the run is deterministic (CPU), else the final loss.
    final = found["digest_equal"] is True or (
        found["bitwise"] is False and found["loss_close"] is True
    )
    survived = all(r["verdict"] == "ok" for r in rows) and final
    return 0 if survived else 1
