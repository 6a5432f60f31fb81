"""OmegaConf resolvers of the config tree: `${jzk.config_hash:}`.

Registered by train.py and compose_config before the config is composed. The default
run directory, `outputs/${job.name}-${jzk.config_hash:}`, gives each experiment its own
folder: two configs that would refuse each other's checkpoints get different folders,
while a requeued or re-run job with the same config (or one that changes only what a
resume may change: train.steps, the cluster, the time limit...) finds its checkpoints.
A script task's folder is named by its command instead: job.entry and job.args.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NoReturn

from jeanzay_kit.config.identity import point_suffix, run_hash

SHORT_HASH = 8  # hex digits: a collision needs ~65,000 experiments under one job.name
# Sections that describe how the config is run, not what it computes (RESUME_IGNORES
# drops the rest); `hydra` is Hydra's own node, present while Hydra resolves hydra.run.dir.
_NOT_HASHED = ("hydra", "job")


def short_config_hash(config: dict[str, Any], job: dict[str, Any] | None = None) -> str:
    return run_hash(config, job)[:SHORT_HASH]


def _config_hash_resolver(*, _root_: Any) -> str:
    return short_config_hash(*_hashed_parts(_root_))


def _hashed_parts(root: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """What the config hash covers: every section resolved but `hydra` and `job`, and
    `job` as written."""
    from omegaconf import OmegaConf

    # Resolved section by section, leaving `job` out: job.run_dir refers to this hash.
    plain = {
        key: OmegaConf.to_container(root[key], resolve=True)
        if OmegaConf.is_config(root[key])
        else root[key]
        for key in root
        if key not in _NOT_HASHED
    }
    return plain, job_as_written(root)


def job_as_written(root: Any) -> dict[str, Any]:
    """The `job` section unresolved. A script task is named by its command
    (config/identity.py run_hash), its arguments hashed as written:
    `--out_dir=${job.run_dir}` names this very hash."""
    from omegaconf import OmegaConf

    job = root.get("job")
    raw = OmegaConf.to_container(job, resolve=False) if OmegaConf.is_config(job) else {}
    assert isinstance(raw, dict)
    return {str(k): v for k, v in raw.items()}


POINT_NAME = "${jzk.point_name:}"  # hydra.sweep.subdir's default (conf/jeanzay_kit.yaml)


def point_name(
    sections: dict[str, Any], raw_job: dict[str, Any], job_name: str, task: Sequence[str]
) -> str:
    """A sweep point's folder (hydra.sweep.subdir): named by its config like a single
    run, `<job.name>-<config hash>`, so a second sweep with one value changed runs the
    new value in a new folder and finds the unchanged ones; points that differ only in
    what a resume ignores (train.steps, resources.nodes...) get a suffix of those
    overrides, so a scaling sweep's points never share a folder (point_suffix).

    sections: the resolved config but `hydra` and `job`; raw_job: `job` unresolved;
    task: the point's overrides (hydra.overrides.task)."""
    name = f"{job_name}-{short_config_hash(sections, raw_job)}"
    suffix = point_suffix(list(task))
    return f"{name}-{suffix}" if suffix else name


def _point_name_resolver(*, _root_: Any) -> str:
    """`${jzk.point_name:}` (the sweep launcher computes the same from the point's config
    it has resolved already: launch/point_configs.resolved_point)."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    overrides: list[str] = []
    hydra = _root_.get("hydra")
    if OmegaConf.is_config(hydra):
        task = OmegaConf.select(hydra, "overrides.task", default=None)
        written = OmegaConf.to_container(task, resolve=False) if task is not None else []
        overrides = [str(o) for o in written] if isinstance(written, list) else []
    try:
        parts = _hashed_parts(_root_)
    except OmegaConfBaseException as err:
        _refuse_point(err, overrides)
    return point_name(*parts, str(_root_.job.name), overrides)


def _refuse_point(err: Exception, overrides: list[str]) -> NoReturn:
    """A sweep point of Hydra's own launchers (a local sweep) whose config does not
    resolve: the one line `jzk validate` gives, exit 2, not Hydra's traceback (this
    resolver names the point's folder: the first to resolve the point's config)."""
    import sys

    from jeanzay_kit import report
    from jeanzay_kit.config.compose_errors import compose_error

    problem = compose_error(err, overrides)
    report.error(report.TRAIN, f"sweep point ({' '.join(overrides)}): {problem}")
    sys.exit(problem.exit_code)


def register_resolvers() -> None:
    """Idempotent: Hydra, compose_config and the launcher may all call it."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("jzk.config_hash"):
        OmegaConf.register_new_resolver("jzk.config_hash", _config_hash_resolver)
    if not OmegaConf.has_resolver("jzk.point_name"):
        OmegaConf.register_new_resolver("jzk.point_name", _point_name_resolver)
