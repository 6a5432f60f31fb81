"""`jzk clusters`: list the cluster profiles, with where each comes from."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from jeanzay_kit.config.compose import (
    PACKAGE_CONFIG_DIR,
    GroupOption,
    compose_config,
    config_roots,
    group_options,
    load_profile,
)
from jeanzay_kit.errors import JzkError
from jeanzay_kit.slurm_syntax.timefmt import format_time

DESCRIPTION = (
    "List the cluster profiles of the config tree with where each comes from: the "
    "project's conf/cluster/, the user's folder ($JZK_CONFIG_HOME/cluster), then the "
    "package's own."
)


def add(sub: argparse._SubParsersAction) -> None:
    add_listing(sub, "clusters", "list the cluster profiles with their partitions and limits")


def add_listing(
    sub: argparse._SubParsersAction, name: str, summary: str
) -> argparse.ArgumentParser:
    """The one parser of the listing: `jzk clusters`, and `jzk cluster list`, its alias
    (docs/operate.md taught it; users' scripts may call it), built here so the two
    cannot drift apart."""
    listing = sub.add_parser(name, help=summary, description=DESCRIPTION)
    listing.add_argument("--config-dir", default=None, help="the config tree to read")
    listing.set_defaults(run=run)
    return listing


def profile_options(config_dir: str | None) -> list[GroupOption]:
    """Every profile of the config tree, first match wins: the project's conf/cluster,
    the user's folder, then the package's (or --config-dir's) own."""
    return group_options(config_roots(os.environ, Path.cwd(), config_dir), "cluster")


def run(args: argparse.Namespace) -> int:
    from jeanzay_kit.config.clusters import profile_from_dict

    options = profile_options(args.config_dir)
    if not options:
        raise JzkError(f"no cluster profiles in {args.config_dir or PACKAGE_CONFIG_DIR}")
    for option in options:
        path = option.root.path / "cluster" / f"{option.name}.yaml"
        alone = load_profile(path)
        cluster = alone if alone is not None else _composed(option.name, args.config_dir)
        prof = profile_from_dict(cluster)
        account = (
            f"required, <project>{prof.account_suffix or ''}"
            if prof.account_required
            else "optional"
        )
        print(f"{option.name}: {prof.description}")
        hidden = "".join(f"; hides {r.describe()}" for r in option.shadows)
        print(f"  from {option.root.describe()}{hidden}")
        print(
            f"  scheduler {prof.scheduler}, device {prof.device}, bf16 "
            f"{'yes' if prof.bf16 else 'no'}, account {account}"
        )
        if prof.modules:
            print(f"  modules: {' '.join(prof.modules)}")
        for part in prof.partitions.values():
            gpus = part.gpus_per_node if part.gpus_per_node is not None else "any"
            cpus = part.cpus_per_node if part.cpus_per_node is not None else "any"
            limit = format_time(part.max_minutes) if part.max_minutes else "none"
            how = f"-C {part.default_constraint}" if part.select == "constraint" else "--partition"
            extra = f", constraints {'|'.join(part.constraints)}" if part.constraints else ""
            default = " (default)" if part.name == prof.default_partition else ""
            pre = ", preemptible" if part.preemptible else ""
            print(
                f"  partition {part.name}{default}: {gpus} GPUs, {cpus} CPUs per node, "
                f"max {limit}, via {how}{extra}{pre}"
            )
        for q in prof.qos_by_time():
            gpus = f", max {q.max_gpus_per_job} GPUs/job" if q.max_gpus_per_job else ""
            default = " (default)" if q.name == prof.default_qos else ""
            print(f"  qos {q.name}{default}: max {format_time(q.max_minutes)}{gpus}")
        print()
    return 0


def _composed(name: str, config_dir: str | None) -> dict:
    """A profile built on another one: composed with the whole config."""
    return dict(compose_config([f"cluster={name}"], config_dir)["cluster"])
