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
    add_config_args(check)
    check.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    spec = build_spec(args)
    # Your project's package is imported as the job imports it: ./ (or JZK_CODE_DIR) first.
    from jeanzay_kit.project.import_path import put_project_on_path

    put_project_on_path(os.environ, Path.cwd())
    import torch

    from jeanzay_kit.train.check import check_contracts

    cpus = spec.loader.cpus_per_process or os.cpu_count() or 1
    found = check_contracts(spec, torch.device("cpu"), "fp32", cpus)
    print("\n".join(found.lines()))
    print("\nOK: the dataset, model and loss meet their contracts (docs/your-model-and-data.md).")
    return 0
