"""jeanzay_kit: from a laptop to a multi-node Slurm GPU cluster, and through preemptions.

The library face: `from jeanzay_kit import session` (or `Session`, the same class) for a
training loop of your own (docs/your-own-loop.md), and the contracts your model, data
and loss meet when the toolkit's loop trains them (docs/your-model-and-data.md).
Importing the package does not import torch: these names load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from jeanzay_kit.version import __version__

if TYPE_CHECKING:  # what an editor and a type checker see: the real signatures
    from jeanzay_kit.config.runtime_settings import RuntimeSettings
    from jeanzay_kit.contracts import (
        Criterion,
        LossOutput,
        MapDataset,
        ModelWithLoss,
        PipelineSplittable,
    )
    from jeanzay_kit.runtime.session import PlanSampler, Session, SessionCheckpointer

    session = Session

# name -> the module that defines it, imported when the name is first used (PEP 562).
_LAZY = {
    "Session": "jeanzay_kit.runtime.session",
    "session": "jeanzay_kit.runtime.session",
    "PlanSampler": "jeanzay_kit.runtime.session",
    "SessionCheckpointer": "jeanzay_kit.runtime.session",
    "RuntimeSettings": "jeanzay_kit.config.runtime_settings",
    "MapDataset": "jeanzay_kit.contracts",
    "Criterion": "jeanzay_kit.contracts",
    "ModelWithLoss": "jeanzay_kit.contracts",
    "LossOutput": "jeanzay_kit.contracts",
    "PipelineSplittable": "jeanzay_kit.contracts",
}

__all__ = [
    "__version__",
    "Session",
    "session",
    "PlanSampler",
    "SessionCheckpointer",
    "RuntimeSettings",
    "MapDataset",
    "Criterion",
    "ModelWithLoss",
    "LossOutput",
    "PipelineSplittable",
]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'jeanzay_kit' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value  # once: the next use is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
