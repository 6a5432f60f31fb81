"""The prefetch job's script (`jzk prefetch`, `jzk submit --prefetch`): one task on the
partition that has the network (cluster.prefetch_partition), running the run's start with
the libraries' caches set (no offline switch), so they download once. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence

from jeanzay_kit.config.spec import JobSpec
from jeanzay_kit.slurm.offline_env import cache_env
from jeanzay_kit.slurm.sbatch import directive, slurm_pattern_literal
from jeanzay_kit.slurm.shell_words import expanding_word, shell_word
from jeanzay_kit.slurm_syntax.timefmt import format_time

# prepost's default limit on Jean Zay (IDRIS, "Jean Zay: CPU Slurm partitions"), less
# where the profile declares the partition with a shorter one (a job past it would pend
# for ever, and the training job after it too).
PREFETCH_MINUTES = 120
# A script task's start is run this long, then stopped (exit 124 of timeout: done).
SCRIPT_BUDGET_S = 600


def prefetch_minutes(spec: JobSpec) -> int:
    declared = spec.cluster.partitions.get(spec.cluster.prefetch_partition or "")
    limit = declared.max_minutes if declared is not None else None
    return min(PREFETCH_MINUTES, limit) if limit else PREFETCH_MINUTES


def prefetch_name(spec: JobSpec) -> str:
    return f"{spec.job.name}-prefetch"


def render_prefetch(spec: JobSpec, workdir: str, child: Sequence[str]) -> str:
    """The script; `child` is the traced run's command (python -m jeanzay_kit.offline.child
    ... WHAT) as words."""
    cluster, name = spec.cluster, prefetch_name(spec)
    logs = slurm_pattern_literal(spec.job.log_dir.rstrip("/") or "/")
    lines = ["#!/bin/bash", directive("job-name", name)]
    if spec.resources.account:
        lines.append(directive("account", spec.resources.account))
    lines += [
        directive("partition", cluster.prefetch_partition),
        directive("nodes", 1),
        directive("ntasks", 1),
        directive("time", format_time(prefetch_minutes(spec))),
        directive("output", f"{logs}/{name}-%j.out"),
        directive("error", f"{logs}/{name}-%j.err"),
        "",
        "# Downloads what the run's start reaches, into the caches the training job reads",
        "# (docs/offline.md); the network is on here, so no offline switch is set.",
        "set -euo pipefail",
    ]
    if cluster.module_purge:
        lines.append("module purge")
    lines += [f"module load {shell_word(m)}" for m in spec.loaded_modules]
    caches = cache_env(cluster.cache_dir)
    lines += [f"export {k}={expanding_word(v)}" for k, v in caches.items()]
    lines += [f"export {k}={shell_word(v)}" for k, v in cluster.env.items()]
    lines.append(f"cd {shell_word(workdir)}")
    command = " ".join(shell_word(w) for w in child)
    if spec.job.runs_script:  # its start only: it would train on
        lines.append(f"timeout {SCRIPT_BUDGET_S} {command} || [ $? -eq 124 ]")
    else:
        lines.append(command)
    return "\n".join(lines) + "\n"
