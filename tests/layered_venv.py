"""A venv layered on the running one: its own site-packages first, then this
environment's (a .pth file), with only the given packages installed in it. What a user
does to keep a package whose pins clash with the training environment apart (docs/tuning.md:
hydra-optuna-sweeper wants optuna<3); used by tests/conftest.py and bench/bench_tune.py."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from collections.abc import Sequence
from pathlib import Path


def layered_venv(root: Path, packages: Sequence[str]) -> str:
    """The interpreter of the venv at `root` (created), with `packages` installed."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    python = root / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    ours = sysconfig.get_path("purelib")
    (Path(site) / "zz-jeanzay-kit-env.pth").write_text(f"import site; site.addsitedir({ours!r})\n")
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", *packages],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if installed.returncode != 0:
        raise RuntimeError(f"pip install {' '.join(packages)}: {installed.stderr[-3000:]}")
    return str(python)
