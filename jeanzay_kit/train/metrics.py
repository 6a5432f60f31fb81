"""Training metrics on rank 0: a progress line on stdout and `<run_dir>/metrics.jsonl`."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, TextIO

# Dense peak throughput per GPU (TFLOP/s) for MFU, from NVIDIA's data sheets:
# H100 SXM 989 (bf16), A100 312 (bf16), V100 125 (fp16 tensor cores).
PEAK_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "V100": 125.0}


def peak_flops(device_name: str) -> float | None:
    for key, tflops in PEAK_TFLOPS.items():
        if key in device_name.upper():
            return tflops * 1e12
    return None


class MetricsWriter:
    """Writes one JSON object per logged step; only the main rank writes."""

    def __init__(
        self,
        run_dir: Path,
        enabled: bool,
        total_steps: int,
        stream: TextIO | None = None,
        resume_step: int = 0,
    ):
        self.enabled = enabled
        self.total_steps = total_steps
        self.stream = stream or sys.stdout
        self.path = run_dir / "metrics.jsonl"
        self._file = None
        if enabled:
            run_dir.mkdir(parents=True, exist_ok=True)
            # A fresh run starts a fresh file. A resumed one keeps the records up to the
            # checkpoint and drops any logged after it (they will be logged again).
            kept = []
            if resume_step and self.path.exists():
                for line in self.path.read_text().splitlines():
                    try:
                        if json.loads(line)["step"] <= resume_step:
                            kept.append(line + "\n")
                    except (ValueError, KeyError):
                        continue
            self._file = self.path.open("w", buffering=1)
            self._file.writelines(kept)

    def log(self, record: dict[str, Any]) -> None:
        if not self.enabled or self._file is None:
            return
        self._file.write(json.dumps(record) + "\n")
        parts = [f"step {record['step']}/{self.total_steps}"]
        for key, fmt in (
            ("loss", "loss {:.4f}"),
            ("eval_loss", "eval {:.4f}"),
            ("lr", "lr {:.2e}"),
            ("step_time_s", "{:.3f} s/step"),
            ("samples_per_s", "{:.0f} samples/s"),
            ("tokens_per_s", "{:.0f} tok/s"),
            ("mfu", "MFU {:.1%}"),
        ):
            if record.get(key) is not None:
                parts.append(fmt.format(record[key]))
        print(" | ".join(parts), file=self.stream, flush=True)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
