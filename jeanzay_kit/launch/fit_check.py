"""Fit before the queue: a plan whose per-GPU peak exceeds the GPU's memory is refused.

Every command that builds a job (`jzk validate`, `render`, `submit`, `tune`, each point of
a `-m` sweep: launch/request.py spec_of) asks `check` here. The training step is traced
on fake tensors (train/memory_trace.py), its bytes turned into one GPU's peak for the plan
(config/fit_rules.py), and compared with the profile's GPU memory for the partition and
constraint (cluster.partitions.<p>.gpu_memory). A plan above it gets one line: the
estimate, the limit, and a hint whose overrides were themselves checked and fit.

Traces are kept under $XDG_CACHE_HOME/jeanzay_kit/fit (else ~/.cache), named by a digest
of what the trace depends on, and each plan's answer by a digest of its whole config:
the same plan again is answered without importing torch. JZK_FIT_CHECK=0 turns the
check off (a model the trace cannot build is not refused: it gets a note). Edge module.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from jeanzay_kit.config import fit_rules as rules
from jeanzay_kit.config.spec import JobSpec
from jeanzay_kit.errors import JzkError, SpecError
from jeanzay_kit.train.fit_estimate import (
    PIPELINES,
    accumulates_gradients,
    combine,
    plan_of,
    trace_spec,
    traced_micro_batch,
)

ENV_SWITCH = "JZK_FIT_CHECK"
# Plans this process could not estimate (the note was printed): not tried again.
_UNESTIMATED: set[str] = set()
_VERSION = "2"  # bump when the trace or the rules change what they answer


@dataclass(frozen=True)
class Fit:
    """A checked plan: its estimate and the GPU it was checked against."""

    estimate: rules.Estimate
    gpu_mb: int
    gpu: str

    def figure(self) -> str:
        """The estimate and its GPU, as a run's manifest keeps it (an out-of-memory end
        says it: launch/status.py)."""
        return f"{rules.describe(self.estimate)} on the {rules.gpu_words(self.gpu_mb, self.gpu)}"

    def line(self) -> str:
        return (
            f"gpu memory      {rules.describe(self.estimate)}; fits the "
            f"{rules.gpu_words(self.gpu_mb, self.gpu)}"
        )


def cache_folder(env: Mapping[str, str]) -> Path | None:
    if env.get(ENV_SWITCH, "1") == "0":
        return None
    base = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME", "~")).expanduser() / ".cache")
    return Path(base) / "jeanzay_kit" / "fit"


def applies(spec: JobSpec) -> tuple[int, str] | None:
    """The GPU memory this plan is checked against, or None: not a GPU job of the toolkit's
    loop on a profile that knows its GPUs."""
    res = spec.resources
    if not spec.cluster.is_slurm or res.partition.cpu_only or spec.job.runs_script:
        return None
    return res.partition.gpu_memory_for(res.constraint)


def _digest(value: object) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _versions() -> list[str]:
    found = []
    for package in ("torch", "jeanzay_kit"):
        try:
            found.append(metadata.version(package))
        except metadata.PackageNotFoundError:
            found.append("?")
    return [*found, _VERSION]


_PACKAGE = Path(__file__).resolve().parents[1]
# The toolkit's code an estimate follows: the trace, the arithmetic, the shipped models.
_OWN_CODE = (
    "train/memory_trace.py",
    "train/fit_estimate.py",
    "config/fit_rules.py",
    "examples/models.py",
    "examples/datasets.py",
    "examples/tokens.py",
)


def _stamp(path: Path) -> list[object]:
    try:
        st = path.stat()
    except OSError:
        return [str(path)]
    return [str(path), st.st_size, st.st_mtime_ns]


def code_stamps(spec: JobSpec) -> list[object]:
    """Size and time of the code a trace runs: the toolkit's, and the modules of the
    model's and the data's `_target_` (a user who edits their model gets a new trace).
    A module is located, not imported (its parent packages may be)."""
    from importlib.util import find_spec

    stamps: list[object] = [_stamp(_PACKAGE / name) for name in _OWN_CODE]
    for node in (spec.model, spec.data):
        target = str(node.get("_target_", ""))
        module = target.rpartition(".")[0]
        try:
            found = find_spec(module) if module else None
        except (ImportError, ValueError):
            found = None
        if found is not None and found.origin:
            stamps.append(_stamp(Path(found.origin)))
    return stamps


def trace_key(spec: JobSpec) -> str:
    """What a trace depends on: the model, the data, the loss, the optimizer, the
    precision, recomputation, the samples per forward, and the pipeline's split."""
    cfg = spec.config
    lay = spec.layout
    return _digest(
        {
            "model": cfg.get("model"),
            "data": cfg.get("data"),
            "loss": cfg.get("loss"),
            "optim": _memory_of_optim(cfg.get("optim")),
            "precision": spec.train.precision,
            "ckpt": spec.train.activation_checkpointing,
            "micro": traced_micro_batch(spec),
            "accumulates": accumulates_gradients(spec),
            "stages": lay.pp_size if lay.mode in PIPELINES else 1,
            "versions": _versions(),
            "code": code_stamps(spec),
        }
    )


# The optimizer's values that change no memory (a number in its update, its schedule):
# a sweep of learning rates shares one trace (a 1,000-point sweep traced 1,000 times).
_NO_MEMORY = ("lr", "betas", "weight_decay", "warmup_steps", "min_lr_ratio", "grad_clip")


def _memory_of_optim(optim: Any) -> Any:
    """optim without the values that change no memory (momentum stays: SGD keeps a
    buffer only with it; fused stays: its kernels' workspace)."""
    if not isinstance(optim, dict):
        return optim
    return {k: v for k, v in optim.items() if k not in _NO_MEMORY}


def _read(folder: Path | None, name: str) -> Any:
    if folder is None:
        return None
    try:
        return json.loads((folder / f"{name}.json").read_text())
    except (OSError, ValueError):
        return None


def _write(folder: Path | None, name: str, value: object) -> None:
    if folder is None:
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{name}.tmp"
        tmp.write_text(json.dumps(value))
        tmp.replace(folder / f"{name}.json")  # a reader sees the old file or the new one
    except OSError:
        pass  # a cache that cannot be written only costs time


def _to_traced(item: Mapping[str, Any]) -> rules.Traced:
    return rules.Traced(
        **{
            **item,
            "backward": rules.Usage(**item["backward"]),
            "step": rules.Usage(**item["step"]),
        }
    )


def traces(spec: JobSpec, folder: Path | None) -> list[rules.Traced]:
    """The traced step of this plan's replica (or of each pipeline stage), cached."""
    key = "trace-" + trace_key(spec)
    cached = _read(folder, key)
    if cached is not None:
        return [_to_traced(t) for t in cached]
    found = trace_spec(spec)
    _write(folder, key, [asdict(t) for t in found])
    return found


def estimate_of(spec: JobSpec, folder: Path | None) -> rules.Estimate:
    return combine(spec, traces(spec, folder))


def knobs_of(spec: JobSpec, gpu_mb: int) -> rules.Knobs:
    from jeanzay_kit.config.micro_batch_rules import auto_options

    lay, res, train = spec.layout, spec.resources, spec.train
    options = auto_options(train.global_batch_size, lay.dp_size, lay.mode, res.gpus_per_node)
    sizes = res.partition.gpu_memory_mb
    return rules.Knobs(
        mode=lay.mode,
        micro_batch_size=train.micro_batch_size,
        smaller_micro_batches=tuple(
            sorted((m for m in options if m < train.micro_batch_size), reverse=True)
        )
        if not train.micro_batch_auto
        else (),
        activation_checkpointing=train.activation_checkpointing,
        nodes=res.nodes,
        per_replica=None if train.global_batch_auto else train.global_batch_size // lay.dp_size,
        larger_constraints=tuple(c for c, mb in sizes.items() if c and mb > gpu_mb),
    )


SpecOf = Callable[[Sequence[str]], JobSpec]


def find_hint(
    spec: JobSpec, overrides: Sequence[str], spec_of: SpecOf, gpu_mb: int, folder: Path | None
) -> tuple[tuple[str, ...], rules.Estimate] | None:
    """The first change (config/fit_rules.py candidates) whose own plan is valid and fits."""
    first = traces(spec, folder)[0]
    sizes = spec.resources.partition.gpu_memory_mb
    for change in rules.candidates(knobs_of(spec, gpu_mb)):
        # Before composing it (a second each): its model states alone too large?
        constraint = dict(c.partition("=")[::2] for c in change).get("resources.constraint")
        quick = rules.changed_plan(plan_of(spec), spec.resources.nodes, change)
        if rules.states_floor(quick, first) > rules.usable_bytes(
            sizes.get(constraint or "", gpu_mb)
        ):
            continue
        try:
            other = spec_of([*overrides, *change])
        except (SpecError, JzkError):
            continue  # not a valid request (a batch that does not divide, a QoS limit)
        gpu = applies(other)
        if gpu is None:
            continue
        limit = rules.usable_bytes(gpu[0])
        if rules.states_floor(plan_of(other), first) > limit:
            continue  # its model states alone are too large: no trace needed
        if estimate_of(other, folder).total <= limit:
            return change, estimate_of(other, folder)
    return None


def check(
    spec: JobSpec, overrides: Sequence[str], spec_of: SpecOf, env: Mapping[str, str]
) -> Fit | None:
    """The plan's fit, or a JzkError with its one line; None where nothing is checked."""
    gpu = applies(spec)
    if gpu is None or env.get(ENV_SWITCH, "1") == "0":
        return None
    folder = cache_folder(env)
    answer_key = "plan-" + _digest([spec.config, gpu, _versions(), code_stamps(spec)])
    if answer_key in _UNESTIMATED:  # said once per command, not stored: data may come
        return None
    cached = _read(folder, answer_key)
    if cached is None:
        cached = _answer(spec, overrides, spec_of, gpu, folder)
        if cached is not None:
            _write(folder, answer_key, cached)
    if cached is None:
        _UNESTIMATED.add(answer_key)
        return None
    if "refused" in cached:
        raise JzkError(cached["refused"])
    return Fit(rules.Estimate(**cached["estimate"]), gpu[0], gpu[1])


def _answer(
    spec: JobSpec,
    overrides: Sequence[str],
    spec_of: SpecOf,
    gpu: tuple[int, str],
    folder: Path | None,
) -> dict[str, Any] | None:
    try:
        estimate = estimate_of(spec, folder)
    except Exception as err:  # noqa: BLE001  # a model the fake tensors cannot build
        print(
            f"note: the GPU memory of this plan was not estimated ({type(err).__name__}: "
            f"{str(err).splitlines()[0] if str(err) else ''}): it is not checked before "
            f"the queue. {ENV_SWITCH}=0 skips the attempt",
            file=sys.stderr,
        )
        return None
    if estimate.total <= rules.usable_bytes(gpu[0]):
        return {"estimate": asdict(estimate)}
    hint = find_hint(spec, overrides, spec_of, gpu[0], folder)
    return {"refused": rules.refusal(spec.layout.mode, estimate, gpu[0], gpu[1], hint)}
