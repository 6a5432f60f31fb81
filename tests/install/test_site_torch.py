"""Installing beside a site's own torch (Jean Zay: `module load pytorch-gpu/py3/...`).

The site's torch stands on the interpreter's path (as a module puts it there), here a
distribution record of torch 2.11.0+cu128 on PYTHONPATH; the user makes a virtual
environment that sees it (--system-site-packages) and runs `pip install -e .`. pip must
keep the site's build: the package states a range, the exact pin lives in constraints.txt.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SITE_TORCH = "2.11.0+cu128"


def site_torch(tmp_path: Path, version: str) -> Path:
    site = tmp_path / "site"
    info = site / f"torch-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n")
    return site


def pip_install(venv: Path, site: Path, *extra: str) -> list[str]:
    """Run pip in the venv with the site's torch on the path; return what it installed."""
    report = venv.parent / f"report-{len(extra)}.json"
    env = dict(os.environ, PYTHONPATH=str(site), PIP_DISABLE_PIP_VERSION_CHECK="1")
    done = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "-q",
            "--report",
            str(report),
            *extra,
            "-e",
            str(REPO),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return [i["metadata"]["name"].lower() for i in json.loads(report.read_text())["install"]]


@pytest.mark.timeout(900)
def test_pip_install_keeps_the_site_torch(tmp_path: Path) -> None:
    site = site_torch(tmp_path, SITE_TORCH)
    venv = tmp_path / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=120
    )
    # What the CI pin would do to it: replace the site's build (this is why the pin is not
    # in the package's requirements).
    pinned = pip_install(venv, site, "--dry-run", "-c", str(REPO / "constraints.txt"))
    assert "torch" in pinned
    installed = pip_install(venv, site)
    assert "jeanzay-kit" in installed or "jeanzay_kit" in installed
    assert "torch" not in installed, installed
    # torch itself, not its neighbours (torchmetrics is a dependency of ours).
    packages = venv / "lib"
    assert not list(packages.glob("python*/site-packages/torch")), installed
    assert not list(packages.glob("python*/site-packages/torch-*.dist-info")), installed


@pytest.mark.timeout(120)
def test_an_older_torch_is_refused_naming_both_versions(tmp_path: Path) -> None:
    site = site_torch(tmp_path, "2.5.1+cu121")
    done = subprocess.run(
        [sys.executable, "train.py", f"hydra.run.dir={tmp_path / 'run'}"],
        cwd=REPO,
        env=dict(os.environ, PYTHONPATH=str(site)),
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert done.returncode == 2
    assert "torch 2.5.1+cu121 is installed" in done.stderr
    assert "jeanzay_kit needs torch >= 2.9" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "run" / "checkpoints").exists()
