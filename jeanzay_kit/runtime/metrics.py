"""Training metrics on rank 0: progress on stdout and `<run_dir>/metrics.jsonl`.

In a Slurm log (not a terminal) a plain line every train.log_every steps, with the ETA
and the time left in the allocation; on a terminal a live tqdm bar, with the same lines
written above it.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from jeanzay_kit.durable_io import read_json_lines
from jeanzay_kit.rundir.progress import (
    format_duration,
    input_bound,
    input_bound_note,
    is_eval_metric,
    outlook,
    requeue_note,
)
from jeanzay_kit.rundir.run_directory import RunDir

# metrics.jsonl keys -> TensorBoard tags, grouped so the train/eval losses share a panel.
BOARD_TAGS = {"loss": "loss/train", "eval_loss": "loss/eval"}


def board_tag(key: str) -> str:
    """The TensorBoard tag of a metrics.jsonl key: eval metrics in an eval/ panel."""
    if key in BOARD_TAGS:
        return BOARD_TAGS[key]
    return f"eval/{key[5:]}" if is_eval_metric(key) else key


# One JSON object per logged step, in the run directory: written here, read by
# read_records (run_result.py, `jzk report`, `jzk status`).


def read_records(path: Path) -> list[dict[str, Any]]:
    """metrics.jsonl's records; a missing file is a run that has not logged yet, and a
    line being written (or cut by a crash) is skipped."""
    return read_json_lines(path)


class MetricsWriter:
    """Writes one JSON object per logged step; only the main rank writes."""

    def __init__(
        self,
        run_dir: RunDir,
        enabled: bool,
        total_steps: int,
        *,
        stream: TextIO | None = None,
        resume_step: int = 0,
        end_time: float | None = None,
        allocation_s: float | None = None,
        lead_s: float = 0.0,
        tensorboard: bool = False,
        loader: str = "",
        trackers: Any = None,
        tracker_params: dict[str, Any] | None = None,
    ):
        """end_time: when the Slurm allocation ends (epoch seconds, read once at start);
        allocation_s and lead_s: resources.time and preemption.lead_seconds in seconds;
        tensorboard: also write event files to <run_dir>/tensorboard (metrics.tensorboard);
        loader: what the data is loaded with, for the input-bound note; trackers: the
        run's W&B/MLflow (runtime/trackers.py TrackerOptions) and tracker_params the config
        and identity they record."""
        self.enabled = enabled
        self.total_steps = total_steps
        self.stream = stream or sys.stdout
        self.path = run_dir.metrics
        self.end_time, self.allocation_s, self.lead_s = end_time, allocation_s, lead_s
        self._noted_requeues = False
        self.loader = loader
        self._wait_shares: list[float] = []  # data_wait_share of each logged window
        self._waits: list[float] = []  # data_wait_s (per step) of each logged window
        self._noted_input_bound = False
        self._file: TextIO | None = None
        self._bar: Any = None
        self._board: Any = None
        self._trackers: Any = None
        if enabled:
            self._open(run_dir, resume_step, tensorboard, trackers, tracker_params or {})
            if getattr(self.stream, "isatty", lambda: False)():
                from tqdm import tqdm

                self._bar = tqdm(
                    total=total_steps, initial=resume_step, file=self.stream, unit="step"
                )

    def _open(
        self,
        run_dir: RunDir,
        resume_step: int,
        tensorboard: bool,
        trackers: Any,
        tracker_params: dict[str, Any],
    ) -> None:
        run_dir.root.mkdir(parents=True, exist_ok=True)
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
        if trackers is not None and trackers.any:
            from jeanzay_kit.runtime.trackers import Trackers

            records = [json.loads(line) for line in kept]
            self._trackers = Trackers(run_dir, trackers, tracker_params or {}, records)
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            # purge_step: after a resume TensorBoard hides what an earlier attempt logged
            # past the checkpoint, as metrics.jsonl drops it above.
            self._board = SummaryWriter(
                str(run_dir.tensorboard),
                purge_step=resume_step + 1 if resume_step else None,
            )

    def advance(self, step: int) -> None:
        """After each optimizer step (rank 0): moves the live bar; nothing in a log file."""
        if self._bar is not None:
            self._bar.update(step - self._bar.n)

    def log(self, record: dict[str, Any], judge_input: bool = True, eta: bool = True) -> None:
        """One logged window. judge_input=False for a window the input-bound verdict must
        not count (an attempt's first, which holds the loader workers' start); eta=False
        for a window whose step time says nothing of the next steps (torch.compile's
        first step alone)."""
        if not self.enabled or self._file is None:
            return
        view = outlook(
            record["step"],
            self.total_steps,
            record["step_time_s"],
            self.end_time - time.time() if self.end_time else None,
            self.allocation_s,
            self.lead_s,
        )
        record = {**record, "eta_s": view.eta_s if eta else None}
        self._file.write(json.dumps(record) + "\n")
        if self._board is not None:
            for key, value in record.items():
                if key != "step" and isinstance(value, (int, float)):
                    self._board.add_scalar(board_tag(key), value, record["step"])
        if self._trackers is not None:
            self._trackers.log(record)
        parts = [f"step {record['step']}/{self.total_steps}"]
        for key, fmt in (
            ("loss", "loss {:.4f}"),
            ("eval_loss", "eval {:.4f}"),
            ("lr", "lr {:.2e}"),
            ("step_time_s", "{:.3f} s/step"),
            ("samples_per_s", "{:.0f} samples/s"),
            ("tokens_per_s", "{:.0f} tok/s"),
            ("mfu", "MFU {:.1%}"),
            ("data_wait_share", "data {:.0%}"),
        ):
            if record.get(key) is not None:
                parts.append(fmt.format(record[key]))
            if key == "eval_loss":  # eval.metrics next to the eval loss: "accuracy 0.912"
                parts.extend(f"{k[5:]} {v:.4g}" for k, v in record.items() if is_eval_metric(k))
        parts.append(f"ETA {format_duration(view.eta_s)}" if eta else "ETA from the next step")
        if view.left_s is not None:
            parts.append(f"{format_duration(view.left_s)} left in the allocation")
        self._print(" | ".join(parts))
        if judge_input:
            self._judge_input(record)
        if eta and view.requeues and not self._noted_requeues:
            self._noted_requeues = True
            remaining = self.total_steps - record["step"]
            self._print(requeue_note(view, remaining, record["step_time_s"]))

    def _judge_input(self, record: dict[str, Any]) -> None:
        share = record.get("data_wait_share")
        if share is None:
            return
        self._wait_shares.append(share)
        self._waits.append(record.get("data_wait_s", 0.0))
        if not self._noted_input_bound and input_bound(self._wait_shares, self._waits):
            self._noted_input_bound = True
            self._print(input_bound_note(self._wait_shares, self.loader))

    def _print(self, line: str) -> None:
        if self._bar is not None:
            self._bar.write(line, file=self.stream)
        else:
            print(line, file=self.stream, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        if self._board is not None:
            self._board.close()
            self._board = None
        if self._trackers is not None:
            self._trackers.close()
            self._trackers = None
        if self._file is not None:
            self._file.close()
            self._file = None
