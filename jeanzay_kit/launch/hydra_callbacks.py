"""Hydra callbacks train.py's config names (conf/config.yaml, hydra.callbacks).

`RunDirCheck` runs before Hydra creates the run directory (on_run_start comes before
run_job's mkdir), so an unwritable job.run_dir, or an interpolation that names a key the
config lacks, is one line and exit 2, not Hydra's traceback, and no worker starts. A
sweep checks its sweep directory the same way (and its config, when no override sweeps);
each point's run directory is checked by the launcher before anything is submitted.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from jeanzay_kit import report
from jeanzay_kit.ckpt.writable import check_writable
from jeanzay_kit.errors import RunDirError


class RunDirCheck(Callback):
    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        _check_resolves(config)
        _check(Path(str(config.hydra.run.dir)), "job.run_dir")

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        if not _sweeps(config):  # every point is this config: its mistake is theirs
            _check_resolves(config, run_dir=False)
        _check(Path(str(config.hydra.sweep.dir)), "hydra.sweep.dir")


def _task_overrides(config: DictConfig) -> list[str]:
    """The command line's overrides as written (`model.in_dim=${nope.x}` not resolved)."""
    from omegaconf import OmegaConf

    task = OmegaConf.select(config, "hydra.overrides.task")
    written = OmegaConf.to_container(task, resolve=False) if task is not None else []
    return [str(o) for o in written] if isinstance(written, list) else []


def _sweeps(config: DictConfig) -> bool:
    """Whether an override of the command line sweeps (`a=1,2`, `range(...)`): then the
    sweep's config is not any point's, and each point is checked where it is composed."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    task = _task_overrides(config)
    try:
        return any(o.is_sweep_override() for o in OverridesParser.create().parse_overrides(task))
    except Exception:  # noqa: BLE001 - Hydra parsed them already; when in doubt, no check
        return True


def _check_resolves(config: DictConfig, run_dir: bool = True) -> None:
    """Every interpolation of the composed config resolves, the run directory's too (its
    ${jzk.config_hash:} resolves every section): a key one names that the config lacks
    (`data=custom` under the default model: model.in_dim=${data.in_dim}) is the one line
    `jzk validate` gives (config/compose_errors.py) and exit 2, before Hydra would
    print its traceback while making the run directory."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from jeanzay_kit.config.compose_errors import compose_error

    try:
        for key in config:
            if key != "hydra" and OmegaConf.is_config(config[key]):
                OmegaConf.to_container(config[key], resolve=True)
        if run_dir:
            str(config.hydra.run.dir)
    except OmegaConfBaseException as err:
        problem = compose_error(err, _task_overrides(config))
        report.error(report.TRAIN, problem)
        sys.exit(problem.exit_code)


def _check(path: Path, key: str) -> None:
    try:
        check_writable(path, key)
    except RunDirError as err:
        report.error(report.TRAIN, err)
        sys.exit(err.exit_code)
