"""Which torch releases jeanzay_kit runs on, and a clear refusal of an older one.

MIN_TORCH is the oldest release with every torch API the code uses (docs/sites.md says how
it was found): torch.distributed.checkpoint.staging's DefaultStager and StagingOptions
(ckpt/checkpointer.py) came with torch 2.9; everything else is older (fully_shard public
in torch.distributed.fsdp since 2.6, torch.distributed.tensor.DTensor since 2.5). The
upper bound in pyproject.toml (MAX_TORCH, exclusive) is the first minor release the
suite has not passed on: ckpt/raw_storage.py uses private helpers of DCP's filesystem
writer. A newer torch is said at start, not refused (it may work); it is most often one a
`pip install` of another package pulled in, and `jzk doctor` says how to go back.
tests/unit/test_torch_version.py keeps these constants equal to pyproject.toml's range.
"""

from __future__ import annotations

import re

MIN_TORCH = (2, 9)
MAX_TORCH = (2, 14)  # exclusive: pyproject.toml's `torch<2.14`
TESTED_TORCH = "2.13.0"  # constraints.txt: what scripts/setup.sh and CI install
# How to go back to the tested torch: the checkout's constraints file pins it (what
# scripts/setup.sh installs; rerunning setup.sh does not, it skips pip while pyproject.toml
# and constraints.txt are unchanged); a venv over a site's PyTorch module shows the
# module's again once its own copy is gone.
REINSTALL = f"pip install -c constraints.txt 'torch=={TESTED_TORCH}'"
GO_BACK = (
    f"{REINSTALL} in the jeanzay_kit checkout; in a venv made with --system-site-packages "
    "over a site's PyTorch module, `pip uninstall torch` removes the venv's copy and the "
    "module's shows again"
)


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


def _dotted(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version))


def supported_range() -> str:
    """`torch>=2.9,<2.14`, as pyproject.toml states it."""
    return f"torch>={_dotted(MIN_TORCH)},<{_dotted(MAX_TORCH)}"


def torch_too_new(version: str) -> str | None:
    """The start's one-line warning when `version` is past the tested range, else None
    (an older one is torch_too_old's refusal)."""
    if parse_version(version)[:2] < MAX_TORCH:
        return None
    return (
        f"torch {version} is installed, outside the range jeanzay_kit was tested with "
        f"({supported_range()}; tested {TESTED_TORCH}): a `pip install` of another package "
        f"may have replaced it. HINT: `jzk doctor` says how to go back ({REINSTALL} ...)"
    )


def torch_range_line(version: str) -> str:
    """`jzk doctor`'s line on the installed torch against the range; outside it, how to
    go back."""
    found = parse_version(version)[:2]
    where = f"torch {version}: {{}} the range jeanzay_kit was tested with ({supported_range()}"
    if MIN_TORCH <= found < MAX_TORCH:
        return where.format("within") + f"; tested {TESTED_TORCH})"
    side = "newer than" if found >= MAX_TORCH else "older than"
    return (
        where.format(side) + f"; tested {TESTED_TORCH}). "
        f"HINT: go back to the tested release: {GO_BACK}"
    )
