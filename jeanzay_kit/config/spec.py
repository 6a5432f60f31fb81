"""The composed config -> one frozen, validated JobSpec, or one SpecError listing every problem.

Pure: takes the resolved config as plain dicts (the CLI and train.py compose it with
Hydra against the typed schema of config/schema.py), checks everything Slurm would
reject or a job would hang on, and resolves the automatic choices (QoS from the time,
CPUs per task from the node's share, precision from the hardware, gradient accumulation
from the batch sizes). Nothing is submitted until this passes, so a mistake costs a
second, not a queue wait.

The JobSpec is the only carrier of settings: every part of the job reads its section
(spec.resources, spec.layout, spec.train, spec.checkpoint...). `spec.config` is the
resolved config itself, kept only to be frozen into the job (the rendered script, the
checkpoint's config.json and its hash).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from jeanzay_kit.config import layout_rules, resource_rules
from jeanzay_kit.config import schema as schemas
from jeanzay_kit.config.clusters import ClusterProfile, profile_from_dict
from jeanzay_kit.config.collector import Collector, section
from jeanzay_kit.config.container_rules import check_container
from jeanzay_kit.config.data_rules import (
    check_eval,
    check_keep_best,
    check_loader,
    check_loader_cpus,
    check_loss,
    check_tune,
)
from jeanzay_kit.config.run_rules import (
    check_checkpoint,
    check_communication,
    check_job,
    check_metrics,
    check_optim,
    check_preemption,
    check_train_loop,
    check_watchdog,
    resolve_python,
)
from jeanzay_kit.config.schema import unknown_keys
from jeanzay_kit.config.sections import (
    CheckpointSettings,
    Communication,
    EvalSettings,
    JobSettings,
    LoaderSettings,
    LossSettings,
    MetricsSettings,
    OptimSettings,
    PreemptionSettings,
    Resources,
    TrainLoop,
    TrainSettings,
    TuneSettings,
    WatchdogSettings,
)
from jeanzay_kit.distributed.layout import ParallelLayout
from jeanzay_kit.values import as_node


@dataclass(frozen=True)
class JobSpec:
    """Everything needed to submit and run one job, validated and resolved."""

    cluster: ClusterProfile
    job: JobSettings
    resources: Resources
    layout: ParallelLayout
    comm: Communication
    train: TrainSettings
    optim: OptimSettings
    checkpoint: CheckpointSettings
    preemption: PreemptionSettings
    watchdog: WatchdogSettings
    metrics: MetricsSettings
    loader: LoaderSettings
    loss: LossSettings
    eval: EvalSettings
    tune: TuneSettings
    model: Mapping[str, Any]  # the `model` node, for hydra.utils.instantiate
    data: Mapping[str, Any]  # the `data` node, likewise
    config: Mapping[str, object]  # the whole resolved config, frozen into the job
    # Keys whose value was chosen automatically ("resources.qos", ...), for display only.
    auto_keys: tuple[str, ...] = field(default=(), compare=False)
    # Accepted, but worth a line in `jzk validate` (e.g. more loader workers than CPUs).
    notes: tuple[str, ...] = field(default=(), compare=False)

    @property
    def loaded_modules(self) -> tuple[str, ...]:
        """What the job's script loads: the profile's modules, and with a container the
        module that brings its runtime (Jean Zay: singularity). One rule for the script
        and `jzk validate`."""
        runtime = self.cluster.container_module if self.job.container else None
        return (*self.cluster.loaded_modules, *([runtime] if runtime else []))

    @property
    def script_watch(self) -> tuple[float, float, float]:
        """How a Slurm task watches the user's command (node/script_watch.py Watch): the
        hang timeout (0: not watched), the heartbeat, and the quiet allowed once a stop
        signal has reached it: half the lead, as a script asked to save must end before
        the limit. The rendered scripts' tasks and a sweep's tasks alike."""
        watchdog = self.watchdog
        return watchdog.stall_seconds, watchdog.heartbeat_seconds, self.preemption.lead_seconds / 2

    @property
    def omp_num_threads(self) -> int:
        """Threads per training process: the task's CPUs shared by the processes it runs."""
        res = self.resources
        procs_per_task = res.gpus_per_node if self.layout.launcher == "torchrun" else 1
        return max(1, res.cpus_per_task // procs_per_task)


def build_job_spec(
    cfg: Mapping[str, object],
    local_gpus: int | None = None,
    local_cpus: int | None = None,
    interpreter: str | None = None,
) -> JobSpec:
    """Validate the resolved config (plain dicts) and return the frozen JobSpec.

    local_gpus: GPUs visible on this machine, for resources.gpus_per_node=auto on
    cluster=local (one worker per GPU, or resource_rules.LOCAL_CPU_WORKERS without a
    GPU). local_cpus: this machine's CPUs, for loader.num_workers=auto on cluster=local.
    interpreter: the running Python (sys.executable), for job.python=auto.
    The caller detects them; this function stays pure.
    """
    loop_note = None
    script = _runs_script(section(cfg, "job"))
    if script:
        cfg, loop_note = _without_loop_keys(cfg)
    cluster = on_cpu_partition(
        profile_from_dict(section(cfg, "cluster")), section(cfg, "resources")
    )
    c = Collector()
    one = _each_value(c, cfg, cluster, local_gpus)
    c.raise_if_any()  # the checks below need the values above
    res, par, train = section(cfg, "resources"), section(cfg, "parallel"), section(cfg, "train")

    # ---- stage 2: against the cluster profile and each other -----------------------------
    nodes, gpn, _minutes, _mem = one.counts
    resources = resource_rules.check_resources(
        c, cluster, res, one.counts, one.request.one_task_per_node, one.preemption
    )
    layout = layout_rules.check_layout(c, one.request, nodes, gpn)
    request = layout_rules.settle_global_batch(one.request, layout.dp_size)
    request = layout_rules.settle_micro_batch(c, request, layout, gpn)
    grad_accum = layout_rules.check_accumulation(c, request, layout.dp_size)
    precision = layout_rules.check_precision(c, cluster, train.get("precision"))
    evaluation = check_eval(
        c, c.node("eval", cfg.get("eval")), one.loop, request.micro_batch, par.get("mode")
    )
    keep_best, keep_best_mode = check_keep_best(c, section(cfg, "checkpoint"), evaluation)
    # A config frozen before tune.* existed (a requeued job's) has none: the defaults.
    tune = check_tune(c, c.node("tune", cfg.get("tune")), evaluation, script, one.loop.get("steps"))
    c.raise_if_any()
    assert resources is not None and precision is not None and evaluation is not None
    cpus, where = _cpus_per_process(cluster.is_slurm, resources, layout, local_cpus)
    loader, notes = check_loader_cpus(c, one.loader, cpus, where)
    c.raise_if_any()

    assert tune is not None
    settled = _Settled(
        resources=resources,
        layout=layout,
        train=_train_settings(request, grad_accum, precision, one.loop),
        checkpoint=replace(one.ckpt, keep_best=keep_best, keep_best_mode=keep_best_mode),
        loader=loader,
        eval=evaluation,
        tune=tune,
        notes=(*notes, loop_note) if loop_note else notes,
    )
    return _assemble(cfg, cluster, one, settled, interpreter)


def on_cpu_partition(cluster: ClusterProfile, res: Mapping[str, object]) -> ClusterProfile:
    """The profile as a job on a partition without GPUs sees it: device cpu (gloo, fp32,
    no --nv), whatever the profile's GPU partitions need."""
    partition = cluster.partitions.get(str(res.get("partition") or cluster.default_partition))
    return replace(cluster, device="cpu") if partition and partition.cpu_only else cluster


def _train_settings(
    request: layout_rules.ParallelRequest, accumulation: int, precision: str, loop: TrainLoop
) -> TrainSettings:
    return TrainSettings(
        global_batch_size=request.global_batch,
        micro_batch_size=request.micro_batch,
        micro_batch_auto=request.micro_auto,
        global_batch_auto=request.global_auto,
        grad_accum_steps=accumulation,
        precision=precision,
        **loop,
    )


def _assemble(
    cfg: Mapping[str, object],
    cluster: ClusterProfile,
    one: _EachValue,
    settled: _Settled,
    interpreter: str | None,
) -> JobSpec:
    """The frozen JobSpec from stage 1's values and stage 2's."""
    return JobSpec(
        cluster=cluster,
        job=replace(
            one.job,
            python=resolve_python(
                one.job.python,
                cluster.pytorch_module,
                interpreter,
                container=one.job.container is not None,
            ),
        ),
        comm=one.comm,
        optim=one.optim,
        preemption=one.preemption,
        watchdog=one.watchdog,
        metrics=one.metrics,
        loss=one.loss,
        model=dict(section(cfg, "model")),
        data=dict(section(cfg, "data")),
        config=_resolved_config(cfg, settled.resources),
        auto_keys=_auto_keys(cfg),
        resources=settled.resources,
        layout=settled.layout,
        train=settled.train,
        checkpoint=settled.checkpoint,
        loader=settled.loader,
        eval=settled.eval,
        tune=settled.tune,
        notes=settled.notes,
    )


@dataclass(frozen=True)
class _EachValue:
    """Stage 1: every section checked on its own (config/*_rules.py)."""

    job: JobSettings
    counts: tuple[int, int, int, str | None]  # nodes, GPUs per node, minutes, --mem
    request: layout_rules.ParallelRequest
    loop: TrainLoop
    optim: OptimSettings
    ckpt: CheckpointSettings
    preemption: PreemptionSettings
    comm: Communication
    watchdog: WatchdogSettings
    metrics: MetricsSettings
    loader: LoaderSettings
    loss: LossSettings


@dataclass(frozen=True)
class _Settled:
    """Stage 2: what needs the profile and the other sections (the layout, the batch)."""

    resources: Resources
    layout: ParallelLayout
    train: TrainSettings
    checkpoint: CheckpointSettings
    loader: LoaderSettings
    eval: EvalSettings
    tune: TuneSettings
    notes: tuple[str, ...]


def _each_value(
    c: Collector, cfg: Mapping[str, object], cluster: ClusterProfile, local_gpus: int | None
) -> _EachValue:
    """Every value on its own; the problems go to `c` (the caller raises them)."""
    res, par, train = section(cfg, "resources"), section(cfg, "parallel"), section(cfg, "train")
    job_cfg = section(cfg, "job")
    # Hydra refuses these while composing, except keys added with +key=value.
    for key, near, schema in unknown_keys(dict(cfg)):
        hint = f"did you mean {near}? " if near else ""
        c.add(key, _dig(cfg, key), f"is not a key of {schema}", hint + _SCHEMA_HINT)
    job = _job(c, job_cfg, cluster)
    counts = resource_rules.check_counts(c, cluster, res, local_gpus)
    request = layout_rules.read_parallel(c, par, train)
    loop = check_train_loop(c, train)
    optim = check_optim(c, section(cfg, "optim"))
    ckpt = check_checkpoint(
        c, section(cfg, "checkpoint"), job_cfg.get("run_dir"), cfg.get("resume")
    )
    preemption = check_preemption(c, section(cfg, "preemption"))
    comm = check_communication(c, par, cluster.device)
    watchdog = check_watchdog(c, section(cfg, "watchdog"))
    metrics = check_metrics(c, section(cfg, "metrics"))
    loader = check_loader(c, c.node("loader", cfg.get("loader")))
    loss = check_loss(c, c.node("loss", cfg.get("loss")), par.get("mode"))
    c.raise_if_any()
    # No problem collected: every check gave its value.
    assert job and counts and request and loop and optim and ckpt and preemption and comm
    assert watchdog and metrics and loader and loss
    nodes, gpn, minutes, mem = counts
    assert nodes is not None and gpn is not None and minutes is not None
    return _EachValue(
        job,
        (nodes, gpn, minutes, mem),
        request,
        loop,
        optim,
        ckpt,
        preemption,
        comm,
        watchdog,
        metrics,
        loader,
        loss,
    )


def _job(
    c: Collector, job_cfg: Mapping[str, object], cluster: ClusterProfile
) -> JobSettings | None:
    """job.*, with job.container checked against the profile (its runtime, Slurm)."""
    job = check_job(c, job_cfg)
    container = check_container(
        c,
        c.node("job.container", job_cfg.get("container")),
        cluster,
        pytorch_module=cluster.pytorch_module is not None,
    )
    return replace(job, container=container) if job is not None else None


# The keys of the toolkit's own loop, and their schema defaults: a script task (job.entry
# your own command) does not run that loop, so these are neither checked nor refused.
_LOOP_SECTIONS: dict[str, type] = {
    "train": schemas.TrainConfig,
    "optim": schemas.AdamWConfig,
    "loss": schemas.LossConfig,
    "loader": schemas.LoaderConfig,
    "eval": schemas.EvalConfig,
    "model": schemas.MLPConfig,
    "data": schemas.SyntheticConfig,
}


def _runs_script(job: Mapping[str, object]) -> bool:
    from jeanzay_kit.config.entry import runs_script

    entry, kind = job.get("entry"), job.get("entry_kind", "auto")
    return isinstance(entry, str) and isinstance(kind, str) and runs_script(entry, kind)


def _without_loop_keys(cfg: Mapping[str, object]) -> tuple[dict[str, object], str | None]:
    """cfg with the loop's sections at their defaults, and one note naming the keys that
    were set otherwise (None when none was)."""
    out = dict(cfg)
    changed = []
    for name, schema_class in _LOOP_SECTIONS.items():
        default = asdict(schema_class())
        given = cfg.get(name)
        given = given if isinstance(given, Mapping) else {}
        changed += [
            f"{name}.{key}"
            for key in sorted(set(given) | set(default))
            if given.get(key) != default.get(key)
        ]
        out[name] = default
    if not changed:
        return out, None
    shown = ", ".join(changed[:6]) + (f" and {len(changed) - 6} more" if len(changed) > 6 else "")
    return out, (
        f"{shown}: keys of the toolkit's training loop, which a script task (job.entry your "
        "own command) does not run: neither checked nor used. HINT: give your script its "
        "own arguments after `--` (or in job.args)"
    )


# Keys whose value the toolkit chose ("auto", or null where null means "follow another"):
# what `jzk validate` says was chosen, and what a later rule must not take as asked.
AUTO_KEYS = (
    "resources.gpus_per_node",
    "resources.cpus_per_task",
    "resources.qos",
    "job.python",
    "loader.num_workers",
    "eval.micro_batch_size",
)


def _auto_keys(cfg: Mapping[str, object]) -> tuple[str, ...]:
    def given(key: str) -> object:
        group, name = key.split(".")
        return as_node(cfg.get(group)).get(name, schemas.default(key))

    return tuple(key for key in AUTO_KEYS if given(key) in (None, "auto"))


def _cpus_per_process(
    is_slurm: bool, res: Resources, layout: ParallelLayout, local_cpus: int | None
) -> tuple[int | None, str]:
    """The CPUs one training process has, and where that figure comes from."""
    if is_slurm:
        per_task = res.gpus_per_node if layout.launcher == "torchrun" else 1
        return max(1, res.cpus_per_task // per_task), (
            f"resources.cpus_per_task={res.cpus_per_task}"
            + (f" shared by {per_task} processes" if per_task > 1 else "")
        )
    if local_cpus is None:
        return None, ""
    return max(1, local_cpus // layout.world_size), (
        f"{local_cpus} CPU(s) here shared by {layout.world_size} worker(s)"
    )


_SCHEMA_HINT = "jeanzay_kit/config/schema.py lists every key"  # as config/compose.py says


def _dig(cfg: Mapping[str, object], dotted: str) -> object:
    node: object = cfg
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, Mapping) else None
    return node


def _resolved_config(cfg: Mapping[str, object], res: Resources) -> dict[str, object]:
    """The config with the automatic choices written in, so the job re-validates to the
    same request on the nodes whatever machine it lands on."""
    out = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in cfg.items()}
    chosen = dict(as_node(out["resources"]))
    out["resources"] = chosen
    chosen["gpus_per_node"] = res.gpus_per_node
    chosen["cpus_per_task"] = res.cpus_per_task
    chosen["partition"] = res.partition.name
    chosen["constraint"] = res.constraint
    if res.qos is not None:
        chosen["qos"] = res.qos
    return out
