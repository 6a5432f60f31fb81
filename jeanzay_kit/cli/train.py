"""`jzk train [OVERRIDES]`: train the project here (cluster=local), or sweep it on Slurm
with `-m`. Hydra parses the command line; this is `python train.py` of a checkout, and
what every task of a rendered script runs (`python -m jeanzay_kit.train_app`)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence


def add(sub: argparse._SubParsersAction) -> None:
    # Listed for `jzk --help`; `jzk train ...` never reaches argparse (cli/__init__.py).
    train = sub.add_parser(
        "train",
        help="train here, or sweep on Slurm with -m (Hydra's command line: jzk train --help)",
        add_help=False,
    )
    train.add_argument("hydra_args", nargs=argparse.REMAINDER)
    train.set_defaults(run=lambda args: run_train(args.hydra_args))


def run_train(argv: Sequence[str]) -> int:
    from jeanzay_kit.train_app import run_app

    run_app(argv, prog="jzk train")  # exits with the run's code when it is not 0
    return 0
