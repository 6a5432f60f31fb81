"""The parallel modes, as data: one registration per mode (parallel.mode). Pure.

Every list of mode names derives from MODE_TABLE: the modes config validation accepts,
the pipelined ones (their model gives `pipeline_chunk`; `loss=output` and eval metrics
are refused), those torch.compile applies to, and those whose micro-batch size `auto`
measures. `strategy` names the class the
toolkit's loop builds (train/components.py build_strategy calls its `from_job`). A new
mode is one Mode here and its strategy class; docs/parallelism.md says when to use it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mode:
    name: str
    strategy: str  # "module:Class" under jeanzay_kit.train.strategies
    pipelined: bool = False  # stages over ranks (the model gives pipeline_chunk)
    compiles: bool = False  # torch.compile wraps the model (train.compile)
    auto_micro: bool = False  # resources' micro_batch_size=auto is measured


MODE_TABLE: tuple[Mode, ...] = (
    Mode("ddp", "ddp:DDPStrategy", compiles=True, auto_micro=True),
    Mode("fsdp", "fsdp:FSDPStrategy", compiles=True),
    Mode("pipeline", "pipeline:PipelineStrategy", pipelined=True),
    Mode("pipeline_ddp", "pipeline:PipelineStrategy", pipelined=True),
    Mode("dataparallel", "dataparallel:DataParallelStrategy", auto_micro=True),
)

BY_NAME = {m.name: m for m in MODE_TABLE}
MODES = tuple(BY_NAME)
PIPELINE_MODES = tuple(m.name for m in MODE_TABLE if m.pipelined)
COMPILE_MODES = tuple(m.name for m in MODE_TABLE if m.compiles)
AUTO_MICRO_MODES = tuple(m.name for m in MODE_TABLE if m.auto_micro)
