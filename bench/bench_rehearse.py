"""The toolkit under a schedule of faults (issue 70): the goodput of a run under a seeded
schedule against the same run without faults, and per kind of fault the seconds from the
fault to the next step (median and max).

    .venv/bin/python bench/bench_rehearse.py [--faults 14] [--every 2] [--seed 7] [--steps 8000]
        [--checkpoint-dir DIR]   # on a small filesystem of its own: storage_full included

As root without --checkpoint-dir it mounts a 256 MiB tmpfs for the checkpoints (unmounted
at the end), so that every kind of fault is measured; otherwise the rehearsal leaves
storage_full out, and says so (docs/rehearse.md).
    .venv/bin/python bench/bench_rehearse.py --from DIR   # a rehearsal already run (its --dir)

It runs `jzk rehearse` (docs/rehearse.md) on the default example (an MLP, 2 CPU
workers, gloo), which runs the request without faults first, then under the schedule,
and keeps the report in <dir>/run/rehearsal.json; the figures are read from there.
Results are printed and written to bench/results/rehearse.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO, write_result  # noqa: E402

JZK = str(Path(sys.executable).with_name("jzk"))


def rehearse(folder: Path, args: argparse.Namespace) -> None:
    argv = [JZK, "rehearse", f"train.steps={args.steps}", "checkpoint.every_steps=50"]
    argv += ["watchdog.stall_seconds=5", "watchdog.heartbeat_seconds=0.5"]
    argv += [f"checkpoint.dir={args.checkpoint_dir}"] if args.checkpoint_dir else []
    argv += ["--faults", str(args.faults), "--every", str(args.every), "--seed", str(args.seed)]
    done = subprocess.run([*argv, "--dir", str(folder)], cwd=REPO, text=True)
    if done.returncode != 0:
        sys.exit(f"jzk rehearse failed (exit {done.returncode}): see {folder}")


@contextlib.contextmanager
def small_filesystem(where: Path, args: argparse.Namespace) -> Iterator[str | None]:
    """--checkpoint-dir, else as root a tmpfs of its own (the storage_full fault fills
    only a small filesystem), else None."""
    if args.checkpoint_dir or os.geteuid() != 0:
        yield args.checkpoint_dir
        return
    where.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256m", "tmpfs", str(where)], check=True)
    try:
        yield str(where / "checkpoints")
    finally:
        subprocess.run(["umount", str(where)], check=False)


def figures(report: dict) -> dict:
    """The report's rows grouped by kind: the seconds to the next step and to detection."""
    by_kind: dict[str, dict[str, list[float]]] = {}
    for row in report["faults"]:
        kind = by_kind.setdefault(row["kind"], {"resumed_s": [], "detected_s": []})
        for key in ("resumed_s", "detected_s"):
            if row[key] is not None:
                kind[key].append(row[key])
    return {
        "goodput": report["goodput"],
        "digest_equal": report["digest_equal"],
        "lost_steps": report["lost_steps"],
        "faults": len(report["faults"]),
        "by_kind": by_kind,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--faults", type=int, default=14)
    parser.add_argument("--every", type=float, default=2.0, help="seconds of training")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--steps", type=int, default=8000)
    parser.add_argument("--from", dest="given", type=Path, help="a rehearsal's folder")
    parser.add_argument(
        "--checkpoint-dir", help="checkpoint.dir on a small filesystem (the storage_full fault)"
    )
    args = parser.parse_args()
    if args.given is None:
        top = Path(tempfile.mkdtemp(prefix="jzk-bench-rehearse-"))
        args.given = top / "rehearsal"
        with small_filesystem(top / "small", args) as args.checkpoint_dir:
            rehearse(args.given, args)
    report = json.loads((args.given / "run" / "rehearsal.json").read_text())
    schedule = json.loads((args.given / "run" / "faults.json").read_text())
    found = {"setup": {k: schedule[k] for k in ("seed", "every_s")}, **figures(report)}
    write_result("rehearse", found)
    print(f"goodput {found['goodput']:.2f}; final model equal: {found['digest_equal']}")
    for kind, seconds in sorted(found["by_kind"].items()):
        resumed = seconds["resumed_s"]
        if resumed:
            print(
                f"{kind:<10} fault to next step: median {statistics.median(resumed):.2f} s, "
                f"max {max(resumed):.2f} s ({len(resumed)} fault(s))"
            )


if __name__ == "__main__":
    main()
