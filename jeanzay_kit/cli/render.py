"""`jzk render`: print (or write) the standalone sbatch script of a request."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from jeanzay_kit.cli.common import add_config_args, build_spec, render


def add(sub: argparse._SubParsersAction) -> None:
    render = sub.add_parser(
        "render",
        help="print the sbatch script of a request (or write it with -o DIR)",
        description="Validate the request, then print a standalone sbatch script for it. "
        "With -o DIR, write DIR/<job.name>.sbatch instead.",
    )
    render.add_argument("-o", "--output-dir", default=None, help="write DIR/<job.name>.sbatch")
    render.add_argument("--array", default=None, help='make a job array, e.g. "0-9%%4"')
    add_config_args(render)
    render.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    spec = build_spec(args)
    if getattr(args, "on", None):  # laptop mode: rendered there, for that cluster's paths
        from jeanzay_kit.cli.remote import run_there

        return run_there(args, spec)
    script = render(spec, args.overrides, args.array)
    if args.array:
        from jeanzay_kit.slurm.sbatch import array_run_dir

        print(
            f"each array task writes its own run directory: {array_run_dir(spec)}", file=sys.stderr
        )
    if args.output_dir is None:
        sys.stdout.write(script)
        return 0
    out_dir = Path(args.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{spec.job.name}.sbatch"
    path.write_text(script)
    print(f"wrote {path}\nsubmit it from any directory with: sbatch {path}", file=sys.stderr)
    return 0
