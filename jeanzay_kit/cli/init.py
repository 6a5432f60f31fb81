"""`jzk init [DIR]`: write a runnable project skeleton (project/skeleton.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from jeanzay_kit.errors import JzkError
from jeanzay_kit.project.skeleton import package_name, skeleton_files


def add(sub: argparse._SubParsersAction) -> None:
    init = sub.add_parser(
        "init",
        help="write a project skeleton that `jzk train` trains out of the box",
        description="Write into DIR (default: the current directory) a package of your own "
        "with a model and a dataset, conf/model/ and conf/data/ entries that point at them, "
        "conf/config.yaml choosing them, a .gitignore for outputs/logs/multirun and a "
        "README with the commands. Existing files are never overwritten.",
    )
    init.add_argument("dir", nargs="?", default=".", metavar="DIR")
    init.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    root = Path(args.dir).resolve()
    files = skeleton_files(root.name)
    existing = [rel for rel in files if (root / rel).exists()]
    if existing:
        raise JzkError(
            f"{root} already has {', '.join(existing)}: nothing was written. HINT: run "
            "`jzk init NEWDIR` for a fresh project, or move those files aside"
        )
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    print(f"wrote a project in {root} (package {package_name(root.name)}/, conf/)")
    where = "" if root == Path.cwd().resolve() else f"cd {args.dir} && "
    print(f"train it: {where}jzk train")
    return 0
