"""What torch's flight recorder costs per collective, flight recorder on against off.

    .venv/bin/python bench/bench_flight_recorder.py [--calls 400] [--rounds 6] [--size-kb 1024]

The recorder is one buffer per process, switched on by TORCH_FR_BUFFER_SIZE when the first
collective runs, so it cannot be toggled inside one process: each round starts two fresh
2-rank gloo worlds, one with TORCH_FR_BUFFER_SIZE=2000 (what the workers set when the
watchdog is on) and one with 0, alternating which goes first, and times the same
all-reduces in each. Reported: the median per-call ratio and the added microseconds per
collective, to set against a step's collectives (DDP: one per gradient bucket). Results
are printed and written to bench/results/flight_recorder.json.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from common import write_result  # noqa: E402

from jeanzay_kit.node.local import free_port  # noqa: E402


def world(rank: int, port: int, buffer: str, calls: int, numel: int, out) -> None:  # noqa: ANN001
    os.environ["TORCH_FR_BUFFER_SIZE"] = buffer
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    tensor = torch.ones(numel)
    for _ in range(20):
        dist.all_reduce(tensor)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(calls):
        dist.all_reduce(tensor)
    elapsed = (time.perf_counter() - start) / calls
    dist.destroy_process_group()
    if rank == 0:
        out.put(elapsed)


def timed(buffer: str, calls: int, numel: int) -> float:
    """Seconds per all-reduce in a fresh 2-rank world."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    procs = [
        ctx.Process(target=world, args=(r, port, buffer, calls, numel, queue)) for r in range(2)
    ]
    for proc in procs:
        proc.start()
    result = queue.get(timeout=600)
    for proc in procs:
        proc.join()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--size-kb", type=int, default=1024)
    args = parser.parse_args()
    numel = args.size_kb * 1024 // 4
    times: dict[str, list[float]] = {"on": [], "off": []}
    for r in range(args.rounds):
        for side in ("on", "off") if r % 2 == 0 else ("off", "on"):
            times[side].append(timed("2000" if side == "on" else "0", args.calls, numel))
    ratios = [a / b for a, b in zip(times["on"], times["off"], strict=True)]
    added = [a - b for a, b in zip(times["on"], times["off"], strict=True)]
    report = {
        "on_call_us": statistics.median(times["on"]) * 1e6,
        "off_call_us": statistics.median(times["off"]) * 1e6,
        "ratio_median": statistics.median(ratios),
        "added_us_median": statistics.median(added) * 1e6,
        "ratios": ratios,
        "setup": {
            "calls": args.calls,
            "rounds": args.rounds,
            "size_kb": args.size_kb,
            "device": "cpu/gloo, 2 ranks",
            "torch": torch.__version__,
        },
    }
    path = write_result("flight_recorder", report)
    print(
        f"all-reduce of {args.size_kb} KiB: {report['on_call_us']:.0f} us with the flight "
        f"recorder, {report['off_call_us']:.0f} us without: ratio {report['ratio_median']:.3f}, "
        f"{report['added_us_median']:+.1f} us per collective (rounds "
        f"{', '.join(f'{x:.3f}' for x in ratios)})"
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
