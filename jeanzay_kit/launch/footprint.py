"""What a job adds to the filesystem: files (inodes) and bytes, before it runs.

Jean Zay counts inodes and bytes per project on $WORK (docs/operate.md); a sweep of small
runs can run out of inodes before it runs out of space. Pure: the numbers come from the
validated job and what `jzk validate` measured (snapshot files, a checkpoint's bytes).
"""

from __future__ import annotations

from dataclasses import dataclass

from jeanzay_kit.config.sections import WRITER_THREADS_MAX
from jeanzay_kit.values import human_bytes

# A checkpoint (ckpt/checkpointer.py): per rank a DCP shard per writer thread and
# its rank-<r>.pt; once: DCP's .metadata, trainer.pt, config.json, manifest.json.
CHECKPOINT_SHARED_FILES = 4
# The run directory besides checkpoints: metrics.jsonl, lease.json, outcome.json,
# result.json, model_final.pt/.sha256, train.log, trackers.json, provenance/ (~6 files)
# and heartbeat/rank-<r>.json per rank.
RUN_FILES = 14


@dataclass(frozen=True)
class Footprint:
    runs: int  # run directories (array tasks or sweep points)
    ranks: int  # training processes of one run
    keep_last: int
    snapshot_files: int  # 0: no snapshot (local runs)
    checkpoint_bytes: int | None  # one checkpoint, when known (an existing one)
    params: int | None = None  # the model's parameter count, when counted (--sizes)
    optimizer_states: int = 2  # tensors per parameter the optimizer keeps (AdamW: 2)
    writer_threads: int = WRITER_THREADS_MAX  # checkpoint.writer_threads, or the most

    @property
    def checkpoint_files(self) -> int:
        """The most files one checkpoint holds."""
        return self.ranks * (self.writer_threads + 1) + CHECKPOINT_SHARED_FILES

    @property
    def run_files(self) -> int:
        return RUN_FILES + self.ranks + self.keep_last * self.checkpoint_files

    @property
    def total_files(self) -> int:
        # Two log files per run (.out, .err; requeues append to them), one snapshot.
        return self.runs * (self.run_files + 2) + self.snapshot_files

    @property
    def estimated_checkpoint_bytes(self) -> int | None:
        """Measured, else fp32 weights and optimizer states of the counted parameters."""
        if self.checkpoint_bytes is not None:
            return self.checkpoint_bytes
        if self.params is None:
            return None
        return self.params * 4 * (1 + self.optimizer_states)


def describe(fp: Footprint) -> list[str]:
    """`jzk validate`'s lines on what the job writes."""
    each = fp.estimated_checkpoint_bytes
    how = (
        "measured on the run's newest checkpoint"
        if fp.checkpoint_bytes is not None
        else "fp32 weights + optimizer states"
    )
    size = (
        f"{human_bytes(each)} each ({how}), {human_bytes(each * fp.keep_last * fp.runs)} kept"
        if each is not None
        else "bytes: after the first save (`du -sh <run_dir>/checkpoints`), or `--sizes`"
    )
    runs = f" x {fp.runs} runs" if fp.runs > 1 else ""
    lines = [
        f"writes          at most {fp.total_files:,} files{runs}: checkpoints "
        f"{fp.keep_last} kept x {fp.checkpoint_files} files ({fp.ranks} rank(s) x up to "
        f"{fp.writer_threads + 1} + {CHECKPOINT_SHARED_FILES}), ~{RUN_FILES + fp.ranks} "
        "other files per run dir, 2 logs per run"
        + (f", snapshot {fp.snapshot_files} files once" if fp.snapshot_files else ""),
        f"checkpoints     {size}",
    ]
    return lines
