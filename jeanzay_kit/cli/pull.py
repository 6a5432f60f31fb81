"""`jzk pull RUN`: a remote run's files brought to the laptop (laptop mode, docs/remote.md)."""

from __future__ import annotations

import argparse
import os
import tarfile
import tempfile
from pathlib import Path

from jeanzay_kit.errors import JzkError


def add(sub: argparse._SubParsersAction) -> None:
    pull = sub.add_parser(
        "pull",
        help="bring a remote run's metrics, plots, report, result and final model here",
        description="Copy a run submitted with `jzk submit --on HOST` (named by its run "
        "directory's name, its path there, or a job id) into ./pulled/<name>, over the same "
        "ssh connection as every command: everything of its run directory but its "
        "checkpoints (--checkpoints: those too). `jzk report pulled/<name>` then draws it here.",
    )
    pull.add_argument("target", metavar="RUN")
    pull.add_argument("--checkpoints", action="store_true", help="the checkpoints too")
    pull.add_argument("-o", "--out", default=None, metavar="DIR", help="default ./pulled/<name>")
    pull.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from jeanzay_kit.remote import registry
    from jeanzay_kit.remote.laptop import remote_known
    from jeanzay_kit.remote.transport import state_dir

    env = dict(os.environ)
    found = registry.find_run(state_dir(env), args.target)
    if found is None:
        raise JzkError(
            f"{args.target} is no remote run this laptop submitted. HINT: `jzk status` lists "
            "them; a run on this machine needs no pull"
        )
    remote = remote_known(found.host, env)
    out = Path(args.out) if args.out else Path("pulled") / found.name
    argv = ["remote", "pack", found.run_dir, *(["--checkpoints"] if args.checkpoints else [])]
    with tempfile.TemporaryFile() as data:
        remote.pipe_out(argv, data)
        size = data.tell()
        data.seek(0)
        with tarfile.open(fileobj=data, mode="r:gz") as tar:
            members = [m for m in tar.getmembers() if m.isfile() and _safe(m.name)]
            out.mkdir(parents=True, exist_ok=True)
            for member in members:
                tar.extract(member, out, set_attrs=False)
    print(f"pulled {len(members)} files ({size} bytes on the wire) of {found.host}:{found.run_dir}")
    print(f"  into {out}   report: jzk report {out}")
    return 0


def _safe(name: str) -> bool:
    return not name.startswith("/") and ".." not in Path(name).parts
