"""The training entry point: `python train.py [OVERRIDES]`, the same file on a laptop and on
every task of a Slurm job. See docs/parallelism.md."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from jeanzay_kit.train.preemption import StopRequest

STOP: StopRequest | None = None


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> None:
    from jeanzay_kit.run import main as run_main

    config = OmegaConf.to_container(cfg, resolve=True)
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    # The environment is read here, once; everything below receives values.
    code = run_main(config, dict(os.environ), run_dir, cpu_count=os.cpu_count() or 1, stop=STOP)
    if code:
        sys.exit(code)


if __name__ == "__main__":
    # Note Slurm's signals (SIGUSR1 before the time limit, SIGTERM) from the very start.
    STOP = StopRequest()
    main()
