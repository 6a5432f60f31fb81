"""The optional extras of the package (pyproject.toml [project.optional-dependencies]) and
the one line a command gives when it needs one that is not installed.

The core commands (train, submit, validate, status, logs, report) import none of these
packages; a command or setting that needs one checks it first with `require`, so a plain
install answers `jzk tune: error: ... needs optuna ...: pip install 'jeanzay_kit[tune]'`
(exit 2), never a traceback. Edge: it asks the import system what is installed.
"""

from __future__ import annotations

import importlib.util

from jeanzay_kit.errors import MissingExtra

# The module a feature imports -> the extra that installs it (tests/unit/test_extras.py
# holds this table to pyproject.toml).
EXTRAS = {
    "optuna": "tune",
    "cmaes": "tune",
    "scipy": "tune",
    "wandb": "trackers",
    "mlflow": "trackers",
    "lightning": "frameworks",
    "transformers": "frameworks",
    "accelerate": "frameworks",
    "torchvision": "vision",
}


def install_hint(module: str) -> str:
    return f"pip install 'jeanzay_kit[{EXTRAS[module]}]'"


def missing_message(module: str, needed_by: str) -> str:
    """One line: what needs which package, and the extra that installs it."""
    return (
        f"{needed_by} needs {module} (the optional extra {EXTRAS[module]!r}), which is not "
        f"installed in this Python. HINT: {install_hint(module)}"
    )


def installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def require(module: str, needed_by: str) -> None:
    """MissingExtra (one line, exit 2) when `module` is not installed."""
    if not installed(module):
        raise MissingExtra(missing_message(module, needed_by))
