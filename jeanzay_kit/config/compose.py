"""Compose the Hydra config tree (conf/) with command-line overrides into plain dicts.

An edge module: it reads files. `jzk` uses it; `train.py` gets the same tree from
Hydra's own decorator.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from jeanzay_kit.errors import JzkError

# conf/ sits next to the package in a source checkout (`pip install -e .`).
DEFAULT_CONFIG_DIR = Path(__file__).resolve().parents[2] / "conf"


def user_config_dir(env: Mapping[str, str]) -> Path:
    """The user's own config folder (cluster profiles from `jzk cluster discover`):
    $JZK_CONFIG_HOME, else $XDG_CONFIG_HOME/jeanzay_kit, else ~/.config/jeanzay_kit."""
    if env.get("JZK_CONFIG_HOME"):
        return Path(env["JZK_CONFIG_HOME"]).expanduser()
    base = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME", "~")) / ".config")
    return Path(base).expanduser() / "jeanzay_kit"


class ConfigError(JzkError):
    """The overrides or the config tree could not be composed."""

    exit_code = 2


def compose_config(
    overrides: Sequence[str] = (),
    config_dir: str | Path | None = None,
    config_name: str = "config",
) -> dict[str, Any]:
    """The resolved config as nested dicts, exactly as train.py would see it."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from jeanzay_kit.config.resolvers import register_resolvers

    register_resolvers()
    directory = Path(config_dir or DEFAULT_CONFIG_DIR).resolve()
    if not (directory / f"{config_name}.yaml").is_file():
        raise ConfigError(
            f"no {config_name}.yaml in {directory}. HINT: pass --config-dir pointing at the "
            "project's conf/ folder"
        )
    try:
        with initialize_config_dir(config_dir=str(directory), version_base="1.3", job_name="jzk"):
            cfg = compose(config_name=config_name, overrides=list(overrides))
        container = OmegaConf.to_container(cfg, resolve=True)
    except (HydraException, OmegaConfBaseException) as err:
        # Hydra appends its search path to some messages; the user needs the first part.
        message = " ".join(str(err).split("Config search path")[0].split())
        raise ConfigError(
            "cannot apply the overrides: "
            + message
            + ". HINT: overrides use Hydra's syntax, key=value (`jzk validate --help`)"
        ) from err
    assert isinstance(container, dict)
    return container
