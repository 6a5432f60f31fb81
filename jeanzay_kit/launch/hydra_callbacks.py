"""Hydra callbacks train.py's config names (conf/config.yaml, hydra.callbacks).

`RunDirCheck` runs before Hydra creates the run directory (on_run_start comes before
run_job's mkdir), so an unwritable job.run_dir is one line and exit 2, not Hydra's
traceback, and no worker starts. A sweep checks its sweep directory the same way; each
point's run directory is checked by the launcher before anything is submitted.
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
        _check(Path(str(config.hydra.run.dir)), "job.run_dir")

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        _check(Path(str(config.hydra.sweep.dir)), "hydra.sweep.dir")


def _check(path: Path, key: str) -> None:
    try:
        check_writable(path, key)
    except RunDirError as err:
        report.error(report.TRAIN, err)
        sys.exit(err.exit_code)
