"""Compose the Hydra config tree (conf/) with command-line overrides into plain dicts.

An edge module: it reads files. `jzk` uses it; `train.py` gets the same tree from
Hydra's own decorator.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from jeanzay_kit.errors import ConfigError, JzkError, Problem, SpecError

# conf/ sits next to the package in a source checkout (`pip install -e .`).
DEFAULT_CONFIG_DIR = Path(__file__).resolve().parents[2] / "conf"


def user_config_dir(env: Mapping[str, str]) -> Path:
    """The user's own config folder (cluster profiles from `jzk cluster discover`):
    $JZK_CONFIG_HOME, else $XDG_CONFIG_HOME/jeanzay_kit, else ~/.config/jeanzay_kit."""
    if env.get("JZK_CONFIG_HOME"):
        return Path(env["JZK_CONFIG_HOME"]).expanduser()
    base = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME", "~")) / ".config")
    return Path(base).expanduser() / "jeanzay_kit"


def register_schemas() -> None:
    """Put the schemas of config/schema.py in Hydra's ConfigStore, where the conf/ files
    find them (`defaults: [base_<name>, _self_]`); before any config is composed."""
    from hydra.core.config_store import ConfigStore

    from jeanzay_kit.config.schema import SCHEMAS

    store = ConfigStore.instance()
    for group, name, schema in SCHEMAS:
        store.store(group=group, name=name, node=schema)


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
    register_schemas()
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
        raise compose_error(err, overrides) from err
    assert isinstance(container, dict)
    return container


# OmegaConf's words for a value of the wrong type -> ours (config/collector.py says the same).
_TYPE_REASONS = (
    ("to Integer", "is not a whole number"),
    ("to Float", "is not a number"),
    ("valid bool", "is not true or false"),
)


def compose_error(err: BaseException, overrides: Sequence[str] = ()) -> JzkError:
    """Hydra's refusal as our error that names the key: a value of the wrong type or a key
    the schema lacks becomes a Problem (`key=value reason. HINT: fix`), like every check
    of config/spec.py; anything else keeps Hydra's words."""
    # Hydra appends its search path to some messages; the user needs the first part.
    message = " ".join(str(err).split("Config search path")[0].split())
    cause: BaseException | None = err
    while cause is not None:
        full_key = getattr(cause, "full_key", None)
        reason = str(getattr(cause, "msg", "") or "").split("\n")[0]
        if full_key and reason:
            given = _given(full_key, overrides, getattr(cause, "value", None))
            return SpecError(_schema_problem(full_key, given, cause, reason))
        cause = cause.__cause__ or cause.__context__
    return ConfigError(
        f"cannot apply the overrides: {message}. HINT: overrides use Hydra's syntax, "
        "key=value (`jzk validate --help`)"
    )


def _given(full_key: str, overrides: Sequence[str], default: object) -> object:
    """The value the user wrote for a key (OmegaConf does not keep it for unknown keys)."""
    for override in overrides:
        key, sep, value = override.lstrip("+~").partition("=")
        if sep and key == full_key:
            return value
    return default


def _schema_problem(full_key: str, given: object, cause: BaseException, reason: str) -> Problem:
    schema = getattr(cause, "object_type", None)
    name = getattr(schema, "__name__", "the schema")
    if "not in" in reason:  # a key the schema does not have
        from dataclasses import fields, is_dataclass

        from jeanzay_kit.config.schema import closest

        known = [f.name for f in fields(schema)] if is_dataclass(schema) else []
        near = closest(full_key.rsplit(".", 1)[-1], known)
        parent = full_key.rsplit(".", 1)[0] + "." if "." in full_key else ""
        hint = f"did you mean {parent}{near}? " if near else ""
        return Problem(
            full_key,
            given,
            f"is not a key of {name}",
            hint + "jeanzay_kit/config/schema.py lists every key",
        )
    ours = next((words for theirs, words in _TYPE_REASONS if theirs in reason), None)
    return Problem(
        full_key,
        given,
        f"{ours or reason} ({name} in jeanzay_kit/config/schema.py)",
        "give a value of the type the schema states",
    )
