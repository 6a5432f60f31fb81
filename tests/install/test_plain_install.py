"""A plain install (no `tune`, `trackers`, `frameworks`, `vision` extra): the core commands
work, and a command that needs an extra says which in one line (exit 2).

The extras' packages are hidden from a subprocess by a sitecustomize on its PYTHONPATH:
Python's path finder is wrapped so that it finds none of them (`import optuna` raises
ModuleNotFoundError, `importlib.util.find_spec("optuna")` is None), as on a machine where
they were never installed. Every core command then runs on a real run directory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jeanzay_kit.extras import EXTRAS

HIDE = """\
import sys
from importlib.machinery import PathFinder

HIDDEN = {hidden!r}


class _WithoutExtras(PathFinder):
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name.partition(".")[0] in HIDDEN:
            return None
        return PathFinder.find_spec(name, path, target)


sys.meta_path[:] = [_WithoutExtras if f is PathFinder else f for f in sys.meta_path]
"""
# Every extra's modules, and what they pull in that a plain install lacks too.
HIDDEN = sorted({*EXTRAS, "pytorch_lightning", "lightning_fabric", "mlflow_skinny"})


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    site = tmp_path_factory.mktemp("plain-site")
    (site / "sitecustomize.py").write_text(HIDE.format(hidden=HIDDEN))
    bin_dir = tmp_path_factory.mktemp("plain-bin")
    (bin_dir / "sbatch").write_text("#!/bin/sh\necho 4242\n")  # `jzk submit` needs its id only
    (bin_dir / "sbatch").chmod(0o755)
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p),
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
    }


def jzk(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jeanzay_kit.cli", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_extras_are_hidden(plain: dict[str, str], tmp_path: Path) -> None:
    code = "import importlib.util as u; print([m for m in {!r} if u.find_spec(m)])"
    done = subprocess.run(
        [sys.executable, "-c", code.format(HIDDEN)], env=plain, capture_output=True, text=True
    )
    assert done.stdout.strip() == "[]", done.stderr


@pytest.mark.timeout(600)
def test_core_commands_work_without_the_extras(plain: dict[str, str], tmp_path: Path) -> None:
    run = tmp_path / "run"
    trained = jzk(plain, tmp_path, "train", "train.steps=4", f"job.run_dir={run}")
    assert trained.returncode == 0, trained.stderr[-3000:]
    submitted = tmp_path / "submitted"
    commands: list[tuple[str, ...]] = [
        ("status", str(run)),
        ("status", "--json", str(run)),
        ("logs", str(run)),
        ("logs", "--rank", "0", str(run)),
        ("report", str(run)),
        ("validate",),
        ("ckpt", "list", str(run)),
        ("submit", "cluster=slurm_local", f"job.run_dir={submitted}"),
    ]
    for args in commands:
        done = jzk(plain, tmp_path, *args)
        assert done.returncode == 0, (args, done.stderr[-3000:])
        assert "Traceback" not in done.stderr, (args, done.stderr[-3000:])
    shown = json.loads(jzk(plain, tmp_path, "status", "--json", str(run)).stdout)
    assert (shown["state"], shown["step"]) == ("COMPLETED", 4)
    assert json.loads((submitted / "manifest.jsonl").read_text())["job_id"] == "4242"


@pytest.mark.parametrize(
    ("args", "needed_by"),
    [
        (("tune",), "jzk tune"),
        (("status", "{study}"), "jzk status of a study"),
        (("report", "{study}"), "jzk report of a study"),
    ],
)
def test_a_command_that_needs_an_extra_names_it(
    plain: dict[str, str], tmp_path: Path, args: tuple[str, ...], needed_by: str
) -> None:
    study = tmp_path / "study"
    study.mkdir()
    (study / "study.journal").write_text("")
    done = jzk(plain, tmp_path, *(a.format(study=study) for a in args))
    assert done.returncode == 2, done.stderr[-3000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert needed_by in lines[0]
    assert "needs optuna" in lines[0]
    assert "pip install 'jeanzay_kit[tune]'" in lines[0]


def test_a_study_s_trial_logs_need_no_extra(plain: dict[str, str], tmp_path: Path) -> None:
    study = tmp_path / "study"
    (study / "logs").mkdir(parents=True)
    (study / "study.journal").write_text("")
    (study / "logs" / "trial-0.log").write_text("trial 0 says hello\n")
    done = jzk(plain, tmp_path, "logs", str(study))
    assert done.returncode == 0, done.stderr
    assert done.stdout == "trial 0 says hello\n"


def test_a_dataset_of_a_missing_extra_names_the_extra(
    plain: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "images" / "cat").mkdir(parents=True)
    done = jzk(plain, tmp_path, "check", "data=image_folder", "model=image_cnn", "data.root=images")
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stderr.strip().splitlines() == [
        "jzk check: error: data._target_=torchvision.datasets.ImageFolder: could not build the "
        "dataset: Are you sure that module 'torchvision' is installed?. HINT: pip install "
        "'jeanzay_kit[vision]'"
    ]
