"""A request as every command reads it: the composed config, checked into a JobSpec."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

from jeanzay_kit.config.compose import compose_config
from jeanzay_kit.config.spec import JobSpec, build_job_spec
from jeanzay_kit.rundir.run_directory import RunDir


def spec_of(
    overrides: Sequence[str],
    config_dir: str | None,
    config_name: str = "config",
    fit: bool = True,
) -> JobSpec:
    """The checked request of these overrides (a SpecError naming each problem);
    config_name: another primary config in config_dir (a job's frozen one). fit: also
    refuse a plan above its GPU's memory (launch/fit_check.py), before anything is
    written."""
    cfg = compose_config(list(overrides), config_dir, config_name)
    local_gpus = None
    if cfg["cluster"].get("scheduler") == "local" and cfg["resources"].get(
        "gpus_per_node", "auto"
    ) in (None, "auto"):
        # Only here is torch imported: the worker count of a local run follows the GPUs.
        from jeanzay_kit.distributed.devices import local_gpu_count

        local_gpus = local_gpu_count()
    # The CPUs of this machine: loader.num_workers=auto of a local run is resolved from them.
    spec = build_job_spec(
        cfg, local_gpus=local_gpus, local_cpus=os.cpu_count(), interpreter=sys.executable
    )
    if not spec.job.runs_script:  # a script's own values say nothing of our metrics
        from jeanzay_kit.train.directions import check_directions

        check_directions(spec)  # a metric that cannot say which way is better: refused now
    if fit:
        from jeanzay_kit.launch.fit_check import check

        check(
            spec,
            overrides,
            lambda more: spec_of(more, config_dir, config_name, fit=False),
            os.environ,
        )
    return spec


def workdir_of(spec: JobSpec) -> Path:
    """Where the job runs: job.workdir, or the directory jzk runs in."""
    return Path(spec.job.workdir) if spec.job.workdir else Path.cwd()


def run_dir_of(spec: JobSpec) -> RunDir:
    """The run directory the job writes, as this side finds it: checkpoint.run_dir under
    the job's workdir (an absolute run_dir stays itself)."""
    return RunDir(workdir_of(spec) / spec.checkpoint.run_dir)
