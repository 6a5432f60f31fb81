"""What heartbeats, the watchdog and the progress lines cost, measured in the same run.

    .venv/bin/python bench/bench_watchdog.py [--steps 40] [--rounds 6] [--workers 2]

jeanzay_kit's loop (`train()`, parallel.mode=ddp, the bench model of bench_runtime.py)
with each rank's Heartbeat and Watchdog threads running (the defaults: a beat every 2 s,
stall_seconds=300) against the same loop with neither. Rounds alternate which side goes
first; the ratio is the median of the per-round ratios. Target <= 1.01. Results are
printed and written to bench/results/watchdog.json.
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import replace
from pathlib import Path

import torch
import torch.distributed as dist

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench_runtime import overrides, run_workers, start_run, toolkit_step_time  # noqa: E402
from common import write_result  # noqa: E402

from jeanzay_kit.config.compose import compose_config  # noqa: E402
from jeanzay_kit.config.spec import build_job_spec  # noqa: E402
from jeanzay_kit.node.local import local_rank_infos  # noqa: E402
from jeanzay_kit.rundir.run_directory import RunDir  # noqa: E402
from jeanzay_kit.runtime.heartbeat import Heartbeat, Watchdog  # noqa: E402


class _NoBeat:
    """The loop's beats go nowhere (the "off" side)."""

    def beat(self, step: int, phase: str) -> None:
        pass


def worker(index: int, args, port: int, out_dir: Path) -> None:
    torch.set_num_threads(max(1, args.threads))
    spec = build_job_spec(compose_config(overrides("ddp", args.workers, args.steps)))
    info = local_rank_infos(args.workers, port)[index]
    # The session's own heartbeat (and no watchdog: stall_seconds=0) runs on both sides;
    # each side puts its own in the loop's hands: a real one with a watchdog, or none.
    spec = replace(spec, watchdog=replace(spec.watchdog, stall_seconds=0.0))
    run = start_run(spec, info, out_dir / "session")
    own_beat = run.heartbeat
    times: dict[str, list[float]] = {"on": [], "off": []}
    for r in range(args.rounds):
        for side in ("on", "off") if r % 2 == 0 else ("off", "on"):
            run_dir = out_dir / f"{side}-{r}"
            run_dir.mkdir(parents=True, exist_ok=True)
            dist.barrier()
            watch = None
            if side == "on":
                beat = Heartbeat(RunDir(run_dir), info.rank, args.steps, "bench", None, 2.0).start()
                watch = (beat, Watchdog(beat, RunDir(run_dir), 300.0).start())
            run.heartbeat = watch[0] if watch else _NoBeat()
            # toolkit_step_time gives (wall, CPU) per step: the wall time is compared.
            wall, _cpu = toolkit_step_time(spec, run, run_dir, args.steps, args.warmup)
            times[side].append(wall)
            if watch:
                watch[1].stop()
                watch[0].stop()
    dist.barrier()
    run.heartbeat = own_beat
    run.close(False)
    if index != 0:
        return
    ratios = [a / b for a, b in zip(times["on"], times["off"], strict=True)]
    report = {
        "on_step_s": statistics.median(times["on"]),
        "off_step_s": statistics.median(times["off"]),
        "ratio_median": statistics.median(ratios),
        "ratios": ratios,
        "setup": {
            "workers": args.workers,
            "steps": args.steps,
            "warmup": args.warmup,
            "rounds": args.rounds,
            "device": "cpu/gloo",
            "torch": torch.__version__,
        },
    }
    path = write_result("watchdog", report)
    print(
        f"heartbeat+watchdog {report['on_step_s'] * 1e3:.1f} ms/step, without "
        f"{report['off_step_s'] * 1e3:.1f} ms/step: ratio {report['ratio_median']:.3f} "
        f"(target <= 1.01; rounds {', '.join(f'{x:.3f}' for x in ratios)})"
    )
    print(f"wrote {path}")


def main() -> None:
    run_workers(worker, __doc__, steps=40)


if __name__ == "__main__":
    main()
