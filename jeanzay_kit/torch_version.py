"""Which torch releases jeanzay_kit runs on, and a clear refusal of an older one.

MIN_TORCH is the oldest release with every torch API the code uses (docs/sites.md says how
it was found): torch.distributed.checkpoint.staging's DefaultStager and StagingOptions
(ckpt/checkpointer.py) came with torch 2.9; everything else is older (fully_shard public
in torch.distributed.fsdp since 2.6, torch.distributed.tensor.DTensor since 2.5). The
upper bound in pyproject.toml is the newest minor release the suite has passed on:
ckpt/raw_storage.py uses private helpers of DCP's filesystem writer.
"""

from __future__ import annotations

import re

MIN_TORCH = (2, 9)
TESTED_TORCH = "2.13.0"  # constraints.txt: what scripts/setup.sh and CI install


def parse_version(text: str) -> tuple[int, ...]:
    """(2, 9, 1) from "2.9.1", "2.9.1+cu128", "2.10.0a0+git1234"."""
    found = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", text.strip())
    if not found:
        raise ValueError(f"not a torch version: {text!r}")
    return tuple(int(p) for p in found.groups() if p is not None)


def torch_too_old(version: str, where: str = "") -> str | None:
    """The refusal message when `version` is older than MIN_TORCH, else None."""
    if parse_version(version)[:2] >= MIN_TORCH:
        return None
    need = ".".join(map(str, MIN_TORCH))
    return (
        f"torch {version} is installed{f' ({where})' if where else ''}, and jeanzay_kit needs "
        f"torch >= {need} (the oldest release with the checkpoint staging API it uses). "
        f"HINT: load a newer PyTorch module (Jean Zay: `module avail pytorch-gpu`), or "
        f"install one: pip install 'torch>={need}' (tested: {TESTED_TORCH})"
    )
