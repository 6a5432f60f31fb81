"""`jzk prefetch`: download what the run reaches where the network is (offline/prefetch.py;
docs/offline.md)."""

from __future__ import annotations

import argparse

from jeanzay_kit.cli.common import add_config_args, build_spec


def add(sub: argparse._SubParsersAction) -> None:
    prefetch = sub.add_parser(
        "prefetch",
        help="download what the run reaches (models, datasets, weights) where the network is",
        description="Run the run's start (the dataset, model and loss constructors and a "
        "first step; a script task's first minutes) with the network on and the libraries' "
        "caches set (cluster.cache_dir), as a job on cluster.prefetch_partition (Jean Zay: "
        "prepost, no GPU hours) or here when the profile names none. A training job on "
        "nodes without internet then reads those caches with the libraries' offline "
        "switches on. `jzk submit --prefetch` chains it before the training job.",
    )
    add_config_args(prefetch)
    prefetch.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from jeanzay_kit.offline.prefetch import prefetch

    spec = build_spec(args)
    prefetch(spec, args.overrides, args.config_dir)
    return 0
