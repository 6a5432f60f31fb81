"""The parallel layout of a job as a value (like torchtitan's ParallelDims). Pure.

How many processes, how many of them per pipeline, how many data-parallel replicas, and
the pipeline's schedule: decided and checked by config/spec.py, used by the process group
(distributed/process_group.py) and the strategies, testable without a process group.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ParallelLayout:
    """Parallel sizes as a value: testable without a process group."""

    mode: str
    launcher: str
    world_size: int  # processes in the job
    pp_size: int  # ranks per pipeline (1 without pipeline)
    dp_size: int  # data-parallel replicas (world_size / pp_size; 1 for dataparallel)
    microbatches: int
    schedule: str
    stages_per_rank: int

    @property
    def pipeline_enabled(self) -> bool:
        return self.pp_size > 1

    @property
    def dp_enabled(self) -> bool:
        return self.dp_size > 1

    def checkpoint_world(self) -> dict[str, object]:
        """What a checkpoint records of this layout; a resume compares it
        (ckpt/layout.py `world_change`)."""
        return {
            "mode": self.mode,
            "world_size": self.world_size,
            "pp_size": self.pp_size,
            "dp_size": self.dp_size,
            "stages_per_rank": self.stages_per_rank if self.schedule == "interleaved_1f1b" else 1,
        }
