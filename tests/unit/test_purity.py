"""Pure modules import neither torch nor submitit, read no environment, run no process."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "jeanzay_kit"
PURE = [
    "errors.py",
    "run_layout.py",
    "config/clusters.py",
    "config/spec.py",
    "config/schema.py",
    "config/sections.py",
    "config/collector.py",
    "config/resource_rules.py",
    "config/layout_rules.py",
    "config/run_rules.py",
    "config/data_rules.py",
    "config/identity.py",
    "config/entry.py",
    "config/command_line.py",
    "config/runtime_settings.py",
    "slurm_syntax/hostlist.py",
    "slurm_syntax/timefmt.py",
    "slurm_syntax/queries.py",
    "slurm/hostlist.py",
    "distributed/layout.py",
    "slurm/sbatch.py",
    "distributed/ranks.py",
    "runtime/sampler.py",
    "train/stream_rules.py",
    "distributed/script_env.py",
    "runtime/session_rules.py",
    "runtime/lease_rules.py",
    "node/script_rules.py",
    "node/signal_rules.py",
    "node/script_watch_rules.py",
    "runtime/stall.py",
    "runtime/progress.py",
    "runtime/peaks.py",
    "config/micro_batch_rules.py",
    "analysis/summary.py",
    "doctor/table.py",
    "config/data_paths.py",
    "ckpt/layout.py",
    "ckpt/checksum.py",
    "launch/arrays.py",
    "launch/status.py",
    "slurm/discover.py",
    "slurm/flags.py",
    "slurm/test_only.py",
    "torch_version.py",
    "project/skeleton.py",
]
FORBIDDEN_MODULES = {
    "torch",
    "submitit",
    "subprocess",
    "os",
    "hydra",
    "omegaconf",
    "socket",
    "shutil",
    "pathlib",
}
FORBIDDEN_CALLS = {"open", "exec", "eval", "input"}


def _imports(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("relpath", PURE)
def test_pure_module_stays_pure(relpath: str) -> None:
    tree = ast.parse((PACKAGE / relpath).read_text())
    bad_imports = _imports(tree) & FORBIDDEN_MODULES
    assert not bad_imports, f"{relpath} imports {sorted(bad_imports)}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in {"environ", "getenv", "system"}:
            pytest.fail(f"{relpath}:{node.lineno} touches {node.attr}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            assert node.func.id not in FORBIDDEN_CALLS, (
                f"{relpath}:{node.lineno} calls {node.func.id}"
            )


def test_the_checker_would_catch_an_impure_module(tmp_path: Path) -> None:
    tree = ast.parse("import os\nfrom torch import nn\nx = os.environ['A']\n")
    assert _imports(tree) & FORBIDDEN_MODULES == {"os", "torch"}


def strict_mypy(*paths: str) -> subprocess.CompletedProcess[str]:
    """mypy --strict over the given files only (what they import is read, not judged)."""
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent", *paths],
        cwd=PACKAGE.parent,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.timeout(300)
def test_the_pure_core_type_checks_strictly() -> None:
    done = strict_mypy(*(f"jeanzay_kit/{relpath}" for relpath in PURE))
    assert done.returncode == 0, done.stdout[-4000:]


@pytest.mark.timeout(300)
def test_strict_mode_would_catch_an_untyped_function(tmp_path: Path) -> None:
    loose = tmp_path / "loose.py"
    loose.write_text("def double(x):\n    return 2 * x\n")
    done = strict_mypy(str(loose))
    assert done.returncode == 1 and "no-untyped-def" in done.stdout, done.stdout
