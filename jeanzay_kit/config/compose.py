"""Compose the Hydra config tree with command-line overrides into plain dicts.

An edge module: it reads files. The tree is one for every entry point (`jzk train`,
`train.py`, `jzk validate|render|submit|doctor|clusters`), searched in this order, the
first that has a name wins (docs/your-project.md):

1. the project's `conf/` (the directory `jzk` runs in: your repository);
2. the user's own folder: $JZK_CONFIG_HOME, else $XDG_CONFIG_HOME/jeanzay_kit, else
   ~/.config/jeanzay_kit (profiles written by `jzk cluster discover`);
3. the configs shipped inside the package (`pkg://jeanzay_kit.conf`).

The Hydra search-path plugin (hydra_plugins/jeanzay_launcher/jeanzay_searchpath.py) puts
1 and 2 in front of 3 with `config_roots`, so Hydra's own entry point sees the same tree.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, cast

from jeanzay_kit.config.compose_errors import compose_error
from jeanzay_kit.errors import ConfigError

# The shipped configs live inside the package, so a wheel carries them.
PACKAGE_CONFIG_DIR = Path(__file__).resolve().parents[1] / "conf"
PACKAGE_CONFIG_MODULE = "jeanzay_kit.conf"
# Kept for callers that name the shipped tree.
DEFAULT_CONFIG_DIR = PACKAGE_CONFIG_DIR
# A project's own configs: <project>/conf, the project being where jzk runs.
PROJECT_CONFIG_FOLDER = "conf"


@dataclass(frozen=True)
class ConfigRoot:
    """One folder of the config tree: where it is and what to call it in listings."""

    origin: str  # "project", "user" or "jeanzay_kit"
    path: Path

    def describe(self) -> str:
        return f"{self.origin} {self.path}"


def user_config_dir(env: Mapping[str, str]) -> Path:
    """The user's own config folder (cluster profiles from `jzk cluster discover`):
    $JZK_CONFIG_HOME, else $XDG_CONFIG_HOME/jeanzay_kit, else ~/.config/jeanzay_kit."""
    if env.get("JZK_CONFIG_HOME"):
        return Path(env["JZK_CONFIG_HOME"]).expanduser()
    base = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME", "~")) / ".config")
    return Path(base).expanduser() / "jeanzay_kit"


def config_roots(
    env: Mapping[str, str], cwd: Path, config_dir: str | Path | None = None
) -> list[ConfigRoot]:
    """The config tree's folders, first match wins: project, user, then the package's
    configs (or a whole tree given as --config-dir in their place)."""
    primary = (
        ConfigRoot("--config-dir", Path(config_dir).resolve())
        if config_dir
        else ConfigRoot("jeanzay_kit", PACKAGE_CONFIG_DIR)
    )
    project = (cwd / PROJECT_CONFIG_FOLDER).resolve()
    roots = [ConfigRoot("user", user_config_dir(env)), primary]
    if is_app_conf(project):
        return roots
    return [ConfigRoot("project", project), *roots]


# What a project's conf/config.yaml names in its defaults when it is the toolkit's root
# (`jzk init` writes `defaults: [jeanzay_kit, ...]`; jeanzay_kit.yaml starts from
# base_config).
_TOOLKIT_ROOTS = ("jeanzay_kit", "base_config")


def is_app_conf(folder: Path) -> bool:
    """A `conf/` that belongs to a Hydra app of the project (run as a script task,
    job.entry=my_app.py), not to the toolkit: its config.yaml exists and its defaults
    name neither jeanzay_kit nor base_config. The toolkit then leaves the folder to the
    app (it would otherwise compose the app's config as its own root) and composes the
    shipped root (docs/slurm.md "Coming from hydra-submitit-launcher")."""
    import yaml

    try:
        loaded = yaml.safe_load((folder / "config.yaml").read_text())
    except FileNotFoundError:
        return False
    except (OSError, yaml.YAMLError):
        return False  # unreadable: Hydra's own error names it
    defaults = loaded.get("defaults") if isinstance(loaded, dict) else None
    names: list[object] = []
    for item in defaults if isinstance(defaults, list) else []:
        names.extend(item if isinstance(item, dict) else [item])
    return not any(str(n).split("@")[0].strip() in _TOOLKIT_ROOTS for n in names)


@dataclass(frozen=True)
class GroupOption:
    name: str
    root: ConfigRoot
    shadows: tuple[ConfigRoot, ...] = ()  # later roots with an option of the same name


def group_options(roots: Sequence[ConfigRoot], group: str) -> list[GroupOption]:
    """Every option of a config group (`cluster`, `model`...), where it comes from, and
    which shipped options of the same name it hides."""
    found: dict[str, GroupOption] = {}
    for root in roots:
        folder = root.path / group
        for path in sorted(folder.glob("*.yaml")) if folder.is_dir() else []:
            if path.stem in found:
                first = found[path.stem]
                found[path.stem] = GroupOption(first.name, first.root, (*first.shadows, root))
            else:
                found[path.stem] = GroupOption(path.stem, root)
    return sorted(found.values(), key=lambda o: o.name)


def config_groups(roots: Sequence[ConfigRoot]) -> list[str]:
    """The groups any root has (top-level folders holding YAML files)."""
    names = {
        d.name
        for root in roots
        if root.path.is_dir()
        for d in root.path.iterdir()
        if d.is_dir() and any(d.glob("*.yaml"))
    }
    return sorted(names)


def check_group_choices(overrides: Sequence[str], roots: Sequence[ConfigRoot]) -> None:
    """Refuse `group=name` when no root has that option, listing each option with where it
    comes from (Hydra's own message lists names only, and only after composing); the hint
    offers the first root (the project's) as the place to add it."""
    groups = set(config_groups(roots))
    check_sections(overrides, groups)
    for override in overrides:
        key, sep, value = override.lstrip("+").partition("=")
        if not sep or key not in groups or not value or "," in value or "(" in value:
            continue  # a value, a sweep or a function: Hydra checks those itself
        options = group_options(roots, key)
        if value in {o.name for o in options} or value == "null":
            continue
        from jeanzay_kit.config.schema import closest

        near = closest(value, [o.name for o in options])
        by_root: dict[ConfigRoot, list[str]] = {}
        for option in options:
            by_root.setdefault(option.root, []).append(option.name)
        listing = "; ".join(
            f"from {root.describe()}: {', '.join(names)}" for root, names in by_root.items()
        )
        hint = f"did you mean {key}={near}? " if near else ""
        raise ConfigError(
            f"{key}={value} is not an option of the config group {key} ({listing}). "
            f"HINT: {hint}{'or add' if near else 'add'} {roots[0].path / key / value}.yaml "
            "to make one (docs/your-project.md)"
        )


def check_sections(overrides: Sequence[str], groups: set[str]) -> None:
    """Refuse a key whose first word names no section of the config, in the words the
    user wrote (`resource.nodes=3` names `resources`), before Hydra says "Key 'resource'
    not in 'RootConfig'"."""
    from dataclasses import fields

    from jeanzay_kit.config.schema import RootConfig, closest

    sections = {f.name for f in fields(RootConfig)} | groups | {"hydra"}
    for override in overrides:
        key, sep, value = override.partition("=")
        first = key.lstrip("+~").split(".", 1)[0].split("/", 1)[0].split("@", 1)[0]
        if not sep or not first or first in sections or key.startswith("+"):
            continue  # `+key=value` adds a key of the user's own on purpose
        near = closest(first, sorted(sections - {"hydra"}))
        rest = key.lstrip("~")[len(first) :]
        hint = f"did you mean {near}{rest}={value}? " if near else ""
        raise ConfigError(
            f"{key}={value}: {first!r} is no section of the config (the sections are "
            f"{', '.join(sorted(sections - {'hydra'}))}). HINT: {hint}docs/configuration.md "
            "lists every key"
        )


def register_schemas() -> None:
    """Put the schemas of config/schema.py in Hydra's ConfigStore, where the conf/ files
    find them (`defaults: [base_<name>, _self_]`); before any config is composed."""
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    from jeanzay_kit.config.schema import SCHEMAS

    store = ConfigStore.instance()
    for group, name, schema in SCHEMAS:
        node = schema
        open_keys = OPEN_DICTS.get(schema.__name__, ())
        if open_keys:
            # Hydra composes in struct mode, where `eval.metrics={acc: {...}}` (a merge into
            # the empty default) is refused like a typo; these dicts take any name.
            node = OmegaConf.structured(schema)
            for key in open_keys:
                if OmegaConf.is_config(node._get_node(key)):
                    OmegaConf.set_struct(node[key], False)
        store.store(group=group, name=name, node=node)


# Schema fields whose keys are the user's own names (a metric's name), by schema class.
OPEN_DICTS = {"EvalConfig": ("metrics",)}


def load_profile(path: Path) -> dict[str, Any] | None:
    """One cluster profile on its own: its YAML over the schema's defaults, resolved, as
    composing the whole config gives it (`jzk clusters` lists every profile in a fraction
    of the time). None when its defaults list names more than the schema and Hydra's
    launcher and sweeper (e.g. another profile): compose that one whole."""
    from omegaconf import DictConfig, OmegaConf

    from jeanzay_kit.config.resolvers import register_resolvers
    from jeanzay_kit.config.schema import ClusterConfig

    register_resolvers()
    raw = OmegaConf.load(path)
    if not isinstance(raw, DictConfig):
        return None
    for item in raw.pop("defaults", None) or []:
        plain = item in ("base_cluster", "_self_")
        hydra_only = isinstance(item, DictConfig) and all(
            str(key).startswith("override /hydra/") for key in item
        )
        if not (plain or hydra_only):
            return None
    merged = OmegaConf.merge(OmegaConf.structured(ClusterConfig), raw)
    return cast(dict[str, Any], OmegaConf.to_container(merged, resolve=True))


class SweepPoints(Protocol):
    """The points of a sweep composed once per group choice, as the sweep launcher does
    (launch/point_configs.sweep_compositions): what compose_config gives, sooner."""

    def serves(self, directory: Path, config_name: str) -> bool: ...

    def resolved(self, overrides: Sequence[str]) -> dict[str, Any]: ...


# Set inside a sweep_compositions block (`jzk validate -m`): compose_config of its tree
# asks it (it writes nothing to the composition cache: a sweep's thousands of points
# would push out what is kept for other commands).
SWEEP_POINTS: ContextVar[SweepPoints | None] = ContextVar("jzk_sweep_points", default=None)


def compose_config(
    overrides: Sequence[str] = (),
    config_dir: str | Path | None = None,
    config_name: str = "config",
) -> dict[str, Any]:
    """The resolved config as nested dicts, exactly as train.py would see it. Hydra's
    composition is kept between commands (config/compose_cache.py); interpolations are
    resolved here, every time."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from jeanzay_kit.config.resolvers import register_resolvers

    register_resolvers()
    sweep = SWEEP_POINTS.get()
    if sweep is not None and sweep.serves(primary_dir(config_dir, config_name), config_name):
        return sweep.resolved(overrides)  # a point of `jzk validate -m`
    raw = compose_unresolved(overrides, config_dir, config_name)
    try:
        container = OmegaConf.to_container(OmegaConf.create(raw), resolve=True)
    except OmegaConfBaseException as err:
        raise compose_error(err, overrides) from err
    assert isinstance(container, dict)
    return cast(dict[str, Any], container)


def compose_unresolved(
    overrides: Sequence[str], config_dir: str | Path | None = None, config_name: str = "config"
) -> dict[str, Any]:
    """The composed config with its interpolations as written (`${job.run_dir}`)."""
    from jeanzay_kit.config import compose_cache
    from jeanzay_kit.config.command_line import quote_argument_lists

    overrides = quote_argument_lists(overrides)  # job.args=[--lr=0.1] as users type it
    directory = primary_dir(config_dir, config_name)
    roots = config_roots(os.environ, Path.cwd(), config_dir)
    check_group_choices(overrides, roots)
    folder = compose_cache.cache_folder(os.environ)
    key = compose_cache.composition_key(overrides, config_name, directory, [r.path for r in roots])
    raw = compose_cache.load(folder, key) if folder else None
    if raw is None:
        raw = _compose_unresolved(directory, config_name, overrides)
        if folder:
            compose_cache.store(folder, key, raw)
    return raw


def primary_dir(config_dir: str | Path | None, config_name: str) -> Path:
    """The primary config tree, refused when it lacks the config asked for."""
    directory = Path(config_dir or PACKAGE_CONFIG_DIR).resolve()
    if not (directory / f"{config_name}.yaml").is_file():
        raise ConfigError(
            f"no {config_name}.yaml in {directory}. HINT: --config-dir names a complete "
            "config tree; a project's own options go in ./conf/<group>/<name>.yaml"
        )
    return directory


def _compose_unresolved(directory: Path, config_name: str, overrides: list[str]) -> dict[str, Any]:
    """Hydra's composition, `${...}` left as written."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    register_schemas()
    try:
        # The same search path as Hydra's entry point: the project and user folders come
        # from the search-path plugin, the primary tree from here.
        with initialize_config_dir(config_dir=str(directory), version_base="1.3", job_name="jzk"):
            cfg = compose(config_name=config_name, overrides=list(overrides))
        raw = OmegaConf.to_container(cfg, resolve=False)
    except (HydraException, OmegaConfBaseException) as err:
        raise compose_error(err, overrides) from err
    assert isinstance(raw, dict)
    return cast(dict[str, Any], raw)
