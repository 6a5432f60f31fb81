"""Validators of how the model is spread over the ranks: the parallel layout, the batch
arithmetic (gradient accumulation) and the precision. Pure; see config/collector.py."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from jeanzay_kit.config.clusters import ClusterProfile
from jeanzay_kit.config.collector import Collector, complete
from jeanzay_kit.config.micro_batch_rules import auto_options
from jeanzay_kit.config.modes import AUTO_MICRO_MODES, MODES, PIPELINE_MODES
from jeanzay_kit.distributed.layout import ParallelLayout

SCHEDULES = ("gpipe", "1f1b", "interleaved_1f1b")
LAUNCHERS = ("srun", "torchrun")
PRECISIONS = ("auto", "bf16", "fp16", "fp32")


@dataclass(frozen=True)
class ParallelRequest:
    """parallel.* and the batch sizes, each checked on its own."""

    mode: str
    launcher: str
    schedule: str
    stages: int
    microbatches: int
    stages_per_rank: int
    global_batch: int
    micro_batch: int  # with micro_auto: the largest candidate once the layout is known
    micro_auto: bool = False  # train.micro_batch_size=auto (train/micro_batch.py)
    global_auto: bool = False  # train.global_batch_size=auto (settle_global_batch)

    @property
    def one_task_per_node(self) -> bool:
        return self.launcher == "torchrun" or self.mode == "dataparallel"


def read_parallel(
    c: Collector, par: Mapping[str, object], train: Mapping[str, object]
) -> ParallelRequest | None:
    micro = train.get("micro_batch_size")
    auto = micro == "auto"
    global_auto = train.get("global_batch_size") == "auto"
    return complete(
        ParallelRequest,
        mode=c.choice("parallel.mode", par.get("mode"), MODES),
        launcher=c.choice("parallel.launcher", par.get("launcher"), LAUNCHERS),
        schedule=c.choice("parallel.schedule", par.get("schedule"), SCHEDULES),
        stages=c.positive_int("parallel.pipeline_stages", par.get("pipeline_stages")),
        microbatches=c.positive_int("parallel.microbatches", par.get("microbatches")),
        stages_per_rank=c.positive_int("parallel.stages_per_rank", par.get("stages_per_rank")),
        # auto: 1 until settle_global_batch knows the data-parallel size.
        global_batch=1
        if global_auto
        else c.positive_int("train.global_batch_size", train.get("global_batch_size")),
        # auto: 1 until settle_micro_batch knows the data-parallel size.
        micro_batch=1 if auto else c.positive_int("train.micro_batch_size", micro),
        micro_auto=auto,
        global_auto=global_auto,
    )


# train.global_batch_size=auto: at least this many samples per optimizer step (the
# default before auto existed, so a run that took it then trains alike now).
AUTO_GLOBAL_AT_LEAST = 32


def auto_global_batch(micro: int, dp: int) -> int:
    """The smallest multiple of micro x dp (one micro-batch on every replica) that is
    at least AUTO_GLOBAL_AT_LEAST: accumulation makes up the rest on few GPUs, and many
    GPUs take one micro-batch each with none."""
    unit = max(1, micro * dp)
    return unit * -(-AUTO_GLOBAL_AT_LEAST // unit)


def settle_global_batch(req: ParallelRequest, dp: int) -> ParallelRequest:
    """train.global_batch_size=auto, once the data-parallel size `dp` is known (every
    check of the batch reads the settled request). With train.micro_batch_size=auto
    too, the micro-batch counts as 1 here (at least 32 samples, a multiple of the
    replicas) and auto then finds the micro-batch."""
    if not req.global_auto:
        return req
    micro = 1 if req.micro_auto else req.micro_batch
    return replace(req, global_batch=auto_global_batch(micro, dp))


# auto measures one whole replica of the model on one GPU; these modes split the model.


def settle_micro_batch(
    c: Collector, req: ParallelRequest, layout: ParallelLayout, gpn: int
) -> ParallelRequest:
    """train.micro_batch_size=auto: the largest micro-batch that keeps the global batch
    exact on this layout (the run searches downwards from it for what fits its GPU)."""
    if not req.micro_auto:
        return req
    if req.mode not in AUTO_MICRO_MODES:
        c.add(
            "train.micro_batch_size",
            "auto",
            f"but parallel.mode={req.mode} splits the model, and auto measures one whole "
            "replica on one GPU",
            "set a number, e.g. train.micro_batch_size=8, or use parallel.mode=ddp",
        )
        return req
    dp = layout.dp_size
    if not dp or req.global_batch % dp:
        c.add(
            "train.global_batch_size",
            req.global_batch,
            f"is not divisible by the data-parallel size {dp} (train.micro_batch_size=auto "
            "divides each replica's share)",
            f"use train.global_batch_size={max(dp, round(req.global_batch / max(dp, 1)) * dp)}",
        )
        return req
    options = auto_options(req.global_batch, dp, req.mode, gpn)
    if not options:  # dataparallel: a share that no multiple of the GPUs divides
        c.add(
            "train.global_batch_size",
            req.global_batch,
            f"leaves {req.global_batch // dp} samples per replica, which no micro-batch "
            f"divisible by the {gpn} GPUs of nn.DataParallel divides",
            f"use a multiple of {gpn * dp} for train.global_batch_size",
        )
        return req
    return replace(req, micro_batch=options[-1])


def check_layout(c: Collector, req: ParallelRequest, nodes: int, gpn: int) -> ParallelLayout:
    """World, pipeline and data-parallel sizes for the ranks the resources give."""
    world = nodes * gpn
    if req.mode == "dataparallel":
        _check_dataparallel(c, req, nodes, gpn)
        world, pp, dp = 1, 1, 1
    elif req.mode in PIPELINE_MODES:
        pp = req.stages
        dp = world // pp if world % pp == 0 else 0
        _check_pipeline(c, settle_global_batch(req, dp), world, nodes, gpn, dp)
    else:
        pp, dp = 1, world
    return ParallelLayout(
        req.mode, req.launcher, world, pp, dp, req.microbatches, req.schedule, req.stages_per_rank
    )


def _check_dataparallel(c: Collector, req: ParallelRequest, nodes: int, gpn: int) -> None:
    if nodes > 1:
        c.add(
            "resources.nodes",
            nodes,
            "but parallel.mode=dataparallel runs in one process on one node",
            "use parallel.mode=ddp for several nodes",
        )
    if req.launcher == "torchrun":
        c.add(
            "parallel.launcher",
            req.launcher,
            "but parallel.mode=dataparallel is one process driving every GPU",
            "use parallel.launcher=srun",
        )
    mbs = req.micro_batch
    if mbs % gpn and not req.micro_auto:
        c.add(
            "train.micro_batch_size",
            mbs,
            f"is not divisible by the {gpn} GPUs nn.DataParallel splits it over",
            f"use train.micro_batch_size={max(gpn, mbs - mbs % gpn)}",
        )


def _check_pipeline(
    c: Collector, req: ParallelRequest, world: int, nodes: int, gpn: int, dp: int
) -> None:
    stages, mode = req.stages, req.mode
    if stages < 2:
        c.add(
            "parallel.pipeline_stages",
            stages,
            f"but parallel.mode={mode} needs at least 2",
            "use parallel.pipeline_stages=2, or parallel.mode=ddp",
        )
    elif mode == "pipeline" and stages != world:
        c.add(
            "parallel.pipeline_stages",
            stages,
            f"but resources.nodes x resources.gpus_per_node = {world} ranks; "
            "parallel.mode=pipeline puts one stage on each rank",
            f"use parallel.pipeline_stages={world}, or parallel.mode=pipeline_ddp "
            "for replicas of the pipeline",
        )
    elif world % stages:
        c.add(
            "parallel.pipeline_stages",
            stages,
            f"does not divide the world size {world} "
            f"(resources.nodes={nodes} x resources.gpus_per_node={gpn})",
            f"use a divisor of the world size, e.g. "
            f"parallel.pipeline_stages={_divisor_near(world, stages)}",
        )
    elif mode == "pipeline_ddp" and dp == 1:
        c.add(
            "parallel.mode",
            mode,
            f"but {world} ranks / {stages} stages leaves one replica",
            "use parallel.mode=pipeline, or more GPUs for several replicas",
        )
    _check_schedule(c, req, dp)


def _check_schedule(c: Collector, req: ParallelRequest, dp: int) -> None:
    """One schedule step runs microbatches x accumulation pipeline micro-batches."""
    if req.micro_auto:
        return  # refused with these modes (settle_micro_batch): nothing to check against
    stages, micro, mbs, gbs = req.stages, req.microbatches, req.micro_batch, req.global_batch
    accum = gbs // (dp * mbs) if dp and gbs % (dp * mbs) == 0 else 1
    total = micro * accum
    if req.schedule == "1f1b" and total < stages:
        c.add(
            "parallel.microbatches",
            micro,
            f"x {accum} accumulation step(s) is below parallel.pipeline_stages="
            f"{stages}; the 1F1B schedule needs at least one micro-batch per stage",
            f"use parallel.microbatches={-(-stages // accum)}",
        )
    if req.schedule == "interleaved_1f1b":
        rounds = max(1, total // stages)
        if total % rounds:
            c.add(
                "parallel.microbatches",
                micro,
                f"x {accum} accumulation step(s) = {total} micro-batches is not a "
                f"multiple of the {rounds} rounds interleaved 1F1B makes of {stages} stages",
                f"use a multiple of parallel.pipeline_stages, e.g. parallel.microbatches={stages}",
            )
    if mbs % micro:
        c.add(
            "train.micro_batch_size",
            mbs,
            f"is not divisible by parallel.microbatches={micro} "
            "(each pipeline micro-batch must have the same size)",
            f"use train.micro_batch_size={micro * max(1, mbs // micro)}",
        )


def check_accumulation(c: Collector, req: ParallelRequest, dp: int) -> int:
    """Micro-batches per optimizer step on each replica; 0 when the sizes do not divide."""
    gbs, mbs = req.global_batch, req.micro_batch
    if not dp:
        return 0
    if gbs % (dp * mbs):
        c.add(
            "train.global_batch_size",
            gbs,
            f"is not divisible by data-parallel size {dp} x train.micro_batch_size={mbs} "
            f"(= {dp * mbs})",
            f"use train.global_batch_size={max(dp * mbs, round(gbs / (dp * mbs)) * dp * mbs)}",
        )
        return 0
    return gbs // (dp * mbs)


def check_precision(c: Collector, cluster: ClusterProfile, value: object) -> str | None:
    """bf16/fp16/fp32 as asked, or resolved from the hardware for auto ("auto" is kept on
    cluster=local, where the machine decides at run time)."""
    precision = c.choice("train.precision", value, PRECISIONS)
    cname = cluster.name
    if precision == "bf16" and not cluster.bf16:
        c.add(
            "train.precision",
            precision,
            f"but {cname} GPUs have no bfloat16 support",
            "use train.precision=fp16 (with loss scaling) or train.precision=auto",
        )
    if precision == "fp16" and cluster.device == "cpu":
        c.add(
            "train.precision",
            precision,
            f"but {cname} trains on the CPU, where fp16 is slow and unsupported by many kernels",
            "use train.precision=fp32 or bf16",
        )
    if precision == "auto" and cluster.device == "cuda":
        return "bf16" if cluster.bf16 else "fp16"
    if precision == "auto" and cluster.device == "cpu":
        return "fp32"
    return precision


def _divisor_near(n: int, wanted: int) -> int:
    divisors = [d for d in range(2, n + 1) if n % d == 0] or [n]
    return min(divisors, key=lambda d: (abs(d - wanted), d))
