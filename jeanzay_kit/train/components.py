"""The one place that builds what a run trains from the config's `_target_`s: the dataset,
the model, the loss, and around them the strategy, optimizer, scheduler and checkpointer.

A `_target_` that cannot be built is a ContractError naming its key (`data._target_`,
`model._target_`, `loss.criterion._target_`) with what went wrong, said once. A setting
the model cannot honour is said, never skipped in silence (`warn_unsupported`).
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import nn
from torch.utils.data import IterableDataset

from jeanzay_kit import report
from jeanzay_kit.ckpt.checkpointer import Checkpointer
from jeanzay_kit.config.modes import BY_NAME, COMPILE_MODES
from jeanzay_kit.config.sections import OptimSettings
from jeanzay_kit.config.spec import JobSpec
from jeanzay_kit.contracts import ActivationCheckpointable
from jeanzay_kit.distributed.process_group import DistContext
from jeanzay_kit.errors import ContractError
from jeanzay_kit.train.directions import best_direction
from jeanzay_kit.train.gpu_settings import compile_wanted, fused_wanted
from jeanzay_kit.train.loss import ComputeLoss
from jeanzay_kit.train.schedule import lr_lambda
from jeanzay_kit.train.strategies.base import Strategy

if TYPE_CHECKING:
    from jeanzay_kit.runtime.run import Run

# What a user who named a class without a YAML of its own most likely hit.
_LEAK_HINT = (
    "a class named on the command line keeps the keys of the shipped example: use "
    "{key}=custom {key}._target_=... (+{key}.arg=value for its arguments), or a YAML "
    "in your conf/{key}/"
)


def build_target(key: str, node: Mapping[str, Any], what: str) -> Any:
    """hydra.utils.instantiate(node), or a ContractError naming `key._target_`."""
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    target = node.get("_target_")
    if not isinstance(target, str) or target in ("", "???"):
        raise ContractError(
            f"{key}._target_ is not set: nothing names the {what}'s class. HINT: "
            f"{key}._target_=mypkg.module.ClassName (with {key}=custom on the command line, "
            f"or in your conf/{key.split('.')[0]}/*.yaml)"
        )
    try:
        return instantiate(dict(node))
    except InstantiationException as err:
        cause = err.__cause__ or err
        if not _is_contract_break(err):
            # The class ran and failed (a file missing on one node...): its own error,
            # with its traceback, through the restart budget like any failure.
            raise cause from None
        text = str(cause).strip().splitlines()[-1] if str(cause).strip() else type(cause).__name__
        hint = (
            _LEAK_HINT.format(key=key)
            if "unexpected keyword argument" in text
            else _missing_extra_hint(target) or f"check {key}._target_ and its arguments"
        )
        raise ContractError(
            f"{key}._target_={target}: could not build the {what}: {text}. HINT: {hint}"
        ) from None


def _missing_extra_hint(target: str) -> str | None:
    """The extra to install when the target is in a package of one that is missing
    (`torchvision.datasets.ImageFolder` without the `vision` extra)."""
    from jeanzay_kit.extras import EXTRAS, install_hint, installed

    top = target.partition(".")[0]
    return install_hint(top) if top in EXTRAS and not installed(top) else None


def _is_contract_break(err: Exception) -> bool:
    """The target could not be found, or was called with arguments it does not take."""
    cause = err.__cause__
    return (
        cause is None
        or "Error locating target" in str(err)
        or (isinstance(cause, TypeError) and "argument" in str(cause))
    )


def build_dataset(spec: JobSpec) -> Any:
    """data: a map-style dataset, or a stream (torch's IterableDataset, train/stream.py)."""
    return build_map_dataset("data", spec.data, stream_ok=True)


def build_eval_dataset(spec: JobSpec) -> Any | None:
    """eval.data, the validation set of its own; None: the held-out end of data."""
    return build_map_dataset("eval.data", spec.eval.data) if spec.eval.data else None


def build_map_dataset(key: str, node: Mapping[str, Any], stream_ok: bool = False) -> Any:
    dataset = build_target(key, node, "dataset")
    named = f"{key}._target_={node.get('_target_')}"
    if isinstance(dataset, IterableDataset):
        if stream_ok:
            return dataset
        raise ContractError(
            f"{named}: {type(dataset).__name__} is an IterableDataset: a validation set is "
            "evaluated sample by sample, each sample once across the ranks, so it needs "
            "__getitem__ and __len__. HINT: give eval.data a map-style Dataset (the "
            "training data may stream)"
        )
    if not hasattr(dataset, "__getitem__") and not hasattr(dataset, "__getitems__"):
        raise ContractError(
            f"{named}: {type(dataset).__name__} has no __getitem__: the toolkit reads "
            "map-style datasets and streams. HINT: implement __getitem__(index) and "
            "__len__ (torch.utils.data.Dataset), or __iter__ in a "
            "torch.utils.data.IterableDataset"
        )
    try:
        size = len(dataset)
    except TypeError:
        raise ContractError(
            f"{named}: {type(dataset).__name__} has no __len__: the global-batch plan needs "
            "the number of samples. HINT: implement __len__, or make the dataset a "
            "torch.utils.data.IterableDataset to stream it"
        ) from None
    if size <= 0:
        raise ContractError(f"{named}: the dataset is empty")
    return dataset


def build_metrics(spec: JobSpec, device: torch.device) -> dict[str, Any]:
    """eval.metrics: each a torchmetrics-style object on the training device."""
    metrics = {}
    for name, node in spec.eval.metrics.items():
        metric = build_target(f"eval.metrics.{name}", node, "metric")
        missing = [
            m for m in ("update", "compute", "reset") if not callable(getattr(metric, m, None))
        ]
        if missing:
            raise ContractError(
                f"eval.metrics.{name}._target_={node.get('_target_')}: a "
                f"{type(metric).__name__} has no {', '.join(missing)}(): a metric has "
                "torchmetrics' interface. HINT: use a torchmetrics class, e.g. "
                "torchmetrics.classification.MulticlassAccuracy"
            )
        metrics[name] = metric.to(device) if hasattr(metric, "to") else metric
    return metrics


def build_model(spec: JobSpec, warn: bool) -> nn.Module:
    model = build_target("model", spec.model, "model")
    if not isinstance(model, nn.Module):
        raise ContractError(
            f"model._target_={spec.model.get('_target_')}: built a {type(model).__name__}, "
            "not a torch.nn.Module. HINT: name the model's class (or a function returning it)"
        )
    warn_unsupported(spec, model, warn)
    return model


def warn_unsupported(spec: JobSpec, model: nn.Module, warn: bool) -> None:
    """train.activation_checkpointing and FSDP per-block sharding need the model's help
    (jeanzay_kit/contracts.py): without it, say so instead of running at full memory."""
    name = type(model).__name__
    if spec.train.activation_checkpointing:
        if hasattr(model, "activation_checkpointing"):
            cast(ActivationCheckpointable, model).activation_checkpointing = True
        elif warn:
            _warning(
                f"train.activation_checkpointing=true, but {name} has no "
                "`activation_checkpointing` attribute: activations are stored as usual "
                "(full memory). HINT: recompute blocks with torch.utils.checkpoint when "
                "self.activation_checkpointing is true (docs/your-model-and-data.md)"
            )
    blocks = getattr(model, "blocks", None)
    if (
        spec.layout.mode == "fsdp"
        and warn
        and not isinstance(blocks, (nn.ModuleDict, nn.ModuleList))
    ):
        _warning(
            f"parallel.mode=fsdp: {name} has no `blocks` (nn.ModuleDict or nn.ModuleList): "
            "the whole model is one FSDP unit, gathered unsharded for every forward. "
            "HINT: keep the repeated layers in self.blocks"
        )


def _warning(text: str) -> None:
    print(f"{report.TRAIN}: warning: {text}", file=sys.stderr, flush=True)


def build_loss(spec: JobSpec, model: nn.Module) -> ComputeLoss:
    settings = spec.loss
    criterion = None
    if settings.form == "criterion":
        assert settings.criterion is not None  # config/data_rules.py checked it
        criterion = build_target("loss.criterion", settings.criterion, "criterion")
        if not callable(criterion):
            raise ContractError(
                f"loss.criterion._target_={settings.criterion.get('_target_')}: built a "
                f"{type(criterion).__name__}, which cannot be called as criterion(output, "
                "target). HINT: name a loss class such as torch.nn.CrossEntropyLoss"
            )
    elif settings.form == "model" and not callable(getattr(model, "loss", None)):
        raise ContractError(
            f"loss=model: {type(model).__name__} (model._target_={spec.model.get('_target_')})"
            " has no loss(output, target) method. HINT: use loss=criterion "
            "loss.criterion._target_=torch.nn.CrossEntropyLoss, or loss=output when the "
            "model returns its loss"
        )
    return ComputeLoss(settings, model, criterion)


def make_autocast(precision: str, device: torch.device) -> Callable[[], Any]:
    if precision in ("bf16", "fp16"):
        dtype = torch.bfloat16 if precision == "bf16" else torch.float16
        return lambda: torch.autocast(device_type=device.type, dtype=dtype)
    return contextlib.nullcontext


def resolve_precision(precision: str, device: torch.device) -> str:
    """precision=auto on the local profile: bf16 on a GPU that has it, fp16 on older GPUs,
    fp32 on the CPU (CPU autocast is rarely faster for these models)."""
    if precision != "auto":
        return precision
    if device.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    return "fp32"


def build_strategy(
    spec: JobSpec, ctx: DistContext, model: nn.Module, compute_loss: ComputeLoss, precision: str
) -> Strategy:
    scaler = (
        torch.amp.GradScaler("cuda") if precision == "fp16" and ctx.device.type == "cuda" else None
    )
    common = dict(
        ctx=ctx,
        compute_loss=compute_loss,
        autocast=make_autocast(precision, ctx.device),
        scaler=scaler,
    )
    mode = BY_NAME[spec.layout.mode]  # config/modes.py: one registration per mode
    compiled = compile_wanted(spec.train.compile, ctx.device, mode.name)
    if spec.train.compile and not mode.compiles and ctx.is_main:
        _warning(
            f"train.compile=true, but parallel.mode={mode.name} does not compile the model "
            f"(only {' and '.join(COMPILE_MODES)} do): it runs eager"
        )
    module, _, name = mode.strategy.partition(":")
    strategy_class = getattr(
        importlib.import_module(f"jeanzay_kit.train.strategies.{module}"), name
    )
    return cast(Strategy, strategy_class.from_job(model, spec, compiled=compiled, **common))


def build_optimizer(
    params, optim: OptimSettings, device: torch.device | None = None
) -> torch.optim.Optimizer:
    """optim.name: adamw or sgd (with momentum); optim.fused: torch's fused kernels (auto:
    on CUDA). None leaves torch's own choice (foreach where it can)."""
    fused = True if device is not None and fused_wanted(optim.fused, device) else None
    if optim.name == "sgd":
        return torch.optim.SGD(
            params,
            lr=optim.lr,
            momentum=optim.momentum,
            weight_decay=optim.weight_decay,
            fused=fused,
        )
    return torch.optim.AdamW(
        params, lr=optim.lr, betas=optim.betas, weight_decay=optim.weight_decay, fused=fused
    )


def build_scheduler(
    optimizer: torch.optim.Optimizer, optim: OptimSettings, steps: int
) -> torch.optim.lr_scheduler.LambdaLR:
    factor = lr_lambda(optim.warmup_steps or 1, steps, optim.min_lr_ratio)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def build_checkpointer(
    spec: JobSpec, strategy: Strategy, optimizer: torch.optim.Optimizer, run: Run
) -> Checkpointer:
    """The checkpointer of this run, from the runtime; it records the layout a resume is
    compared with."""
    keep_best = spec.checkpoint.keep_best
    return run.open_checkpointer(
        strategy.state_module(),
        optimizer,
        spec.layout.checkpoint_world(),
        spec.config,
        {
            "use_async": spec.checkpoint.use_async,
            "keep_best": (keep_best, best_direction(spec)) if keep_best else None,
            "writer_threads": spec.checkpoint.writer_threads,
        },
    )
