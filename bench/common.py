"""What the benchmark scripts share: where results go, and how a train.py start is timed.

Every script writes its raw figures to bench/results/<name>.json; bench/run.py reads
them back, takes ratios and spreads, and writes bench/results.json and the tables of
docs/performance.md.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
# The GPT-2 small shape of the GPU benchmarks (the vocabulary padded to 50304).
GPT2_SHAPE = {"block": 1024, "layers": 12, "width": 768, "heads": 12, "vocab": 50304}


def gpt_overrides(shape: dict[str, int]) -> list[str]:
    """train.py overrides of model=gpt in a shape of GPT2_SHAPE's keys."""
    return [
        "model=gpt",
        f"data.block_size={shape['block']}",
        f"model.n_layer={shape['layers']}",
        f"model.n_embd={shape['width']}",
        f"model.n_head={shape['heads']}",
        f"model.vocab_size={shape['vocab']}",
    ]


RESULTS = REPO / "bench" / "results"


def write_result(name: str, report: dict[str, Any]) -> Path:
    """bench/results/<name>.json, replaced whole (an earlier run's figures never mix in)."""
    path = RESULTS / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")
    return path


def logged_steps(metrics: Path) -> list[int]:
    """The steps metrics.jsonl holds (a file being written may end in half a line)."""
    steps = []
    try:
        lines = metrics.read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if "step" in record and "loss" in record:
            steps.append(int(record["step"]))
    return steps


def time_to_marker(argv: list[str], done, cwd: Path = REPO, timeout: float = 300) -> float:
    """Seconds from starting argv until done() is true; the process is then stopped."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    elapsed = None
    while time.perf_counter() - t0 < timeout:
        if done():
            elapsed = time.perf_counter() - t0
            break
        if proc.poll() is not None:
            break
        time.sleep(0.005)
    proc.terminate()
    _, err = proc.communicate(timeout=60)
    if elapsed is None:
        raise RuntimeError(f"{argv[:3]}... ended before its first step: {err.decode()[-1500:]}")
    return elapsed


def train_py(*overrides: str) -> list[str]:
    return [sys.executable, str(REPO / "train.py"), *overrides]


def pin_rank(index: int, ranks: int) -> bool:
    """Pin rank `index` to a core of its own when the machine has one per rank: a rank the
    scheduler moves between cores refills its caches, which moves CPU time per step by a
    few percent from round to round (measured: bench/bench_runtime.py, docs/performance.md)."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < ranks:
        return False
    os.sched_setaffinity(0, {cores[index]})
    return True


def median_ci(values: list[float], level: float = 0.95, draws: int = 4000) -> list[float]:
    """A bootstrap percentile interval of the median over rounds (stdlib only, seeded: the
    same rounds give the same interval)."""
    rng = random.Random(0)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(draws))
    tail = (1 - level) / 2
    return [medians[int(tail * draws)], medians[min(draws - 1, int((1 - tail) * draws))]]


def paired(ours: list[float], theirs: list[float]) -> dict[str, Any]:
    """Ratios of interleaved rounds (ours / theirs, round by round), their median and its
    95 % interval: an overhead is told from noise when the interval excludes 1, and it is
    measured to 1 % when the interval is no wider than 0.02."""
    ratios = [a / b for a, b in zip(ours, theirs, strict=True)]
    low, high = median_ci(ratios)
    return {
        "ratio_median": statistics.median(ratios),
        "ratio_ci": [low, high],
        "ratio_ci_half_width": (high - low) / 2,
        "ratios": ratios,
    }


class Lockstep:
    """Two loops interleaved step by step in the same processes. `switch()`, called where
    the loop under test starts a step, first runs one step of the baseline; each side's
    step then costs the wall and CPU time between two switches.

    Why: on this 2-core VM a step's CPU time drifts slowly (measured: its autocorrelation
    is still 0.3 thirty steps apart), so two loops timed one after the other, even in
    alternating rounds, differ by 3 to 5 % per round from the drift alone. Adjacent steps
    see the same drift, which cancels in the ratio of their sums: 0.7 % per round of 45
    pairs for two copies of one model (docs/performance.md)."""

    def __init__(self, baseline_step: Callable[[], object]) -> None:
        self.baseline_step = baseline_step
        self.ours: list[tuple[float, float]] = []  # (wall s, CPU s) of each complete step
        self.theirs: list[tuple[float, float]] = []
        self._since: tuple[float, float] | None = None

    def switch(self) -> None:
        wall, cpu = time.perf_counter(), time.process_time()
        if self._since is not None:
            self.ours.append((wall - self._since[0], cpu - self._since[1]))
        self.baseline_step()
        after = time.perf_counter(), time.process_time()
        self.theirs.append((after[0] - wall, after[1] - cpu))
        self._since = after

    def means(self, warmup: int) -> tuple[tuple[float, float], tuple[float, float]]:
        """(ours, theirs): each side's mean (wall, CPU) per step over the pairs after
        `warmup`, a pair being the loop under test's step and the baseline step just
        before it."""
        pairs = list(zip(self.theirs[: len(self.ours)], self.ours, strict=True))[warmup:]
        if not pairs:
            raise RuntimeError(f"no step after the {warmup} warm-up steps was timed")

        def mean(side: int, what: int) -> float:
            return sum(p[side][what] for p in pairs) / len(pairs)

        return (mean(1, 0), mean(1, 1)), (mean(0, 0), mean(0, 1))
