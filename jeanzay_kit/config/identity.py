"""What a config computes, as a value: the keys that may change between a checkpoint and
its resume, and the hash of the rest. Pure.

One rule for two uses: the checkpoint records `resume_hash(config)` and refuses another
(ckpt/checkpointer.py, ckpt/store.py), and the default run directory is named with its first
digits (config/resolvers.py), so a run directory holds one experiment.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shlex
from collections.abc import Iterable, Mapping, Sequence

from jeanzay_kit.values import as_node, items

# Keys that may change between a checkpoint and its resume without changing what is
# computed: how long to train, how often to log or save, where and how long the job runs.
RESUME_IGNORES = (
    "train.steps",
    "train.log_every",
    "train.eval_every",
    "train.eval_batches",
    # eval.data stays: with a validation set of its own, nothing of data is held out.
    "eval.every_steps",
    "eval.max_batches",
    "eval.micro_batch_size",
    "eval.metrics",
    "train.nonfinite",
    "checkpoint",
    "preemption",
    "watchdog",
    "metrics",
    "tune",  # what a search reads from the run, not what it computes
    "resume",
    "job",
    "cluster",
    "resources.time",
    # The number of data-parallel ranks: a checkpoint resumes on another one (the global
    # batch is fixed, accumulation adapts). A change in how the model is split is in
    # `parallel`, which stays in the hash (and ckpt/layout.py world_change refuses it).
    "resources.nodes",
    "resources.gpus_per_node",
    "resources.qos",
    "resources.partition",
    "resources.constraint",
    "resources.mem",
    "resources.cpus_per_task",
    "parallel.backend",
    "parallel.timeout_minutes",
    # How batches are loaded, never which: the order comes from the global-batch plan.
    "loader",
    # How fast the same math runs: compiled kernels, fused optimizer kernels, TF32 tensor
    # cores (a rounding-level change, like another number of GPUs). Turning one off to
    # debug a run keeps its checkpoints.
    "train.compile",
    "train.tf32",
    "optim.fused",
)


# Sections a resume ignores that still make a sweep point another run (a scaling sweep
# over resources.nodes, a longer train.steps); the others (job, cluster, checkpoint,
# preemption, watchdog, metrics, tune) say how a run is run, not which run it is.
_POINT_SECTIONS = ("train.", "resources.", "eval.", "loader.", "parallel.", "optim.")


def point_suffix(overrides: Iterable[str]) -> str:
    """6 hex digits naming the overrides of a sweep point that its config hash leaves
    out (RESUME_IGNORES) but that make it another run; "" when it has none."""

    picked = []
    for override in overrides:
        key, sep, _ = override.lstrip("+~").partition("=")
        ignored = any(key == k or key.startswith(k + ".") for k in RESUME_IGNORES)
        if sep and ignored and key.startswith(_POINT_SECTIONS):
            picked.append(override.lstrip("+~"))
    if not picked:
        return ""
    return hashlib.sha256("\n".join(sorted(picked)).encode()).hexdigest()[:6]


def resume_hash(config: Mapping[str, object]) -> str:
    """The config hash a checkpoint records: what must match for it to resume."""
    return config_hash(config, RESUME_IGNORES)


def config_hash(config: Mapping[str, object], ignore: Iterable[str] = ()) -> str:
    """sha256 of the config with `ignore`d dotted keys removed (canonical JSON)."""
    ignored = set(ignore)

    def strip(node: object, prefix: str) -> object:
        if isinstance(node, Mapping):
            return {
                k: strip(v, f"{prefix}{k}.")
                for k, v in sorted(node.items())
                if f"{prefix}{k}" not in ignored
            }
        if isinstance(node, (list, tuple)):
            return [strip(v, prefix) for v in node]
        return node

    canonical = json.dumps(strip(config, ""), sort_keys=True, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def config_differences(
    old: Mapping[str, object],
    new: Mapping[str, object],
    ignore: Iterable[str] = (),
    prefix: str = "",
) -> list[str]:
    """Dotted keys whose value differs between two configs, for the refusal message."""
    ignored = set(ignore)
    out = []
    for key in sorted(set(old) | set(new)):
        dotted = f"{prefix}{key}"
        if dotted in ignored:
            continue
        a, b = old.get(key), new.get(key)
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            out += config_differences(a, b, ignored, f"{dotted}.")
        elif a != b:
            out.append(f"{dotted}: {a!r} -> {b!r}")
    return out


def identity_args(args: Sequence[str], may_change: Iterable[str]) -> list[str]:
    """A script's arguments without the options named in job.args_may_change:
    `--name=value` drops the item, `--name value` drops both (a value is the next item
    when it does not start with -)."""
    names = set(may_change)
    out: list[str] = []
    skip_value = False
    for arg in args:
        if skip_value:
            skip_value = False
            if not arg.startswith("-"):
                continue
        if arg.startswith("-") and arg.split("=", 1)[0] in names:
            skip_value = "=" not in arg
            continue
        out.append(arg)
    return out


def script_identity(job: Mapping[str, object]) -> dict[str, object]:
    """What names a script task's run: its command, not the toolkit loop's keys (which
    it does not run) nor job.resume_args and job.args_may_change's options."""
    args = [str(a) for a in items(job.get("args"))]
    entry = str(job.get("entry", ""))
    # `-m  pkg.mod` and `-m pkg.mod` are one entry, as the task runs it; an unclosed
    # quote (refused by the checks) is hashed as written.
    with contextlib.suppress(ValueError):
        entry = " ".join(shlex.split(entry))
    return {
        "entry": entry,
        "args": identity_args(args, [str(a) for a in items(job.get("args_may_change"))]),
    }


def run_hash(config: Mapping[str, object], job: Mapping[str, object] | None = None) -> str:
    """The hash that names a run directory: the command of a script task (job.entry
    and job.args), else resume_hash(config). `job` is the job section when config lacks
    it (the resolver leaves it out: job.run_dir refers to this hash)."""
    from jeanzay_kit.config.entry import runs_script

    job = job if job is not None else as_node(config.get("job"))
    entry = str(job.get("entry", ""))
    if entry and runs_script(entry, str(job.get("entry_kind", "auto"))):
        canonical = json.dumps(script_identity(job), sort_keys=True)
        return hashlib.sha256(canonical.encode()).hexdigest()
    return resume_hash(config)
