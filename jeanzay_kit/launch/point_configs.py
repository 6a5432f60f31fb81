"""The composed config of every sweep point, without composing each from scratch. An edge
module: it drives Hydra's config loader (and two of its internal helpers).

Hydra builds a config in two phases. First the defaults list: which file of each config
group (`cluster=...`, `model=...`, `hydra/launcher=...`) and the merge of all of them;
that is what costs (0.2-0.8 s a point with this config tree on a 2-core machine: every
file is read, merged and copied again). Then the command line's value overrides
(`optim.lr=0.1`) are applied to the result one after the other, by
`ConfigLoaderImpl._apply_overrides_to_config`.

Sweep points usually differ in value overrides only, and a value override can never
change the defaults list. So the points are grouped by their other overrides (group
choices, `+`/`++`/`~` forms, package overrides, anything under `hydra`): one full
composition per group, then each point gets a copy with its own value overrides applied
by Hydra's own function, in the command line's order, and the two per-point fields
Hydra derives from them (`hydra.overrides.task`, `hydra.job.override_dirname`) set as
Hydra sets them. The result equals `load_sweep_config` for the point
(tests/unit/test_point_configs.py compares them for a table of sweeps), and errors
(an unknown key, a bad value) are Hydra's own.

`jzk validate -m` checks a sweep the same way: inside `sweep_compositions`, its
compose_config of each point (launch/request.spec_of, unchanged) is answered by a
PointConfigs, the point's config resolved once per section (`resolved_request`). 10,000
points are checked in ~40 s on 2 cores, where composing each took 0.2 s
(bench/bench_sweep_validate.py).
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hydra._internal.config_loader_impl import ConfigLoaderImpl, get_overrides_dirname
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override, OverrideType
from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict, read_write


def is_value_override(override: Override, group_exists: Callable[[str], bool]) -> bool:
    """True for `key=value` on a config key: the kind applied after composition."""
    return (
        override.type == OverrideType.CHANGE
        and override.package is None
        and not override.is_hydra_override()
        and not override.is_sweep_override()
        and "/" not in override.key_or_group
        and not group_exists(override.key_or_group)
    )


class PointConfigs:
    """`point(overrides)` gives what `config_loader.load_sweep_config(master, overrides)`
    would, composing only once per distinct set of non-value overrides.

    Points are taken one after the other: the config a `point` block yields is the
    group's one composed config with the point's values swapped in, and it is put back as
    it was when the block ends. Use it inside the block (resolve, validate); keep the
    resolved result, not the config.
    """

    def __init__(self, config_loader, master_config: DictConfig) -> None:
        self.loader = config_loader
        self.master = master_config
        self.parser = OverridesParser.create()
        self.bases: dict[tuple[str, ...], DictConfig] = {}
        repository = getattr(config_loader, "repository", None)
        # Without the repository (another loader) every override counts as structural:
        # each point is then composed in full, as Hydra would.
        exists = repository.group_exists if repository else (lambda _key: True)
        # One look at the config sources per key, not one per point (it lists folders).
        self.group_exists = functools.cache(exists)
        self.parsed: dict[str, Override] = {}
        self.compositions = 0
        self.hydra_view_of: DictConfig | None = None

    @contextmanager
    def point(self, overrides: Sequence[str], num: int) -> Iterator[DictConfig]:
        parsed = [self._parse(line) for line in overrides]
        is_value = [is_value_override(o, self.group_exists) for o in parsed]
        values = [o for o, v in zip(parsed, is_value, strict=True) if v]
        structural = tuple(
            str(o.input_line) for o, v in zip(parsed, is_value, strict=True) if not v
        )
        task = [o for o in parsed if not o.is_hydra_override()]
        cfg = self.bases.get(structural)
        if cfg is None:
            cfg = self._compose(list(structural))
            # Kept for the points that share it; a point of group choices only (a sweep
            # over model=a,b,c) has nothing to share it with.
            if values:
                self.bases[structural] = cfg
        hydra = cfg.hydra
        fields = _point_fields(hydra, task, num)
        _set_point_fields(hydra, fields)
        if self.hydra_view_of is cfg:
            # Hydra's view (what ${hydra:...} reads) is a copy set_config took of this
            # config's hydra node: it gets the point's fields too, without a new copy.
            _set_point_fields(HydraConfig.get(), fields)
        else:
            HydraConfig.instance().set_config(cfg)
            self.hydra_view_of = cfg
        swapped: list[tuple[Any, Any, Any]] = []
        try:
            for override in values:
                swapped.extend(_swap_in_copy(cfg, override.key_or_group))
                ConfigLoaderImpl._apply_overrides_to_config([override], cfg)
            yield cfg
        except BaseException:
            # Whatever state a failed override left, this config is not reused.
            self.bases.pop(structural, None)
            raise
        finally:
            for content, key, original in reversed(swapped):
                content[key] = original
            # Resolvers that cache (use_cache=True) start each point from the master's
            # cache, as a fresh load_sweep_config does.
            OmegaConf.clear_cache(cfg)
            OmegaConf.copy_cache(from_config=self.master, to_config=cfg)

    def values_only(self, overrides: Sequence[str]) -> bool:
        """True when every override is a value override of a config key (`lr=0.1`): the
        point's hydra node (launcher, sweep dir) is then the master's, as composed."""
        return all(is_value_override(self._parse(o), self.group_exists) for o in overrides)

    def shape(self, overrides: Sequence[str]) -> tuple[str, ...]:
        """The point with each value override's value left out (`optim.lr=`): the points
        of one shape name the same keys and the same group choices."""
        parsed = [self._parse(line) for line in overrides]
        return tuple(
            f"{o.key_or_group}=" if is_value_override(o, self.group_exists) else str(o.input_line)
            for o in parsed
        )

    def _parse(self, line: str) -> Override:
        # Grid points repeat the same override strings: the grammar runs once for each.
        if line not in self.parsed:
            self.parsed[line] = self.parser.parse_overrides([line])[0]
        return self.parsed[line]

    def _compose(self, overrides: list[str]) -> DictConfig:
        self.compositions += 1
        return self.loader.load_sweep_config(self.master, overrides)


def _swap_in_copy(cfg: DictConfig, key: str) -> list[tuple[Any, Any, Any]]:
    """Put a copy of the node at `key` in its place and return how to put the original
    back. An override may change a node in place or replace it (OmegaConf decides); on
    the copy either way, the original stays as composed. Nothing is swapped when the key
    does not exist: Hydra then refuses the override before changing anything."""
    parent_key, _, leaf = key.rpartition(".")
    parent = OmegaConf.select(cfg, parent_key, throw_on_missing=False) if parent_key else cfg
    if isinstance(parent, ListConfig) and leaf.isdigit():
        index: Any = int(leaf)
        if index >= len(parent):
            return []
    elif isinstance(parent, DictConfig) and leaf in parent:
        index = leaf
    else:
        return []
    content = parent.__dict__["_content"]
    original = content[index]
    content[index] = copy.deepcopy(original)
    return [(content, index, original)]


def _point_fields(hydra: DictConfig, task: list[Override], num: int) -> dict[str, Any]:
    """The hydra fields that differ from point to point, as Hydra (the task overrides and
    the override dirname) and the launcher (the job id and number) set them."""
    dirname = hydra.job.config.override_dirname
    return {
        "task": [o.input_line for o in task],
        "override_dirname": get_overrides_dirname(
            overrides=task,
            kv_sep=dirname.kv_sep,
            item_sep=dirname.item_sep,
            exclude_keys=list(dirname.exclude_keys),
        ),
        "id": f"jzk_{num}",
        "num": num,
    }


def _set_point_fields(hydra: Any, fields: dict[str, Any]) -> None:
    with read_write(hydra), open_dict(hydra):
        hydra.overrides.task = fields["task"]
        job = hydra.job
        job.override_dirname = fields["override_dirname"]
        job.id = fields["id"]
        job.num = fields["num"]


def resolved_point(cfg: DictConfig, sweep_dir: str) -> tuple[str, dict[str, Any]]:
    """The point's run directory (hydra.sweep.dir / hydra.sweep.subdir) and its resolved
    task config (resolved_task_config), each section resolved once.

    The subdir's default, `${jzk.point_name:}`, is computed here from the sections
    already resolved: Hydra resolving it would run the resolver, which resolves every
    section again (a third of a 1000-point sweep's submission). Any other subdir is
    Hydra's to resolve."""
    from jeanzay_kit.config.resolvers import POINT_NAME, job_as_written, point_name

    plain = resolved_task_config(cfg, "")  # its run_dir is set below, from the subdir
    job = job_as_written(cfg)
    written = OmegaConf.to_container(cfg.hydra.sweep, resolve=False)
    if isinstance(written, dict) and written.get("subdir") == POINT_NAME and "name" in plain["job"]:
        sections = {k: v for k, v in plain.items() if k != "job"}
        task = [str(o) for o in cfg.hydra.overrides.task]
        subdir = point_name(sections, job, str(plain["job"]["name"]), task)
    else:
        subdir = str(cfg.hydra.sweep.subdir)
    run_dir = str(Path(sweep_dir) / subdir)
    if any("run_dir" in str(v) for k, v in job.items() if k != "run_dir"):
        # `--out_dir=${job.run_dir}`, `hydra.run.dir=${job.run_dir}` in job.args: the
        # point's own run directory, resolved again now that it is known.
        return run_dir, resolved_task_config(cfg, run_dir)
    plain["job"]["run_dir"] = run_dir
    return run_dir, plain


CONFIG_HASH = "${jzk.config_hash:}"  # job.run_dir's default names the run by it


def resolved_request(cfg: DictConfig) -> dict[str, Any]:
    """The point's whole config resolved, Hydra's section left out: what compose_config
    gives for the point's overrides (`jzk validate -m`: sweep_compositions below), each
    section resolved once.

    job.run_dir's default, outputs/${job.name}-${jzk.config_hash:}, is given the hash of
    the sections resolved here: the resolver computes the same from resolving every
    section again (half the time of a point otherwise)."""
    from jeanzay_kit.config.resolvers import job_as_written, short_config_hash

    plain = {str(k): None if k == "job" else _resolved(cfg, k) for k in cfg if k != "hydra"}
    job_node = cfg.get("job")
    if not isinstance(job_node, DictConfig):
        return {k: _resolved(cfg, k) if k == "job" else v for k, v in plain.items()}
    raw_job = job_as_written(cfg)
    written = raw_job.get("run_dir")
    if not (isinstance(written, str) and CONFIG_HASH in written):
        plain["job"] = _resolved(cfg, "job")
        return plain
    sections = {k: v for k, v in plain.items() if k != "job"}
    named = written.replace(CONFIG_HASH, short_config_hash(sections, raw_job))
    with read_write(job_node), open_dict(job_node):
        job_node.run_dir = named
        try:
            plain["job"] = _resolved(cfg, "job")
        finally:
            job_node.run_dir = written
    return plain


def resolved_task_config(cfg: DictConfig, run_dir: str) -> dict[str, Any]:
    """The run's config as plain values, everything but Hydra's own section, with
    job.run_dir set to the point's run directory.

    Section by section (interpolations still resolve against the whole config): cheaper
    than copying the config to delete the hydra node. job.run_dir itself is not resolved:
    its default, outputs/<name>-${jzk.config_hash:}, hashes the whole config again (half
    the time of this function) for a value the sweep replaces. A value that interpolates
    it (`${job.run_dir}` in job.args) reads `run_dir` (when given), the point's own."""
    job_node = cfg.get("job")
    if not run_dir or not isinstance(job_node, DictConfig) or "run_dir" not in job_node:
        return _resolved_task_config(cfg, run_dir)
    from jeanzay_kit.config.resolvers import job_as_written

    as_written = job_as_written(cfg)["run_dir"]
    with read_write(job_node), open_dict(job_node):
        job_node.run_dir = run_dir
        try:
            return _resolved_task_config(cfg, run_dir)
        finally:
            job_node.run_dir = as_written


def _resolved_task_config(cfg: DictConfig, run_dir: str) -> dict[str, Any]:
    plain: dict[str, Any] = {}
    for key in cfg:
        if key == "hydra":
            continue
        node = cfg._get_node(key)
        if key == "job" and isinstance(node, DictConfig):
            job = {str(k): _resolved(node, k) for k in node if k != "run_dir"}
            job["run_dir"] = run_dir
            plain["job"] = job
            continue
        plain[str(key)] = _resolved(cfg, key)
    plain.setdefault("job", {})["run_dir"] = run_dir
    return plain


def _resolved(parent: DictConfig, key: Any) -> Any:
    value = parent[key]
    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value


class SweepCompositions:
    """compose_config for the points of a sweep outside Hydra's launcher (`jzk validate
    -m`): one PointConfigs over Hydra's config loader for the tree compose_config reads
    (the same search path: the project and user folders from the search-path plugin),
    each point resolved by resolved_request. Group choices and section names are checked
    (compose.check_group_choices) once per shape of point: the same keys, the same
    answer."""

    def __init__(self, config_dir: str | Path | None, directory: Path, config_name: str) -> None:
        self.config_dir = config_dir  # as given: the roots name it (--config-dir or none)
        self.directory = directory
        self.config_name = config_name
        self.checked: set[tuple[str, ...]] = set()
        self._composer: PointConfigs | None = None
        self._roots: list[Any] = []

    @property
    def compositions(self) -> int:
        """Hydra compositions so far: one per distinct group choice."""
        return self._composer.compositions if self._composer is not None else 0

    def serves(self, directory: Path, config_name: str) -> bool:
        return (directory, config_name) == (self.directory, self.config_name)

    def resolved(self, overrides: Sequence[str]) -> dict[str, Any]:
        """What compose_config gives for these overrides, errors included."""
        from hydra.errors import HydraException
        from omegaconf.errors import OmegaConfBaseException

        from jeanzay_kit.config.command_line import quote_argument_lists
        from jeanzay_kit.config.compose import check_group_choices
        from jeanzay_kit.config.compose_errors import compose_error

        quoted = quote_argument_lists(overrides)
        composer = self._points()
        shape = composer.shape(quoted)
        if shape not in self.checked:
            check_group_choices(quoted, self._roots)
            self.checked.add(shape)
        try:
            with composer.point(quoted, 0) as cfg:
                try:
                    return resolved_request(cfg)
                except OmegaConfBaseException as err:
                    raise compose_error(err, overrides) from err
        except (HydraException, OmegaConfBaseException) as err:
            raise compose_error(err, quoted) from err

    def _points(self) -> PointConfigs:
        if self._composer is not None:
            return self._composer
        import os

        from hydra import initialize_config_dir
        from hydra.core.global_hydra import GlobalHydra

        from jeanzay_kit.config.compose import config_roots, register_schemas
        from jeanzay_kit.config.resolvers import register_resolvers

        register_resolvers()
        register_schemas()
        with initialize_config_dir(
            config_dir=str(self.directory), version_base="1.3", job_name="jzk"
        ):
            loader = GlobalHydra.instance().config_loader()
        # What load_sweep_config reads of the sweep's own config: no Hydra overrides of
        # its own and the primary config's name. Not composed: a tree whose defaults
        # need a choice (`???`) composes only with the points' overrides.
        master = OmegaConf.create(
            {"hydra": {"overrides": {"hydra": []}, "job": {"config_name": self.config_name}}}
        )
        self._roots = config_roots(os.environ, Path.cwd(), self.config_dir)
        self._composer = PointConfigs(loader, master)
        return self._composer


@contextmanager
def sweep_compositions(
    config_dir: str | Path | None, config_name: str = "config"
) -> Iterator[SweepCompositions]:
    """Inside: compose_config of this tree composes once per distinct group choice
    (config/compose.py SWEEP_POINTS); nothing goes to the composition cache on disk."""
    from jeanzay_kit.config.compose import SWEEP_POINTS, primary_dir

    points = SweepCompositions(config_dir, primary_dir(config_dir, config_name), config_name)
    token = SWEEP_POINTS.set(points)
    try:
        yield points
    finally:
        SWEEP_POINTS.reset(token)
