"""hydra-submitit-launcher's keys, read by the jeanzay launcher for a Hydra app of yours. Pure.

`hydra/launcher=jeanzay` in your own `@hydra.main` app (docs/slurm.md, "Coming from
hydra-submitit-launcher") runs your task function on every task, as
hydra-submitit-launcher does, and takes its keys with their meaning. This module turns
them into what the toolkit validates (the overrides of its own config: `cluster=`,
`resources.*`, ...; config/spec.py checks them against the cluster profile) and into
what only the submission needs (submitit's own options), or refuses a key it cannot
honour, naming why and what to use.

A key left unset (None) takes hydra-submitit-launcher's default (HSL_DEFAULTS): the
same app, with the same keys, asks for the same job under either launcher.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from jeanzay_kit.errors import LaunchError, TimeFormatError
from jeanzay_kit.slurm_syntax.timefmt import parse_time

# hydra-submitit-launcher 1.2's defaults (hydra_plugins/hydra_submitit_launcher/config.py).
HSL_DEFAULTS: dict[str, object] = {
    "timeout_min": 60,
    "nodes": 1,
    "tasks_per_node": 1,
    "signal_delay_s": 120,
    "max_num_timeout": 0,
    "stderr_to_stdout": False,
}

# The keys of hydra-submitit-launcher the jeanzay launcher takes (JeanzayLauncherConf).
APP_KEYS = (
    "cluster",
    "timeout_min",
    "nodes",
    "tasks_per_node",
    "gpus_per_node",
    "cpus_per_task",
    "mem_gb",
    "partition",
    "qos",
    "account",
    "constraint",
    "comment",
    "exclude",
    "gres",
    "cpus_per_gpu",
    "gpus_per_task",
    "mem_per_gpu",
    "mem_per_cpu",
    "max_num_timeout",
    "additional_parameters",
    "setup",
    "srun_args",
    "signal_delay_s",
    "name",
    "stderr_to_stdout",
)

# Keys the toolkit cannot honour as hydra-submitit-launcher does: why, and what to use.
_REFUSED = {
    "gres": (
        "the GPU request is written from the cluster profile (cluster.gpu_request: "
        "--gres=gpu:N or --gpus-per-node=N)",
        "set hydra.launcher.gpus_per_node=N",
    ),
    "cpus_per_gpu": (
        "the CPUs are validated per task against the node's CPUs",
        "set hydra.launcher.cpus_per_task (unset: the node's share for the task's GPUs)",
    ),
    "gpus_per_task": (
        "a task has one GPU (tasks_per_node=gpus_per_node) or the node's GPUs (tasks_per_node=1)",
        "set hydra.launcher.tasks_per_node and gpus_per_node",
    ),
    "mem_per_gpu": (
        "the memory is validated per node against the profile",
        "set hydra.launcher.mem_gb",
    ),
    "mem_per_cpu": (
        "the memory is validated per node against the profile",
        "set hydra.launcher.mem_gb",
    ),
}

# sbatch options the validated request writes itself: the launcher key that sets each.
_OWNED = {
    "time": "timeout_min",
    "t": "timeout_min",
    "nodes": "nodes",
    "N": "nodes",
    "ntasks-per-node": "tasks_per_node",
    "ntasks": "tasks_per_node",
    "n": "tasks_per_node",
    "gpus-per-node": "gpus_per_node",
    "gres": "gpus_per_node",
    "gpus": "gpus_per_node",
    "G": "gpus_per_node",
    "cpus-per-task": "cpus_per_task",
    "c": "cpus_per_task",
    "mem": "mem_gb",
    "partition": "partition",
    "p": "partition",
    "qos": "qos",
    "q": "qos",
    "account": "account",
    "A": "account",
    "constraint": "constraint",
    "C": "constraint",
    "job-name": "name",
    "J": "name",
    "signal": "signal_delay_s",
    "array": "array_parallelism",
    "output": "submitit_folder",
    "o": "submitit_folder",
    "error": "submitit_folder",
    "e": "submitit_folder",
}


@dataclass(frozen=True)
class AppRequest:
    """One point's launcher keys, translated: `overrides` of the toolkit's config (what
    config/spec.py validates against the profile) and submitit's options that only the
    submission needs (`extra`, added to what the validated spec asks for)."""

    overrides: tuple[str, ...]
    extra: tuple[tuple[str, object], ...]
    max_num_timeout: int

    @property
    def extra_dict(self) -> dict[str, object]:
        return dict(self.extra)


def _frozen(value: object) -> object:
    """A hashable copy (an AppRequest keys one composition and one array)."""
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), _frozen(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    return value


def _whole(key: str, value: object, least: int, problems: list[str]) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        problems.append(f"hydra.launcher.{key}={value!r} must be a whole number >= {least}")
        return None
    return value


def _tasks_layout(keys: Mapping[str, object], problems: list[str]) -> list[str]:
    """tasks_per_node against gpus_per_node: one task per GPU (srun starts each), or one
    task per node that sees the node's GPUs (parallel.launcher=torchrun's shape)."""
    gpus = keys.get("gpus_per_node")
    tasks = _whole("tasks_per_node", keys.get("tasks_per_node", 1), 1, problems)
    if gpus is None or gpus == 0:
        problems.append(
            "hydra.launcher.gpus_per_node is not set: the jeanzay launcher validates GPU "
            "jobs against the cluster profile. HINT: set hydra.launcher.gpus_per_node=N "
            "(with tasks_per_node=N: one task per GPU)"
        )
        return []
    gpn = _whole("gpus_per_node", gpus, 1, problems)
    if tasks is None or gpn is None:
        return []
    if tasks == gpn:
        return [f"resources.gpus_per_node={gpn}", "parallel.launcher=srun"]
    if tasks == 1:
        return [f"resources.gpus_per_node={gpn}", "parallel.launcher=torchrun"]
    problems.append(
        f"hydra.launcher.tasks_per_node={tasks} with gpus_per_node={gpn}: a task has one "
        f"GPU or all the node's GPUs. HINT: tasks_per_node={gpn} (one task per GPU) or "
        "tasks_per_node=1 (one task per node)"
    )
    return []


def _resource_overrides(keys: Mapping[str, object], problems: list[str]) -> list[str]:
    out = [f"cluster={keys['cluster']}"]
    minutes = _whole("timeout_min", keys.get("timeout_min", 60), 1, problems)
    nodes = _whole("nodes", keys.get("nodes", 1), 1, problems)
    if minutes is not None:
        out.append(f"resources.time={minutes}")
    if nodes is not None:
        out.append(f"resources.nodes={nodes}")
    out += _tasks_layout(keys, problems)
    if keys.get("cpus_per_task") is not None:
        cpus = _whole("cpus_per_task", keys["cpus_per_task"], 1, problems)
        out.append(f"resources.cpus_per_task={cpus}")
    mem = keys.get("mem_gb")
    if mem is not None:
        if isinstance(mem, bool) or not isinstance(mem, (int, float)) or mem <= 0:
            problems.append(f"hydra.launcher.mem_gb={mem!r} must be a positive number")
        else:  # sbatch takes whole units: a fraction of a GB in MB
            size = f"{int(mem)}G" if mem == int(mem) else f"{math.ceil(mem * 1024)}M"
            out.append(f"resources.mem={size}")
    for key in ("partition", "qos", "constraint"):
        if keys.get(key) is not None:
            out.append(f"resources.{key}={keys[key]}")
    if keys.get("account") is not None:
        out.append(f"cluster.account={keys['account']}")
    delay = _whole("signal_delay_s", keys.get("signal_delay_s", 120), 1, problems)
    if delay is not None:
        out.append(f"preemption.lead_seconds={delay}")
    return out


def _checked_additional(extra: object, problems: list[str]) -> dict[str, object]:
    if not isinstance(extra, Mapping):
        problems.append(f"hydra.launcher.additional_parameters={extra!r} must be a mapping")
        return {}
    out: dict[str, object] = {}
    for name, value in extra.items():
        option = str(name).replace("_", "-")
        owner = _OWNED.get(option)
        if owner is not None:
            problems.append(
                f"hydra.launcher.additional_parameters.{name} is --{option}, which the "
                f"validated request writes itself. HINT: set hydra.launcher.{owner}"
            )
            continue
        out[option] = value
    return out


def _submit_extra(keys: Mapping[str, object], problems: list[str]) -> dict[str, object]:
    extra: dict[str, object] = {}
    for key in ("comment", "exclude"):
        if keys.get(key) is not None:
            extra[key] = str(keys[key])
    additional = keys.get("additional_parameters")
    if additional:
        extra["additional_parameters"] = _checked_additional(additional, problems)
    for key in ("setup", "srun_args"):
        lines = keys.get(key)
        if lines is None:
            continue
        if isinstance(lines, str) or not isinstance(lines, Sequence):
            problems.append(f"hydra.launcher.{key}={lines!r} must be a list of strings")
            continue
        extra[key] = [str(line) for line in lines]
    extra["stderr_to_stdout"] = bool(keys.get("stderr_to_stdout") or False)
    return extra


def translate(keys: Mapping[str, object], job_name: str) -> AppRequest:
    """One point's hydra.launcher keys (unset ones None) -> its AppRequest, or LaunchError
    naming every key it cannot honour. job_name: hydra.job.name, for `name`'s default."""
    given = {k: v for k, v in keys.items() if v is not None}
    problems: list[str] = []
    if "cluster" not in given:
        problems.append(
            "hydra.launcher.cluster is not set: the jeanzay launcher checks every point "
            "against a cluster profile before anything is queued. HINT: "
            "hydra.launcher.cluster=jeanzay_h100 (jeanzay_v100, jeanzay_a100, or a profile "
            "of yours: `jzk clusters` lists them)"
        )
    for key in sorted(given.keys() & _REFUSED.keys()):
        why, use = _REFUSED[key]
        problems.append(f"hydra.launcher.{key}={given[key]!r}: {why}. HINT: {use}")
    overrides = _resource_overrides(given, problems) if "cluster" in given else []
    overrides.append(f"job.name={given.get('name', job_name)}")
    extra = _submit_extra(given, problems)
    timeouts = _whole("max_num_timeout", given.get("max_num_timeout", 0), 0, problems)
    if problems:
        raise LaunchError("\n  ".join(problems))
    pairs = tuple(sorted((key, _frozen(value)) for key, value in extra.items()))
    return AppRequest(tuple(overrides), pairs, timeouts or 0)


# The toolkit's keys in a refusal of the profile's checks -> the launcher key you set.
_IN_LAUNCHER_WORDS = {
    "resources.time": "hydra.launcher.timeout_min",
    "resources.nodes": "hydra.launcher.nodes",
    "resources.gpus_per_node": "hydra.launcher.gpus_per_node",
    "resources.cpus_per_task": "hydra.launcher.cpus_per_task",
    "resources.mem": "hydra.launcher.mem_gb",
    "resources.partition": "hydra.launcher.partition",
    "resources.qos": "hydra.launcher.qos",
    "resources.constraint": "hydra.launcher.constraint",
    "cluster.account": "hydra.launcher.account",
    "preemption.lead_seconds": "hydra.launcher.signal_delay_s",
    "parallel.launcher": "hydra.launcher.tasks_per_node",
    "job.name": "hydra.launcher.name",
}


def in_launcher_words(message: str) -> str:
    """A refusal of the toolkit's checks, naming the launcher keys you set instead of
    the toolkit keys they were translated to (`resources.gpus_per_node=8 ...` ->
    `hydra.launcher.gpus_per_node=8 ...`)."""
    for key, yours in _IN_LAUNCHER_WORDS.items():
        message = re.sub(rf"(?<![\w.]){re.escape(key)}(?![\w])", yours, message)
    # timeout_min is minutes: `timeout_min=116:40:00` -> `timeout_min=7000`.
    return re.sub(r"(hydra\.launcher\.timeout_min=)([\d:-]+\d)", _in_minutes, message)


def _in_minutes(match: re.Match[str]) -> str:
    try:
        return f"{match.group(1)}{parse_time(match.group(2))}"
    except TimeFormatError:
        return match.group(0)


# The toolkit's trainer's own key for each hydra-submitit-launcher key (a sweep of the
# trainer that sets one is told which to use instead).
TOOLKIT_KEYS = {
    "cluster": "cluster=<profile>",
    "timeout_min": "resources.time",
    "nodes": "resources.nodes",
    "tasks_per_node": "parallel.launcher (one task per GPU, or per node)",
    "gpus_per_node": "resources.gpus_per_node",
    "cpus_per_task": "resources.cpus_per_task",
    "mem_gb": "resources.mem",
    "partition": "resources.partition",
    "qos": "resources.qos",
    "account": "cluster.account",
    "constraint": "resources.constraint",
    "signal_delay_s": "preemption.lead_seconds",
    "name": "job.name",
    "srun_args": "job.srun_args",
    "additional_parameters": "job.sbatch_args",
    "comment": "job.sbatch_args",
    "exclude": "job.sbatch_args",
    "setup": "cluster.modules / cluster.env",
    "max_num_timeout": "preemption.max_restarts",
}
