"""The training entry point: `python train.py [OVERRIDES]`, the same file on a laptop and on
every task of a Slurm job. See docs/parallelism.md."""

from __future__ import annotations

from jeanzay_kit.train.preemption import StopRequest

# Note Slurm's signals (SIGUSR1 before the time limit, SIGTERM at preemption) from the very
# start, before the imports below (Hydra takes ~0.3 s): the default action of SIGUSR1 is
# to kill the process.
STOP: StopRequest | None = StopRequest() if __name__ == "__main__" else None

import os  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import hydra  # noqa: E402
from hydra.core.hydra_config import HydraConfig  # noqa: E402
from omegaconf import DictConfig, OmegaConf  # noqa: E402

from jeanzay_kit.config.compose import register_schemas  # noqa: E402
from jeanzay_kit.config.resolvers import register_resolvers  # noqa: E402

register_resolvers()  # ${jzk.config_hash:} in the default job.run_dir
register_schemas()  # the typed schema every conf/ file extends (base_<name>)


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
    main()
