"""What each Slurm task of a launcher-submitted job runs (submitit unpickles and calls it).

The config arrives resolved and frozen at submission; the run directory is fixed per
sweep point, so a requeued job finds its checkpoints.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from jeanzay_kit.config.entry import script_entry
from jeanzay_kit.ending.codes import Exit
from jeanzay_kit.ending.preemption import StopRequest
from jeanzay_kit.errors import JzkError


def run_training(config: dict[str, Any], run_dir: str) -> float | list[float | None] | None:
    """Train one sweep point; its result's value (runtime/run_result.py: what Hydra's
    sweeper receives through the launcher; None when the run has none)."""
    # First: submitit installed its own handlers; ours only note the signal, and the
    # ranks stop together at a step boundary (docs/preemption.md).
    stop = StopRequest()
    from jeanzay_kit.node.entry import main
    from jeanzay_kit.project.import_path import put_project_on_path
    from jeanzay_kit.rundir.run_directory import RunDir

    # The environment is read here, once.
    env = dict(os.environ)
    # The project's code: the sweep's snapshot (JZK_CODE_DIR), else the project's root.
    put_project_on_path(env, Path.cwd())
    folder = RunDir(Path(run_dir))
    code = main(config, env, folder, cpu_count=os.cpu_count() or 1, stop=stop)
    if code == Exit.STOPPED:
        raise SystemExit(code)  # stopped after a save, and requeued: not a failure
    if code:
        entry = script_entry(config)
        what = f"job.entry {entry!r}" if entry else "training"
        raise JzkError(f"{what} ended with exit code {code}; see the error above")
    from jeanzay_kit.runtime.run_result import result_value, result_values

    # Several objectives (tune.objective as a list): the list, as Hydra's Optuna sweeper
    # takes from a multi-objective run.
    values = result_values(folder)
    return values if values is not None and len(values) > 1 else result_value(folder)
