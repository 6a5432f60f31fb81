"""`jzk check`, and the check at the start of every run: your dataset, model and loss tried
on one real micro-batch before any job waits in a queue or any rank joins a collective.

It builds the dataset and the model as the job would (train/components.py), reads the
run's first micro-batch through the real loader (with its worker processes), runs
forward, loss and backward, and returns what it saw; or raises one ContractError whose
message names the key to change (`data._target_`, `model._target_`, `loss=`), what it got,
and the fix. The contracts are jeanzay_kit/contracts.py's.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from jeanzay_kit.config.modes import PIPELINE_MODES
from jeanzay_kit.config.spec import JobSpec
from jeanzay_kit.errors import ContractError, JzkError
from jeanzay_kit.runtime.sampler import plan_for
from jeanzay_kit.runtime.seeded_samples import keys
from jeanzay_kit.train import components as build
from jeanzay_kit.train.batch import describe, split_batch, to_device
from jeanzay_kit.train.evaluate import metric_target, prediction
from jeanzay_kit.train.loader import build_loader, stop_workers
from jeanzay_kit.train.micro_batch import for_check
from jeanzay_kit.train.parts import Parts, build_parts, tried
from jeanzay_kit.train.stream import build_stream_loader, is_stream


@dataclass(frozen=True)
class CheckReport:
    dataset: str  # class and length
    batch: str  # structure and shapes of one micro-batch
    output: str  # what the model returned
    loss: float
    parameters: int
    workers: int  # loader worker processes used
    fetch_s: float  # reading the micro-batch (workers starting included)
    step_s: float  # forward, loss and backward of the micro-batch

    def lines(self) -> list[str]:
        return [
            f"dataset     {self.dataset}",
            f"batch       {self.batch}  (loader.num_workers={self.workers}, "
            f"{self.fetch_s:.2f} s to read)",
            f"output      {self.output}",
            f"loss        {self.loss:.6g}",
            f"parameters  {self.parameters:,}",
            f"micro-batch {self.step_s:.3f} s forward+loss+backward",
        ]

    def summary(self) -> str:
        return (
            f"check: batch {self.batch} -> {self.output}, loss {self.loss:.4g}, "
            f"{self.parameters:,} parameters, {self.step_s:.3f} s per micro-batch"
        )


def check_here(spec: JobSpec, env: Mapping[str, str], cwd: Path) -> list[str]:
    """`jzk check`'s work on this machine's CPU, the project imported as the job imports
    it (./ or JZK_CODE_DIR first): the lines to print; ContractError on a break."""
    import os

    from jeanzay_kit.project.import_path import put_project_on_path

    put_project_on_path(env, cwd)
    cpus = spec.loader.cpus_per_process or os.cpu_count() or 1
    found = check_contracts(spec, torch.device("cpu"), "fp32", cpus)
    ok = "OK: the dataset, model and loss meet their contracts (docs/your-model-and-data.md)."
    return [*found.lines(), "", ok]


def check_contracts(
    spec: JobSpec, device: torch.device, precision: str, cpus: int = 1
) -> CheckReport:
    """Try the run's components on its first micro-batch; ContractError on a break."""
    return check_and_keep(spec, device, precision, cpus)[0]


def check_and_keep(
    spec: JobSpec, device: torch.device, precision: str, cpus: int = 1
) -> tuple[CheckReport, Parts]:
    """check_contracts, and the dataset, model and loss it tried, as built: the run's
    training uses them (train/parts.py), nothing is built twice."""
    parts = build_parts(spec, warn=True, device=device, guard=_guard)
    with tried(parts):
        found = _try(for_check(spec), parts, device, precision, cpus)
    return found, parts


def _try(
    spec: JobSpec, parts: Parts, device: torch.device, precision: str, cpus: int
) -> CheckReport:
    """for_check(spec): with micro_batch_size=auto, a small micro-batch, not the largest."""
    dataset, model, compute_loss = parts.dataset, parts.model, parts.compute_loss
    # One micro-batch is read by one worker: start at most two (the worker path and its
    # pickling are what is tried), not the 23 a Jean Zay H100 task would run.
    workers = min(spec.loader.workers_for(cpus), 2)
    started = time.perf_counter()
    batch = _first_micro_batch(spec, dataset, workers, device)
    fetch_s = time.perf_counter() - started
    _check_batch_shape(spec, batch)
    model.to(device)
    _check_pipeline_split(spec, model)
    model.train(True)
    started = time.perf_counter()
    with build.make_autocast(precision, device)():
        output = _forward(spec, model, batch, compute_loss.target_key)
        loss = _loss(spec, compute_loss, output, batch)
    _backward(spec, loss)
    step_s = time.perf_counter() - started
    _check_evaluation(spec, device, output, batch, compute_loss.target_key)
    return CheckReport(
        dataset=f"{type(dataset).__name__}, "
        + ("a stream" if is_stream(dataset) else f"{len(dataset):,} samples"),
        batch=describe(batch),
        output=describe(output),
        loss=float(loss.detach().float()),
        parameters=sum(p.numel() for p in model.parameters()),
        workers=workers,
        fetch_s=fetch_s,
        step_s=step_s,
    )


def _check_evaluation(
    spec: JobSpec, device: torch.device, output: Any, batch: Any, target_key: str | None
) -> None:
    """The validation set built, and each metric of eval.metrics built and updated once
    with this micro-batch's output and target: a metric that does not fit the model's
    output (num_classes, shapes, no target) is named here, before the queue, not at the
    first evaluation hours into the run."""
    if not spec.eval.every_steps:
        return
    if spec.eval.data:
        own = spec.eval.data
        _guard("eval.data", "validation set", lambda: build.build_eval_dataset(spec), own)
    if not spec.eval.metrics or spec.layout.pp_size > 1:  # pipelines refuse metrics earlier
        return
    metrics = build.build_metrics(spec, device)
    _, _, target = split_batch(batch, target_key)
    predicted, expected = prediction(output), metric_target(batch, target)
    for name, metric in metrics.items():
        try:
            with torch.no_grad():
                metric.update(predicted, expected)
                metric.compute()
        except JzkError:
            raise
        except Exception as err:
            node = spec.eval.metrics[name]
            raise ContractError(
                f"eval.metrics.{name}._target_={node.get('_target_')}: updating it with "
                f"the model's output {describe(predicted)} and the target "
                f"{describe(expected)} failed: {_last_line(err).rstrip('.')}. HINT: set its "
                f"arguments (+eval.metrics.{name}.num_classes=..., task) to fit the model's "
                "output"
            ) from None


def _guard(key: str, what: str, make: Any, node: Mapping[str, Any]) -> Any:
    """Whatever the class raises while it is built: one line naming its key."""
    try:
        return make()
    except JzkError:
        raise
    except Exception as err:
        raise ContractError(
            f"{key}._target_={node.get('_target_')}: building the {what} failed: {_last_line(err)}"
        ) from None


def _first_micro_batch(spec: JobSpec, dataset: Any, workers: int, device: torch.device) -> Any:
    """Rank 0's first micro-batch of the run, read as the loop reads it."""
    if is_stream(dataset):
        loader = build_stream_loader(
            dataset,
            spec.loader,
            workers=workers,
            device_type=device.type,
            micro_batch=spec.train.micro_batch_size,
            seed=0,
        )
    else:
        plan = plan_for(spec, 0, len(dataset))
        # One micro-batch and no more: the workers must not prefetch the rest of the step.
        only_first = [keys(plan.step_indices(0)[0], plan.step_positions(0)[0])]
        loader = build_loader(
            dataset,
            only_first,
            spec.loader,
            workers=workers,
            device_type=device.type,
            seed=spec.train.seed,
        )
    data_key = f"data._target_={spec.data.get('_target_')}"
    iterator = iter(loader)
    try:
        batch = next(iterator)
    except JzkError:
        raise
    except Exception as err:  # the user's __getitem__ or collate: any exception at all
        raise ContractError(
            f"{data_key}: reading a micro-batch of {spec.train.micro_batch_size} samples "
            f"failed{' in a loader worker' if workers else ''}: {_why(err)}. HINT: "
            f"{_fetch_hint(err, workers)}"
        ) from None
    finally:
        stop_workers(iterator)
    return to_device(batch, device)


def _why(err: BaseException) -> str:
    if isinstance(err, StopIteration):
        return "the stream ended before one micro-batch"
    return _last_line(err)


def _fetch_hint(err: BaseException, workers: int) -> str:
    if isinstance(err, StopIteration):
        return (
            "check how the dataset splits itself across ranks and loader workers "
            "(docs/your-model-and-data.md, 'Streaming data'), or lower train.micro_batch_size"
        )
    text = str(err)
    if "default_collate" in text or "collate" in type(err).__name__.lower():
        return (
            "torch's default_collate stacks tensors, numbers, dicts and lists: return "
            "tensors from __getitem__, or give loader.collate_fn a _target_ of yours"
        )
    if workers:
        return "`jzk check loader.num_workers=0` runs the dataset here, with its traceback"
    return "fix __getitem__/__getitems__ of the dataset (it must accept every index below len)"


def _check_batch_shape(spec: JobSpec, batch: Any) -> None:
    """A batch the chosen loss and parallel mode can use (train/batch.py's rules)."""
    what = describe(batch)
    form = spec.loss.form
    if not _has_tensor(batch):
        raise ContractError(
            f"data._target_={spec.data.get('_target_')}: the batch holds no tensor ({what}). "
            "HINT: return tensors from __getitem__ (or give loader.collate_fn a _target_)"
        )
    if spec.layout.mode in PIPELINE_MODES and not (
        isinstance(batch, (list, tuple)) and len(batch) == 2
    ):
        raise ContractError(
            f"parallel.mode={spec.layout.mode}: a pipeline needs (inputs, target) batches, its "
            f"first stage taking the inputs and its last the target; the batch is {what}. "
            "HINT: return (inputs, target) samples, or use parallel=ddp or fsdp"
        )
    _, _, target = split_batch(batch, spec.loss.target_key)
    if form in ("criterion", "model") and target is None:
        raise ContractError(
            f"loss={form}: the batch has no target ({what}): tuple batches end with the "
            "target; a dict batch needs loss.target_key. HINT: set loss.target_key=<key "
            "of the target>, or use loss=output when the model computes its loss"
        )
    if isinstance(batch, Mapping) and spec.loss.target_key not in (None, *batch.keys()):
        raise ContractError(
            f"loss.target_key={spec.loss.target_key}: the batch has no such key ({what}). "
            f"HINT: use one of {', '.join(map(str, batch.keys()))}"
        )


def _has_tensor(batch: Any) -> bool:
    if isinstance(batch, torch.Tensor):
        return True
    if isinstance(batch, Mapping):
        return any(_has_tensor(v) for v in batch.values())
    if isinstance(batch, (list, tuple)):
        return any(_has_tensor(v) for v in batch)
    return False


def _check_pipeline_split(spec: JobSpec, model: nn.Module) -> None:
    if spec.layout.mode in PIPELINE_MODES and not callable(getattr(model, "pipeline_chunk", None)):
        raise ContractError(
            f"parallel.mode={spec.layout.mode}: {type(model).__name__} (model._target_="
            f"{spec.model.get('_target_')}) has no pipeline_chunk(index, count) to split it "
            "into stages. HINT: add one (jeanzay_kit/contracts.py: PipelineSplittable), or use "
            "parallel=ddp or fsdp"
        )


def _forward(spec: JobSpec, model: nn.Module, batch: Any, target_key: str | None) -> Any:
    args, kwargs, _ = split_batch(batch, target_key)
    call = "model(**batch)" if isinstance(batch, Mapping) else "model(inputs)"
    try:
        return model(*args, **kwargs)
    except Exception as err:
        raise ContractError(
            f"model._target_={spec.model.get('_target_')}: {call} failed on the batch "
            f"{describe(batch)}: {_last_line(err)}. HINT: a tuple batch calls model(inputs) "
            "with its last element as the target; a dict batch calls model(**batch)"
        ) from None


def _loss(spec: JobSpec, compute_loss: Any, output: Any, batch: Any) -> torch.Tensor:
    form = spec.loss.form
    key = (
        f"loss=criterion (loss.criterion._target_={spec.loss.criterion.get('_target_')})"
        if form == "criterion" and spec.loss.criterion
        else f"loss={form}"
    )
    _, _, target = split_batch(batch, spec.loss.target_key)
    try:
        loss = compute_loss.of_output(output, target)
    except JzkError:
        raise
    except Exception as err:
        raise ContractError(
            f"{key}: computing the loss failed on output {describe(output)} and target "
            f"{describe(target)}: {_last_line(err)}. HINT: {_loss_hint(form)}"
        ) from None
    _check_scalar(key, loss)
    return loss


def _loss_hint(form: str) -> str:
    return {
        "criterion": "the criterion is called as criterion(output, target): check the "
        "output's and target's shapes and dtypes (CrossEntropyLoss wants int64 targets)",
        "model": "model.loss(output, target) is called with the model's output and the "
        "batch's last element",
    }.get(form, "loss=output reads a tensor, .loss or ['loss'] from what the model returns")


def _check_scalar(key: str, loss: Any) -> None:
    if not isinstance(loss, torch.Tensor):
        raise ContractError(
            f"{key}: the loss is a {type(loss).__name__}, not a scalar tensor. HINT: return "
            "only the loss tensor (log other values elsewhere)"
        )
    if loss.numel() != 1:
        raise ContractError(
            f"{key}: the loss has shape {list(loss.shape)}, not a scalar tensor. HINT: reduce "
            "it (reduction='mean', or .mean())"
        )
    if not loss.is_floating_point():
        raise ContractError(f"{key}: the loss is {loss.dtype}, not a floating-point tensor")
    if not loss.requires_grad:
        raise ContractError(
            f"{key}: the loss does not depend on the model's parameters (no gradient). "
            "HINT: compute it from the model's output, without .item(), .detach() or "
            "torch.no_grad()"
        )


def _backward(spec: JobSpec, loss: torch.Tensor) -> None:
    try:
        loss.float().backward()
    except Exception as err:
        raise ContractError(
            f"model._target_={spec.model.get('_target_')}: backward failed: {_last_line(err)}"
        ) from None


def _last_line(err: BaseException) -> str:
    lines = [line.strip() for line in str(err).strip().splitlines() if line.strip()]
    return f"{type(err).__name__}: {lines[-1] if lines else ''}"[:400]
