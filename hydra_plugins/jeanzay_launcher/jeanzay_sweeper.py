"""`hydra/sweeper=jeanzay`: Hydra's basic sweeper without its up-front composition pass.

The basic sweeper composes every sweep point once only to check that it composes, then
hands the overrides to the launcher. The jeanzay launcher composes, resolves and
validates every point itself before submitting anything, so that first pass doubled the
cost of a sweep (~0.1-0.2 s per point with this config tree: 100 points took 29 s to
submit instead of 19 s, bench/bench_slurm.py). The Slurm profiles select both.
"""

# No `from __future__ import annotations`: Hydra loads plugin modules outside
# sys.modules, where dataclasses cannot resolve string annotations.
from collections.abc import Sequence
from dataclasses import dataclass

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.config_store import ConfigStore


@dataclass
class JeanzaySweeperConf:
    _target_: str = "hydra_plugins.jeanzay_launcher.jeanzay_sweeper.JeanzaySweeper"
    max_batch_size: int | None = None
    params: dict[str, str] | None = None


ConfigStore.instance().store(
    group="hydra/sweeper", name="jeanzay", node=JeanzaySweeperConf, provider="jeanzay_kit"
)


class JeanzaySweeper(BasicSweeper):
    def validate_batch_is_legal(self, batch: Sequence[Sequence[str]]) -> None:
        # The jeanzay launcher composes and validates every point before submitting; with
        # another launcher, keep Hydra's check.
        launcher = type(self.launcher).__name__ if self.launcher is not None else ""
        if launcher != "JeanzayLauncher":
            super().validate_batch_is_legal(batch)
