"""OmegaConf resolvers of the config tree: `${jzk.config_hash:}`.

Registered by train.py and compose_config before the config is composed. The default
run directory, `outputs/${job.name}-${jzk.config_hash:}`, gives each experiment its own
folder: two configs that would refuse each other's checkpoints get different folders,
while a requeued or re-run job with the same config (or one that changes only what a
resume may change: train.steps, the cluster, the time limit...) finds its checkpoints.
A script task's folder is named by its command instead: job.entry and job.args.
"""

from __future__ import annotations

from typing import Any, cast

from jeanzay_kit.config.identity import point_suffix, run_hash

SHORT_HASH = 8  # hex digits: a collision needs ~65,000 experiments under one job.name
# Sections that describe how the config is run, not what it computes (RESUME_IGNORES
# drops the rest); `hydra` is Hydra's own node, present while Hydra resolves hydra.run.dir.
_NOT_HASHED = ("hydra", "job")


def short_config_hash(config: dict[str, Any], job: dict[str, Any] | None = None) -> str:
    return run_hash(config, job)[:SHORT_HASH]


def _config_hash_resolver(*, _root_: Any) -> str:
    from omegaconf import OmegaConf

    # Resolved section by section, leaving `job` out: job.run_dir refers to this hash.
    plain = {
        key: OmegaConf.to_container(_root_[key], resolve=True)
        if OmegaConf.is_config(_root_[key])
        else _root_[key]
        for key in _root_
        if key not in _NOT_HASHED
    }
    # A script task is named by its command (config/identity.py run_hash). Its arguments
    # are hashed as written, unresolved: `--out_dir=${job.run_dir}` names this very hash.
    job = _root_.get("job")
    raw_job = OmegaConf.to_container(job, resolve=False) if OmegaConf.is_config(job) else {}
    assert isinstance(raw_job, dict)
    return short_config_hash(plain, cast(dict[str, Any], raw_job))


def _point_name_resolver(*, _root_: Any) -> str:
    """A sweep point's folder (hydra.sweep.subdir): named by its config like a single
    run, `<job.name>-<config hash>`, so a second sweep with one value changed runs the
    new value in a new folder and finds the unchanged ones; points that differ only in
    what a resume ignores (train.steps, resources.nodes...) get a suffix of those
    overrides, so a scaling sweep's points never share a folder (point_suffix)."""
    from omegaconf import OmegaConf

    overrides: list[str] = []
    hydra = _root_.get("hydra")
    if OmegaConf.is_config(hydra):
        task = OmegaConf.select(hydra, "overrides.task", default=None)
        overrides = [str(o) for o in task] if task is not None else []
    name = f"{_root_.job.name}-{_config_hash_resolver(_root_=_root_)}"
    suffix = point_suffix(overrides)
    return f"{name}-{suffix}" if suffix else name


def register_resolvers() -> None:
    """Idempotent: Hydra, compose_config and the launcher may all call it."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("jzk.config_hash"):
        OmegaConf.register_new_resolver("jzk.config_hash", _config_hash_resolver)
    if not OmegaConf.has_resolver("jzk.point_name"):
        OmegaConf.register_new_resolver("jzk.point_name", _point_name_resolver)
