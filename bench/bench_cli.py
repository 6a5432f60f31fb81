"""Start-up of the login-node commands against `jzk --help`, measured in one run.

    .venv/bin/python bench/bench_cli.py [--rounds 7]

Each command runs as a user types it (a new process, the installed `jzk`), from a
folder with no project in it; rounds alternate the commands' order and the figure is
the median wall time. The claim (issue 43): `jzk clusters`, `jzk cluster list` and
`jzk validate` start within 3x of `jzk --help`, which imports nothing but argparse and
the command table. Hydra's composition is kept between commands
(jeanzay_kit/config/compose_cache.py): the first validate of a config pays it, measured
apart ("first time", the cache off), and is not part of the claim. Results:
bench/results/cli.json.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import write_result  # noqa: E402

JZK = str(Path(sys.executable).parent / "jzk")
COMMANDS = {
    "jzk --help": ["--help"],
    "jzk clusters": ["clusters"],
    "jzk cluster list": ["cluster", "list"],
    "jzk validate": ["validate"],
    "jzk validate cluster=jeanzay_h100": [
        "validate",
        "cluster=jeanzay_h100",
        "cluster.account=a@h100",
    ],
    # The first validate of a config (or after editing it): Hydra composes (no cache).
    "jzk validate, first time": ["validate", "resources.gpus_per_node=3"],
}
COLD = {"jzk validate, first time"}


def wall(args: list[str], cwd: Path, cold: bool) -> float:
    env = {**os.environ, "JZK_COMPOSE_CACHE": "0"} if cold else None
    start = time.perf_counter()
    done = subprocess.run([JZK, *args], cwd=cwd, capture_output=True, text=True, env=env)
    took = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"jzk {' '.join(args)} failed: {done.stderr[-500:]}")
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    with tempfile.TemporaryDirectory() as folder:
        for i in range(args.rounds):
            order = list(COMMANDS) if i % 2 == 0 else list(reversed(COMMANDS))
            for name in order:
                times[name].append(wall(COMMANDS[name], Path(folder), name in COLD))
    median = {name: statistics.median(t) for name, t in times.items()}
    base = median["jzk --help"]
    report = {
        "rounds": args.rounds,
        "median_s": {k: round(v, 3) for k, v in median.items()},
        "ratio_to_help": {k: round(v / base, 2) for k, v in median.items()},
        "claim": "each command within 3x of jzk --help",
        "holds": all(v / base <= 3 for k, v in median.items() if k not in COLD),
    }
    for name, value in median.items():
        print(f"{name:36s} {value:6.3f} s  {value / base:5.2f}x")
    print(f"within 3x of jzk --help: {report['holds']}")
    write_result("cli", report)


if __name__ == "__main__":
    main()
