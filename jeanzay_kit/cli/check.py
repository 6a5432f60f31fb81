"""`jzk check`: try your dataset, model and loss on one real micro-batch, here, on the CPU,
before a job waits in a queue (train/check.py does the work)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from jeanzay_kit.cli.common import add_config_args, build_spec


def add(sub: argparse._SubParsersAction) -> None:
    check = sub.add_parser(
        "check",
        help="build the dataset and model as the job would and train one micro-batch here",
        description="Build the dataset and the model as the job would, read one micro-batch "
        "through the real DataLoader (with its worker processes), run forward, loss and "
        "backward on the CPU, and print what was seen; or the first contract break, in one "
        "line naming the key to change (exit code 2). The same check runs at the start of "
        "every training run.",
    )
    add_network_args(check)
    add_config_args(check)
    check.set_defaults(run=run)


def add_network_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--allow-network",
        action="store_true",
        help="on a profile whose compute nodes have no internet (cluster.compute_internet="
        "false): list the run's network accesses but go on (docs/offline.md)",
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=30.0,
        metavar="S",
        help="a script task (job.entry your script): the seconds of its start tried "
        "without network before it is stopped (default 30)",
    )


def run(args: argparse.Namespace) -> int:
    spec = build_spec(args)
    if not spec.cluster.compute_internet:
        # The whole check in a child without network (offline/check.py).
        from jeanzay_kit.offline.check import network_check

        return network_check(spec, args.overrides, args.config_dir, args.allow_network, args.budget)
    from jeanzay_kit.offline.probe import watch_here
    from jeanzay_kit.train.check import check_here

    # The network on (nodes that have it): its accesses said after the check's lines.
    watch = watch_here(Path.cwd())
    lines = check_here(spec, os.environ, Path.cwd())
    print("\n".join([*lines[:-2], *watch(), *lines[-2:]]))
    return 0
