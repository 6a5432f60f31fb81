"""`jzk`: one module per command, listed in COMMANDS in the order `jzk --help` shows them.

Each command module has `add(subparsers)` (its parser, with `run` as its default) and
`run(args) -> exit code`. An edge package: it reads argv and files, prints and exits.
Errors a user can cause are printed as one clear message (no traceback), exit code 2.
`jzk train` hands its whole command line to Hydra (cli/train.py).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from jeanzay_kit.config.command_line import split_script_args, with_script_args
from jeanzay_kit.errors import JzkError
from jeanzay_kit.report import error as report_error

# (command, module under jeanzay_kit.cli): the whole command line at a glance.
COMMANDS = (
    ("init", "init"),
    ("train", "train"),
    ("check", "check"),
    ("prefetch", "prefetch"),
    ("validate", "validate"),
    ("render", "render"),
    ("submit", "submit"),
    ("plan", "plan"),
    ("tune", "tune"),
    ("rehearse", "rehearse"),
    ("status", "status"),
    ("logs", "logs"),
    ("cancel", "cancel"),
    ("report", "report"),
    ("doctor", "doctor"),
    ("clusters", "clusters"),
    ("cluster", "cluster"),
    ("ckpt", "ckpt"),
    ("remote", "remote"),
    ("pull", "pull"),
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jzk",
        description="jeanzay_kit: train a PyTorch project here or on a Slurm cluster: "
        "validate a request against a cluster profile, render or submit its sbatch script, "
        "watch and report its runs.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for _name, module in COMMANDS:
        importlib.import_module(f"jeanzay_kit.cli.{module}").add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["train"]:
        # Hydra parses the rest (overrides, -m, --cfg, --help), as `python train.py` does.
        from jeanzay_kit.cli.train import run_train

        try:
            return run_train(argv[1:])
        except BrokenPipeError:  # `jzk train --help | head`
            return 0
    # Laptop mode (cli/remote.py): `--on HOST`, or a run the laptop submitted elsewhere.
    from jeanzay_kit.cli.remote import check_with_code, forward, split_on

    argv, host = split_on(argv)
    try:
        forwarded = forward(argv, host)
    except JzkError as err:
        report_error(f"jzk {argv[0] if argv else ''}".strip(), err)
        return err.exit_code
    if forwarded is not None:
        return forwarded
    # `jzk submit|render|validate|check [OVERRIDES] -- ARGS`: the script's arguments.
    before, script_args = split_script_args(argv)
    parser = build_parser()
    args = parser.parse_args(before)
    args.on = host
    args.argv = argv[1:]
    try:
        check_with_code(args.command, host)
        if script_args is not None and not hasattr(args, "overrides"):
            parser.error(f"jzk {args.command} takes no script arguments after `--`")
        if hasattr(args, "overrides"):
            args.overrides = with_script_args(args.overrides, script_args)
        return args.run(args)
    except JzkError as err:
        report_error(f"jzk {args.command}", err)
        return err.exit_code
    except BrokenPipeError:  # `jzk render | head`
        return 0
