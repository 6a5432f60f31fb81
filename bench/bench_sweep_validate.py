"""`jzk validate -m` of a 10,000-point sweep vs the sweep launcher's own checks of it.

    .venv/bin/python bench/bench_sweep_validate.py [--points 10000] [--rounds 3]

Issue 67 point 5: a sweep is checked as fast as it is submitted. `jzk validate -m
cluster=slurm_local optim.lr=range(1,N+1)` (every point composed, checked and priced: the
ceiling line) is timed as a whole command, from an empty temporary folder with an empty
cache ($XDG_CACHE_HOME), against the same points checked the way `python train.py -m`
checks them before it submits anything (hydra_plugins/jeanzay_launcher
_validated_points: launch/point_configs.PointConfigs composes once per group choice,
then each point is resolved, built into its JobSpec and fit-checked), also a whole
process from its start, in the same round. Rounds alternate which goes first.

Why not the submission itself: submitting 10,000 points needs Slurm (sbatch, and the
array limit splits the sweep into several arrays), which this bench does not assume; the
launcher's checks are the part of the submission that `jzk validate -m` repeats, and
what the issue measured it against (400 points submitted in 5.9 s, most of it these
checks). The figures: validate's seconds for the N points (target < 60 s for 10,000 on a
2-core machine), its seconds per 1,000 points, and the ratio validate / the launcher's
checks. For the record, the cost of composing each point from scratch (what
`jzk validate -m` did before: launch/request.spec_of outside the sweep's compositions)
is measured on a few points and given per 1,000 points.
Results: stdout and bench/results/sweep_validate.json.
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

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable
JZK = str(Path(PY).parent / "jzk")
sys.path.insert(0, str(REPO / "bench"))

from common import write_result  # noqa: E402

CLUSTER = "cluster=slurm_local"


def _env(work: Path) -> dict[str, str]:
    """An empty cache: no composition, fit answer or trace kept from an earlier round."""
    return {**os.environ, "XDG_CACHE_HOME": str(work / "cache")}


def validate_seconds(work: Path, points: int) -> float:
    """`jzk validate -m` of the sweep, start to end of the command."""
    work.mkdir(parents=True)
    argv = [JZK, "validate", "-m", CLUSTER, f"optim.lr=range(1,{points + 1})"]
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=work, env=_env(work), capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0 or f"sweep           {points} point(s)" not in done.stdout:
        sys.exit(f"bench_sweep_validate: jzk validate failed: {done.stderr[-3000:]}")
    return seconds


def launcher_seconds(work: Path, points: int) -> float:
    """The launcher's checks of the same points, in a process of their own."""
    work.mkdir(parents=True)
    argv = [PY, __file__, "--launcher-side", str(points)]
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=work, env=_env(work), capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0 or done.stdout.strip() != str(points):
        sys.exit(f"bench_sweep_validate: the launcher side failed: {done.stderr[-3000:]}")
    return seconds


def launcher_side(points: int) -> None:
    """What _validated_points does for each point of `python train.py -m CLUSTER
    optim.lr=...`, up to the submission: compose once, then point by point."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.types import RunMode

    from hydra_plugins.jeanzay_launcher.jeanzay_launcher import _check_task, _spec_of
    from jeanzay_kit.config.compose import PACKAGE_CONFIG_DIR, register_schemas
    from jeanzay_kit.config.resolvers import register_resolvers
    from jeanzay_kit.config.spec import build_job_spec
    from jeanzay_kit.launch.point_configs import PointConfigs, resolved_point

    register_resolvers()
    register_schemas()
    sweep_dir = Path.cwd() / "multirun"
    with initialize_config_dir(config_dir=str(PACKAGE_CONFIG_DIR), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        master = loader.load_configuration(
            "config", overrides=[f"hydra.sweep.dir={sweep_dir}"], run_mode=RunMode.MULTIRUN
        )
        composer = PointConfigs(loader, master)
        checked = 0
        for num in range(points):
            overrides = [CLUSTER, f"optim.lr={num + 1}"]
            with composer.point(overrides, num) as cfg:
                _, plain = resolved_point(cfg, str(sweep_dir))
            spec = build_job_spec(plain, interpreter=sys.executable)
            _check_task(spec, overrides, _spec_of(composer, num, sweep_dir))
            checked += 1
    print(checked)


def scratch_seconds_per_point(work: Path, points: int) -> float:
    """Each point composed from scratch (spec_of without the sweep's compositions), as
    `jzk validate -m` did before; the first point (imports, the cache filled) left out."""
    work.mkdir(parents=True)
    code = (
        "import sys, time\n"
        "from jeanzay_kit.launch.request import spec_of\n"
        f"spec_of([{CLUSTER!r}, 'optim.lr=0.5'], None, fit=False)\n"
        "start = time.perf_counter()\n"
        f"for i in range({points}):\n"
        f"    spec_of([{CLUSTER!r}, f'optim.lr={{i + 1}}'], None, fit=False)\n"
        f"print((time.perf_counter() - start) / {points})\n"
    )
    done = subprocess.run(
        [PY, "-c", code], cwd=work, env=_env(work), capture_output=True, text=True
    )
    if done.returncode != 0:
        sys.exit(f"bench_sweep_validate: composing from scratch failed: {done.stderr[-3000:]}")
    return float(done.stdout.split()[-1])


def one_round(i: int, points: int) -> dict[str, float]:
    order = ["validate", "launcher"] if i % 2 == 0 else ["launcher", "validate"]
    got: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="jzk-sweep-validate-") as tmp:
        for side in order:
            timer = validate_seconds if side == "validate" else launcher_seconds
            got[side] = timer(Path(tmp) / side, points)
    got["ratio"] = got["validate"] / got["launcher"]
    got["validate_s_per_1000"] = got["validate"] / points * 1000
    print(
        f"round {i + 1}: jzk validate -m {got['validate']:.1f} s ({got['validate_s_per_1000']:.2f}"
        f" s per 1,000 points), the launcher's checks {got['launcher']:.1f} s, ratio "
        f"{got['ratio']:.3f}",
        flush=True,
    )
    return {k: round(v, 3) for k, v in got.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--points", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--scratch-points", type=int, default=10)
    parser.add_argument("--launcher-side", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.launcher_side:
        return launcher_side(args.launcher_side)
    rounds = [one_round(i, args.points) for i in range(args.rounds)]
    with tempfile.TemporaryDirectory(prefix="jzk-sweep-scratch-") as tmp:
        scratch = scratch_seconds_per_point(Path(tmp) / "scratch", args.scratch_points)
    summary = {
        "validate_s": statistics.median(r["validate"] for r in rounds),
        "launcher_s": statistics.median(r["launcher"] for r in rounds),
        "ratio": statistics.median(r["ratio"] for r in rounds),
        "validate_s_per_1000": statistics.median(r["validate_s_per_1000"] for r in rounds),
        "scratch_s_per_1000": round(scratch * 1000, 1),
    }
    print(f"median: {summary}")
    report = {"points": args.points, "rounds": rounds, "summary": summary}
    print(f"-> {write_result('sweep_validate', report)}")
    return None


if __name__ == "__main__":
    main()
