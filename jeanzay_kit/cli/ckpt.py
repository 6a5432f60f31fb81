"""`jzk ckpt list|verify|digest|archive|restore`: inspect the checkpoints of a run
directory; pack them into one file on the archive tier and bring them back."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jeanzay_kit.rundir.run_directory import RunDir


def add(sub: argparse._SubParsersAction) -> None:
    ckpt = sub.add_parser(
        "ckpt",
        help="list, verify, digest, archive or restore the checkpoints of a run directory",
        description="Inspect <RUN_DIR>/checkpoints without starting a job; pack them into "
        "one file on the archive tier and bring them back (docs/storage.md).",
    )
    ckpt_sub = ckpt.add_subparsers(dest="ckpt_command", required=True, metavar="ACTION")
    c_list = ckpt_sub.add_parser(
        "list",
        help="steps, sizes, complete or not",
        description="List the checkpoints: step, size, complete or not.",
    )
    c_list.add_argument("run_dir", metavar="RUN_DIR")
    c_verify = ckpt_sub.add_parser(
        "verify",
        help="check every checksum; exit 1 on damage",
        description="Check every file of every complete checkpoint against its manifest. "
        "Exit 1 if any is damaged.",
    )
    c_verify.add_argument("run_dir", metavar="RUN_DIR")
    c_digest = ckpt_sub.add_parser(
        "digest",
        help="one hex digest of the full model parameters",
        description="Print one sha256 of the full model parameters of a checkpoint (the "
        "newest intact one, or --step N): the same whatever the sharding or parallel mode.",
    )
    c_digest.add_argument("run_dir", metavar="RUN_DIR")
    c_digest.add_argument("--step", type=int, default=None)
    c_archive = ckpt_sub.add_parser(
        "archive",
        help="pack the run's checkpoints into one file (on $STORE)",
        description="Pack every complete checkpoint of RUN_DIR (checkpoints/ and kept/) into "
        "one tar file in --to (default $STORE), with the SHA256 of every file, read back "
        "before it counts (docs/storage.md).",
    )
    c_archive.add_argument("run_dir", metavar="RUN_DIR")
    c_archive.add_argument("--to", default=None, help="the folder of the archive (default $STORE)")
    c_archive.add_argument(
        "--remove",
        action="store_true",
        help="remove the packed folders once the archive is checked",
    )
    c_restore = ckpt_sub.add_parser(
        "restore",
        help="unpack an archive into a run directory, checked bit for bit",
        description="Unpack ARCHIVE (of jzk ckpt archive) into RUN_DIR and check every file "
        "against its SHA256 and every checkpoint against its manifest.",
    )
    c_restore.add_argument("archive", metavar="ARCHIVE")
    c_restore.add_argument("run_dir", metavar="RUN_DIR")
    ckpt.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from jeanzay_kit.ckpt import inspection
    from jeanzay_kit.rundir.run_directory import RunDir

    folder = RunDir(Path(args.run_dir))  # the command line's RUN_DIR, wrapped once
    if args.ckpt_command == "list":
        rows = inspection.list_checkpoints(args.run_dir)
        if not rows:
            print("no checkpoints")
            _say_archived(folder)
        for row in rows:
            size = f"{row['bytes'] / 1e6:10.1f} MB" if row["bytes"] is not None else " " * 13
            state = "complete" if row["complete"] else "INCOMPLETE (not loadable)"
            best = f"  {row['best']}" if row.get("best") else ""
            print(f"{row['name']:>16}  {size}  {state}{best}")
        return 0
    if args.ckpt_command == "verify":
        report = inspection.verify(args.run_dir)
        damaged = 0
        for name, problems in sorted(report.items(), key=lambda kv: kv[0]):
            if problems:
                damaged += 1
                print(f"{name}: DAMAGED: " + "; ".join(problems))
            else:
                print(f"{name}: ok")
        if not report:
            print("no complete checkpoints")
        return 1 if damaged else 0
    if args.ckpt_command in ("archive", "restore"):
        return _archive_or_restore(args, folder)
    step, value = inspection.digest(args.run_dir, args.step)
    print(value)
    print(f"step-{step}", file=sys.stderr)
    return 0


def _say_archived(run: RunDir) -> None:
    from jeanzay_kit.ckpt.store import archived_note

    if (note := archived_note(run)) is not None:
        print(f"{run.root}: {note}")


def _archive_or_restore(args: argparse.Namespace, run: RunDir) -> int:
    import os
    from pathlib import Path

    from jeanzay_kit.ckpt.archive import archive, restore
    from jeanzay_kit.errors import JzkError

    if args.ckpt_command == "restore":
        restore(Path(args.archive), run, print)
        return 0
    to = args.to or os.environ.get("STORE")
    if not to:
        raise JzkError(
            "jzk ckpt archive: no --to and no $STORE. HINT: --to <folder on the archive tier>"
        )
    archive(run, Path(to), args.remove, print)
    return 0
