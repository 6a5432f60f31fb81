"""The traced process: `python -m jeanzay_kit.offline.child --trace F --mode M -- WHAT`.

WHAT is `check OVERRIDES...` (the toolkit's loop: `jzk check`'s constructors and first
micro-batch) or `script ENTRY ARGS...` (a user's command, run as `python ENTRY ARGS` would
run it, until it ends or the parent stops it at its time budget). offline/probe.py starts
it, inside a new network namespace where the machine allows one.
"""

from __future__ import annotations

import argparse
import os
import runpy
import shlex
import signal
import sys
from pathlib import Path

from jeanzay_kit.errors import JzkError
from jeanzay_kit.offline import trace


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jeanzay_kit.offline.child")
    parser.add_argument("--trace", required=True, help="the trace file; -: a private one")
    parser.add_argument("--mode", choices=(trace.OFFLINE, trace.GUARD, trace.WATCH))
    parser.add_argument("--project", default=os.getcwd())
    parser.add_argument(
        "--report", action="store_true", help="print the accesses and the caches at the end"
    )
    parser.add_argument("what", choices=("check", "script"))
    parser.add_argument("rest", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.trace == "-":
        import tempfile

        fd, args.trace = tempfile.mkstemp(prefix="jzk-net-", suffix=".jsonl")
        os.close(fd)
    args.trace = Path(args.trace)
    if args.mode == trace.OFFLINE:
        trace.loopback_up()
    trace.install(args.trace, args.mode, str(Path(args.project).resolve()))
    rest = args.rest[1:] if args.rest[:1] == ["--"] else args.rest
    if args.report:  # a prefetch job: `timeout` stops a script's start with SIGTERM
        signal.signal(signal.SIGTERM, _stopped)
    try:
        return _check(rest) if args.what == "check" else _script(rest)
    except JzkError as err:  # said as `jzk check` says it: one line
        print(f"jzk check: error: {err}", file=sys.stderr)
        return err.exit_code
    finally:
        if args.report:
            from jeanzay_kit.offline.probe import fetched_lines, read_trace

            print("\n".join(fetched_lines(read_trace(args.trace), os.environ)), flush=True)


def _stopped(signum: int, frame: object) -> None:
    raise SystemExit(124)  # as `timeout` says it: stopped at the budget, not failed


def _check(words: list[str]) -> int:
    """`jzk check`'s constructors and first micro-batch, for these overrides."""
    from jeanzay_kit.launch.request import spec_of
    from jeanzay_kit.train.check import check_here

    config_dir = None
    if words[:1] == ["--config-dir"]:
        config_dir, words = words[1], words[2:]
    print("\n".join(check_here(spec_of(words, config_dir), os.environ, Path.cwd())))
    return 0


def _script(words: list[str]) -> int:
    """The user's command in this process (its accesses traced): a script path or
    `-m module`, then its arguments, with sys.argv as Python would set it."""
    entry, args = shlex.split(words[0]), words[1:]
    sys.path.insert(0, os.getcwd())
    try:
        if entry[0] == "-m":
            sys.argv = [entry[1], *entry[2:], *args]
            runpy.run_module(entry[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = [*entry, *args]
            runpy.run_path(str(Path(entry[0]).resolve()), run_name="__main__")
    except SystemExit as end:
        return end.code if isinstance(end.code, int) else (0 if end.code is None else 1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
