"""`jzk cluster discover`: write a cluster profile from a live Slurm cluster."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from jeanzay_kit.cli import clusters
from jeanzay_kit.errors import JzkError


def add(sub: argparse._SubParsersAction) -> None:
    cluster = sub.add_parser(
        "cluster",
        help="cluster profiles: list them, or write one from a live Slurm cluster",
        description="Cluster profiles: `discover` one from the live cluster (`list` is an "
        "alias of `jzk clusters`).",
    )
    cluster_sub = cluster.add_subparsers(dest="cluster_command", required=True, metavar="ACTION")
    discover = cluster_sub.add_parser(
        "discover",
        help="write a profile from scontrol and sacctmgr (docs/sites.md)",
        description="Ask the cluster this machine submits to (scontrol show config|partition|"
        "node, sacctmgr show qos|assoc) and write a profile in the schema of conf/cluster/, "
        "each value commented with the command it came from. Then `jzk validate "
        "cluster=NAME` works at once: profiles in $JZK_CONFIG_HOME/cluster (default "
        "~/.config/jeanzay_kit/cluster) are found like the package's own.",
    )
    discover.add_argument("--name", default=None, help="profile name (default: ClusterName)")
    discover.add_argument(
        "-o",
        "--output",
        default=None,
        metavar="PATH",
        help="where to write it (default: <user config>/cluster/<name>.yaml; - for stdout)",
    )
    discover.add_argument("--force", action="store_true", help="overwrite an existing file")
    discover.set_defaults(run=_discover)
    listing = clusters.add_listing(cluster_sub, "list", "an alias of `jzk clusters`")
    listing.set_defaults(alias_of="jzk clusters")


def _discover(args: argparse.Namespace) -> int:
    import getpass

    from jeanzay_kit.config.compose import PACKAGE_CONFIG_DIR, user_config_dir
    from jeanzay_kit.errors import SlurmCommandError
    from jeanzay_kit.slurm import discover as d
    from jeanzay_kit.slurm.commands import show_text

    config = show_text(["scontrol", "show", "config"])
    partitions = show_text(["scontrol", "show", "partition", "-o"])
    nodes = show_text(["scontrol", "show", "node", "-o"])
    user = getpass.getuser()
    try:
        qos = show_text(
            ["sacctmgr", "-n", "-P", "show", "qos", "format=Name,MaxWall,MaxTRESPerJob"]
        )
        assoc = show_text(
            [
                "sacctmgr",
                "-n",
                "-P",
                "show",
                "assoc",
                f"user={user}",
                "format=Account,Partition,QOS",
            ]
        )
        accounting = d.Accounting(qos, assoc)
    except SlurmCommandError as err:
        accounting = d.Accounting(None, None, missing=str(err).split(": ", 1)[-1][:200])
    shipped = {p.stem for p in (PACKAGE_CONFIG_DIR / "cluster").glob("*.yaml")}
    if args.output not in (None, "-") and Path(args.output).stem in shipped:
        raise JzkError(
            f"-o {args.output}: {Path(args.output).stem} is a shipped profile (jzk clusters); "
            "a file of that name in a conf/cluster/ folder would hide it. HINT: name the "
            f"file otherwise, e.g. {Path(args.output).stem}_slurm.yaml"
        )
    try:
        found = d.discover_profile(
            config, partitions, nodes, accounting, name=args.name, shipped=shipped
        )
    except ValueError as err:
        raise JzkError(f"cannot write a profile: {err}") from err
    for note in found.notes:
        print(f"note: {note}", file=sys.stderr)
    if args.output == "-":
        sys.stdout.write(found.yaml)
        return 0
    path = (
        Path(args.output)
        if args.output
        else user_config_dir(os.environ) / "cluster" / f"{found.name}.yaml"
    )
    if path.exists() and not args.force:
        raise JzkError(f"{path} exists. HINT: add --force to overwrite it, or -o another path")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(found.yaml)
    print(f"wrote {path}")
    print(f"check it, then: jzk validate cluster={found.name}   (jzk clusters lists it)")
    return 0
