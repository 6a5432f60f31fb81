"""One real local Slurm cluster (scripts/slurm-local) for the whole test session.

Needs root (daemons, /etc/hosts, device nodes); CI runs as root. Without root, or when
the cluster cannot start, every Slurm test is skipped with the reason (and the daemons'
logs).
"""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.slurm.cluster import SCRIPT


@pytest.fixture(scope="session")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment for Slurm client commands (SLURM_CONF set)."""
    if os.geteuid() != 0:
        pytest.skip("the local Slurm cluster needs root (slurmd, /etc/hosts, mknod)")
    state = tmp_path_factory.mktemp("slurm-local")
    up = subprocess.run(
        # First run on a bare machine: apt installs the daemons and MariaDB (~90 s here).
        [str(SCRIPT), "up", str(state)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if up.returncode != 0:
        logs = "\n".join(p.read_text()[-1500:] for p in (state / "log").glob("*.log"))
        pytest.skip(f"scripts/slurm-local up failed ({up.returncode}): {up.stderr}\n{logs}")
    env = dict(os.environ, SLURM_CONF=str(state / "etc" / "slurm.conf"))
    yield env
    subprocess.run([str(SCRIPT), "down", str(state)], capture_output=True, timeout=60)
