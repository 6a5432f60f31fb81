"""`jzk prefetch`: run the run's start where the network is, with the libraries' caches
set, so that the training job (offline switches on) finds everything it reaches: as a job
on cluster.prefetch_partition, or here (the login node) when the profile names none."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

from jeanzay_kit.config.spec import JobSpec
from jeanzay_kit.launch.request import workdir_of
from jeanzay_kit.offline.probe import fetched_lines, probe, what_to_run
from jeanzay_kit.slurm.offline_env import cache_env
from jeanzay_kit.slurm.prefetch_script import SCRIPT_BUDGET_S, prefetch_name, render_prefetch


def here_env(spec: JobSpec) -> dict[str, str]:
    """This process's environment with the caches of cluster.cache_dir ($VARS expanded)."""
    cache_dir = spec.cluster.cache_dir
    expanded = os.path.expandvars(os.path.expanduser(cache_dir)) if cache_dir else None
    return {**os.environ, **cache_env(expanded)}


def prefetch(spec: JobSpec, overrides: Sequence[str], config_dir: str | None) -> str | None:
    """Submit the prefetch job (its id), or run it here (None)."""
    what = what_to_run(spec, overrides, config_dir)
    workdir = workdir_of(spec)
    if spec.cluster.is_slurm and spec.cluster.prefetch_partition:
        return _submit(spec, what, workdir)
    env = here_env(spec)
    print(f"prefetch: the run's start, here, with the network (caches: {_caches(env)})")
    found = probe(what, False, float(SCRIPT_BUDGET_S), env, workdir)
    print("\n".join(fetched_lines(found.accesses, env)))
    if found.returncode != 0 and not found.timed_out:
        print(f"prefetch: the run's start failed (exit {found.returncode})", file=sys.stderr)
        return None
    print("prefetch: done; a job on nodes without internet now reads these caches")
    return None


def _caches(env: dict[str, str]) -> str:
    return env.get("HF_HOME") or "the libraries' defaults under ~/.cache"


def _submit(spec: JobSpec, what: list[str], workdir: Path) -> str:
    from jeanzay_kit.slurm.commands import sbatch

    logs = workdir / spec.job.log_dir
    logs.mkdir(parents=True, exist_ok=True)  # Slurm does not create log folders
    child = [spec.job.python, "-m", "jeanzay_kit.offline.child", "--trace", "-"]
    child += ["--mode", "watch", "--report", "--project", str(workdir), *what]
    script = logs / f"{prefetch_name(spec)}.sbatch"
    script.write_text(render_prefetch(spec, str(workdir), child))
    job = sbatch(str(script.resolve()), cwd=str(workdir))
    print(
        f"submitted prefetch job {job} on {spec.cluster.prefetch_partition} "
        f"(log {logs / prefetch_name(spec)}-{job}.out)"
    )
    return job
