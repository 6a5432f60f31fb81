"""Evaluation: the validation set read through torch's DataLoader, batch by batch.

The set is `eval.data` when given, else the held-out end of the training dataset
(`train.eval_fraction`), cut to `eval.max_batches` global batches. Each sample is read by
exactly one data-parallel rank (runtime/sampler.py: `eval_share`), the loss is averaged over
samples (a mean-reducing loss times its batch's size, summed, all-reduced, divided by the
count), and each metric of `eval.metrics` (torchmetrics: `update(output, target)`,
`compute()`, `reset()`) is updated with the model's output and synchronised across the
ranks by its own `compute()`. Nothing is kept on the device between evaluations.

Pipeline modes evaluate whole global batches through the schedule, as they train; the
samples past the last whole global batch are left out, and the run says so once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from jeanzay_kit.config.spec import JobSpec
from jeanzay_kit.distributed.process_group import DistContext
from jeanzay_kit.errors import ContractError
from jeanzay_kit.runtime.sampler import eval_share
from jeanzay_kit.runtime.seeded_samples import keys
from jeanzay_kit.train.batch import split_batch, to_device
from jeanzay_kit.train.loader import (
    build_loader,
    eval_workers,
    fetch,
    stop_workers,
    workers_here,
)
from jeanzay_kit.train.loss import ComputeLoss
from jeanzay_kit.train.strategies.base import ReplicatedStrategy, Strategy


def prediction(output: Any) -> Any:
    """What a metric is updated with: the output tensor, or its logits (`.logits`, or a
    mapping's "logits": a Hugging Face-style output)."""
    if isinstance(output, Mapping) and "logits" in output:
        return output["logits"]
    logits = getattr(output, "logits", None)
    return logits if isinstance(logits, torch.Tensor) else output


def metric_target(batch: Any, target: Any) -> Any:
    """The target a metric compares with: the batch's (as the loss takes it), or a dict
    batch's "labels" when the model computes its own loss."""
    if target is None and isinstance(batch, Mapping):
        target = batch.get("labels")
    if target is None:
        raise ContractError(
            "eval.metrics: the batch has no target to compare the output with. HINT: "
            "return (inputs, target) from the dataset, a dict with 'labels', or name the "
            "key with loss.target_key"
        )
    return target


class Evaluator:
    """One attempt's evaluation: the set, this rank's share of it, its loader."""

    def __init__(
        self,
        spec: JobSpec,
        ctx: DistContext,
        dataset: Any,
        indices: np.ndarray,
        compute_loss: ComputeLoss,
        metrics: dict[str, Any],
    ):
        self.spec, self.ctx, self.dataset, self.indices = spec, ctx, dataset, indices
        self.compute_loss, self.metrics = compute_loss, metrics
        self.share = eval_share(
            len(indices), spec.layout.dp_size, ctx.dp_rank, spec.eval.micro_batch_size
        )
        # Keys (dataset index, position in the eval set), read without seeding: an
        # evaluation is never resumed half-way (runtime/seeded_samples.py).
        self.batch_lists = [keys(indices[b], b) for b in self.share.batches]
        self.loader = build_loader(
            dataset,
            self.batch_lists,
            spec.loader,
            workers=eval_workers(workers_here(spec.loader), len(self.batch_lists)),
            device_type=ctx.device.type,
            seed=spec.train.seed,
            seeded=False,
        )
        self._noted_remainder = False

    def run(self, strategy: Strategy) -> dict[str, float]:
        """eval_loss, eval_samples and eval_<name> for each metric."""
        strategy.train(False)
        try:
            if isinstance(strategy, ReplicatedStrategy):
                return self._replicated(strategy)
            return self._pipeline(strategy)
        finally:
            strategy.train(True)

    @torch.no_grad()
    def _replicated(self, strategy: ReplicatedStrategy) -> dict[str, float]:
        device, module = self.ctx.device, strategy.eval_module()
        totals = torch.zeros(2, dtype=torch.float64, device=device)  # loss x n, n
        it = iter(self.loader)
        spare = None  # a batch for the discarded calls of a rank with fewer batches
        try:
            for r in range(self.share.rounds):
                real = r < len(self.batch_lists)
                batch = to_device(next(it), device, self.loader.pin_memory) if real else spare
                if batch is None:  # fewer samples than ranks: this rank has none at all
                    one = fetch(self.loader, keys(self.indices[:1], np.arange(1)))
                    batch = to_device(one, device)
                spare = batch if spare is None else spare
                args, kwargs, target = split_batch(batch, self.compute_loss.target_key)
                with strategy.autocast():
                    output = module(*args, **kwargs)
                    loss = self.compute_loss.of_output(output, target)
                if not real:
                    continue
                n = len(self.batch_lists[r])
                totals += torch.stack([loss.detach().double() * n, loss.new_tensor(n).double()])
                for metric in self.metrics.values():
                    metric.update(prediction(output), metric_target(batch, target))
        finally:
            stop_workers(it)
        dist.all_reduce(totals, group=self.ctx.dp_group)
        record = {"eval_loss": float(totals[0] / totals[1]), "eval_samples": int(totals[1])}
        for name, metric in self.metrics.items():
            value = metric.compute()  # synchronised across the ranks by the metric
            metric.reset()
            if (
                isinstance(value, torch.Tensor)
                and value.numel() == 1
                or isinstance(value, (int, float))
            ):
                record[f"eval_{name}"] = float(value)
        return record

    @torch.no_grad()
    def _pipeline(self, strategy: Strategy) -> dict[str, float]:
        """Whole global batches through the schedule, split across ranks like a step."""
        g, m = self.spec.train.global_batch_size, self.spec.train.micro_batch_size
        dp, accum = self.spec.layout.dp_size, self.spec.train.grad_accum_steps
        whole = len(self.indices) // g
        if len(self.indices) % g and self.ctx.is_main and not self._noted_remainder:
            print(
                f"note: a pipeline evaluates whole global batches: the last "
                f"{len(self.indices) % g} of the {len(self.indices)} eval samples are left "
                f"out (make the eval set a multiple of train.global_batch_size={g} to use "
                "them all)",
                flush=True,
            )
            self._noted_remainder = True
        losses = []
        for r in range(whole):
            micro = []
            for a in range(accum):
                start = r * g + a * dp * m + self.ctx.dp_rank * m
                picked = keys(self.indices[start : start + m], np.arange(start, start + m))
                micro.append(to_device(fetch(self.loader, picked), self.ctx.device))
            loss = strategy.eval_loss(micro)
            losses.append(loss if loss is not None else torch.zeros((), device=self.ctx.device))
        if not losses:
            return {}
        mean = strategy.global_mean(torch.stack(losses).mean())
        return {"eval_loss": mean, "eval_samples": whole * g}


def eval_indices(spec: JobSpec, size: int, first: int = 0) -> np.ndarray:
    """Positions [first, first + size) of the set, cut to eval.max_batches global batches."""
    cap = spec.eval.max_batches
    count = size if cap is None else min(size, cap * spec.train.global_batch_size)
    return np.arange(first, first + count)
