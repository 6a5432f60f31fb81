"""Validators of how batches are loaded, the loss computed and the model evaluated:
`loader.*`, `loss.*` and `eval.*`.
Pure; see config/collector.py for the message shape.

A section missing from the config (a config written before these groups existed, or a
test's plain dict) takes the defaults of conf/loader/default.yaml and conf/loss/model.yaml.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from jeanzay_kit.config.collector import Collector, complete
from jeanzay_kit.config.modes import PIPELINE_MODES
from jeanzay_kit.config.schema import default
from jeanzay_kit.config.sections import EvalSettings, LoaderSettings, LossSettings, TuneSettings
from jeanzay_kit.values import as_node, integer

LOSS_FORMS = ("criterion", "output", "model")

# A metric is logged as eval_<name>: a name that is a word keeps the key plain.
METRIC_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Above this many loader workers per CPU of a training process the workers only fight over
# the CPUs (IDRIS: light loaders may use a multiple of cpus-per-task, heavy ones fewer).
WORKERS_PER_CPU_LIMIT = 4
# loader.stream_resume: how a streaming dataset resumes (train/stream.py).
STREAM_RESUME = ("exact", "replay", "restart")


def check_loader(c: Collector, loader: Mapping[str, object] | None) -> LoaderSettings | None:
    loader = loader or {}
    workers_value = loader.get("num_workers", default("loader.num_workers"))
    workers = None
    if workers_value not in ("auto", None):
        workers = c.positive_int("loader.num_workers", workers_value, minimum=0)
        if workers is None:
            return None
    pin_value = loader.get("pin_memory", default("loader.pin_memory"))
    pin = None if pin_value in ("auto", None) else c.flag("loader.pin_memory", pin_value)
    persistent = c.flag(
        "loader.persistent_workers",
        loader.get("persistent_workers", default("loader.persistent_workers")),
    )
    prefetch = loader.get("prefetch_factor")
    if prefetch is not None:
        prefetch = c.positive_int("loader.prefetch_factor", prefetch)
    collate = loader.get("collate_fn")
    if collate is not None and not (isinstance(collate, Mapping) and collate.get("_target_")):
        c.add(
            "loader.collate_fn",
            collate,
            "must be null or a node with a _target_",
            "use +loader.collate_fn._target_=mypkg.data.collate (a function, or a class "
            "built with the node's other keys)",
        )
        return None
    stream_resume = c.choice(
        "loader.stream_resume",
        loader.get("stream_resume", "exact"),
        STREAM_RESUME,
        "exact resumes a stream from its saved state (or refuses), replay re-reads what "
        "was trained on, restart starts the stream again",
    )
    if stream_resume is None:
        return None
    if persistent is None or (pin_value not in ("auto", None) and pin is None):
        return None
    if persistent and workers == 0:
        c.add(
            "loader.persistent_workers",
            True,
            "needs worker processes (loader.num_workers=0)",
            "set loader.num_workers=auto or more, or loader.persistent_workers=false",
        )
        return None
    return LoaderSettings(
        workers,
        pin,
        persistent,
        prefetch,
        dict(collate) if collate else None,
        stream_resume=stream_resume,
    )


def check_loader_cpus(
    c: Collector, loader: LoaderSettings, cpus: int | None, where: str
) -> tuple[LoaderSettings, tuple[str, ...]]:
    """Against the CPUs of one training process (`where` says where they come from):
    resolve auto, refuse a count far beyond them, and note one above them."""
    if cpus is None:
        return loader, ()
    resolved = replace(loader, num_workers=loader.workers_for(cpus), cpus_per_process=cpus)
    workers = loader.num_workers
    if workers is None or workers <= cpus:
        return resolved, ()
    if workers > WORKERS_PER_CPU_LIMIT * cpus:
        c.add(
            "loader.num_workers",
            workers,
            f"is more than {WORKERS_PER_CPU_LIMIT}x the {cpus} CPU(s) of a training process "
            f"({where}): the workers would only fight over the CPUs",
            f"use loader.num_workers=auto ({max(0, cpus - 1)}), at most "
            f"{WORKERS_PER_CPU_LIMIT * cpus}, or ask for more CPUs (resources.cpus_per_task)",
        )
        return loader, ()
    note = (
        f"loader.num_workers={workers} is more than the {cpus} CPU(s) of a training process "
        f"({where}): fine for light loaders that wait on I/O, slower for decoding-heavy ones"
    )
    return resolved, (note,)


def check_loss(
    c: Collector, loss: Mapping[str, object] | None, mode: object
) -> LossSettings | None:
    loss = loss or {}
    form = c.choice("loss.form", loss.get("form", "model"), LOSS_FORMS)
    criterion = loss.get("criterion")
    target_key = loss.get("target_key")
    if target_key is not None and not isinstance(target_key, str):
        c.add("loss.target_key", target_key, "must be a key name or null", "use e.g. labels")
        return None
    if form == "criterion" and not (
        isinstance(criterion, Mapping)
        and isinstance(criterion.get("_target_"), str)
        and criterion.get("_target_") not in ("", "???")
    ):
        c.add(
            "loss.criterion._target_",
            criterion.get("_target_") if isinstance(criterion, Mapping) else criterion,
            "is not set: loss=criterion calls criterion(output, target)",
            "name the class, e.g. loss.criterion._target_=torch.nn.CrossEntropyLoss",
        )
        return None
    if form == "output" and mode in PIPELINE_MODES:
        c.add(
            "loss",
            "output",
            f"cannot be used with parallel.mode={mode}: a pipeline computes the loss on its "
            "last stage, from that stage's output and the target, while the model's own loss "
            "needs the whole model called on the whole batch",
            "use loss=criterion (loss.criterion._target_=...) or loss=model (a "
            "loss(output, target) method of the model)",
        )
        return None
    if form is None:
        return None
    return LossSettings(
        form=form,
        criterion=dict(as_node(criterion)) if form == "criterion" else None,
        target_key=target_key,
    )


def _names_a_class(node: object) -> bool:
    target = node.get("_target_") if isinstance(node, Mapping) else None
    return isinstance(target, str) and target not in ("", "???")


def check_eval(
    c: Collector,
    ev: Mapping[str, object] | None,
    loop: Mapping[str, object],
    micro_batch: int,
    mode: object,
) -> EvalSettings | None:
    """eval.*; where a new key is null, the older train.eval_every / train.eval_batches."""
    ev = ev or {}
    data = ev.get("data")
    if data is not None and not _names_a_class(data):
        c.add(
            "eval.data._target_",
            data.get("_target_") if isinstance(data, Mapping) else data,
            "is not set: eval.data is a dataset node, built like data",
            "name your validation set's class, e.g. +eval.data._target_=mypkg.data.Validation "
            "(its arguments as +eval.data.KEY=VALUE), or eval.data=null for the held-out "
            "end of the training data (train.eval_fraction)",
        )
    # train.eval_every and train.eval_batches: checked by run_rules (ints, or None).
    asked_every, asked_batches = ev.get("every_steps"), ev.get("max_batches")
    every = (
        integer(loop["eval_every"], None)
        if asked_every is None
        else c.positive_int("eval.every_steps", asked_every, 0)
    )
    if asked_batches is None:
        batches = integer(loop["eval_batches"], None)
        if batches == 0:  # the older spelling of "never"
            every = 0
    else:
        batches = c.positive_int("eval.max_batches", asked_batches)
    micro = ev.get("micro_batch_size")
    micro = micro_batch if micro is None else c.positive_int("eval.micro_batch_size", micro)
    metrics = _check_metrics(c, ev.get("metrics") or {}, mode)
    if every is None or micro is None or metrics is None or (data and not _names_a_class(data)):
        return None
    return EvalSettings(dict(as_node(data)) or None, every, batches or None, micro, metrics)


def _check_metrics(
    c: Collector, metrics: object, mode: object
) -> dict[str, dict[str, object]] | None:
    if not isinstance(metrics, Mapping):
        c.add(
            "eval.metrics",
            metrics,
            "must map a name to a metric node",
            "use e.g. +eval.metrics.accuracy._target_=torchmetrics.classification."
            "MulticlassAccuracy +eval.metrics.accuracy.num_classes=10",
        )
        return None
    ok = True
    for name, node in metrics.items():
        if not METRIC_NAME.fullmatch(str(name)):
            c.add(
                f"eval.metrics.{name}",
                name,
                "is not a plain name (it is logged as eval_<name>)",
                "use letters, digits and _, e.g. eval.metrics.top1",
            )
            ok = False
        elif not _names_a_class(node):
            c.add(
                f"eval.metrics.{name}._target_",
                node.get("_target_") if isinstance(node, Mapping) else node,
                "is not set: a metric is a node with a _target_ (torchmetrics' interface: "
                "update(output, target), compute(), reset())",
                f"use e.g. +eval.metrics.{name}._target_=torchmetrics.classification."
                f"MulticlassAccuracy +eval.metrics.{name}.num_classes=10",
            )
            ok = False
    if metrics and mode in PIPELINE_MODES:
        c.add(
            "eval.metrics",
            ", ".join(map(str, metrics)),
            f"cannot be used with parallel.mode={mode}: only the last stage sees the model's "
            "output, while a metric is updated with it on every data-parallel rank",
            "evaluate metrics in a run with parallel=ddp or fsdp, or leave eval.metrics "
            "empty (the eval loss is still reported)",
        )
        ok = False
    return {str(k): dict(v) for k, v in metrics.items()} if ok else None


def check_keep_best(
    c: Collector, ckpt: Mapping[str, object], ev: EvalSettings | None
) -> tuple[str | None, str]:
    """checkpoint.keep_best: `loss` or a name of eval.metrics, as its metrics.jsonl key."""
    name, mode = (
        ckpt.get("keep_best"),
        ckpt.get("keep_best_mode", default("checkpoint.keep_best_mode")),
    )
    mode = c.choice("checkpoint.keep_best_mode", mode, ("auto", "min", "max")) or default(
        "checkpoint.keep_best_mode"
    )
    if name is None or ev is None:
        return None, mode
    names = ["loss", *ev.metrics]
    bare = str(name).removeprefix("eval_")
    if bare not in names:
        c.add(
            "checkpoint.keep_best",
            name,
            f"is not an evaluated value (these are: {', '.join(names)})",
            "use checkpoint.keep_best=loss, or a name of eval.metrics (its direction "
            "comes from the metric: checkpoint.keep_best_mode=auto)",
        )
        return None, mode
    if not ev.every_steps:
        c.add(
            "checkpoint.keep_best",
            name,
            "needs evaluations, and eval.every_steps=0 runs none",
            "set eval.every_steps to a divisor of checkpoint.every_steps",
        )
        return None, mode
    return f"eval_{bare}", mode


DIRECTIONS = ("minimize", "maximize", "auto")


def check_tune(
    c: Collector,
    tune: Mapping[str, object],
    ev: EvalSettings | None,
    script: bool,
    steps: int | None = None,
) -> TuneSettings | None:
    """tune.objective: a value the run will have (runtime/run_result.py): train_loss,
    eval_loss or eval_<name of eval.metrics>; a script reports its own, any name. A list
    of them (with tune.direction one for all, or a list as long) is a study of several
    objectives."""
    objectives, directions = _objectives(c, tune, ev, script)
    params = _tune_params(c, tune.get("params") or {})
    storage = tune.get("storage", default("tune.storage"))
    seed = tune.get("seed", default("tune.seed"))
    if seed is not None:
        seed = c.positive_int("tune.seed", seed, minimum=0)
    sampler = c.choice("tune.sampler", tune.get("sampler", default("tune.sampler")), SAMPLERS)
    if len(objectives) > 1 and sampler == "cmaes":
        c.add(
            "tune.sampler",
            sampler,
            f"optimizes one objective, and tune.objective names {len(objectives)}",
            "use tune.sampler=nsga2, tpe, gp, qmc or random",
        )
    return complete(
        TuneSettings,
        nullable=("storage", "seed"),
        objective=objectives[0] if objectives else None,
        direction=directions[0] if directions else None,
        objectives=objectives or None,
        directions=directions or None,
        params=params,
        n_trials=c.positive_int("tune.n_trials", tune.get("n_trials", default("tune.n_trials"))),
        tasks=c.positive_int("tune.tasks", tune.get("tasks", default("tune.tasks"))),
        study_name=c.line("tune.study_name", tune.get("study_name") or "jzk", "use e.g. lr-search"),
        dir=c.line("tune.dir", tune.get("dir") or "tune/jzk", "use e.g. tune/lr-search"),
        storage=None if storage in (None, "") else str(storage),
        sampler=sampler,
        sampler_options=_sampler_options(c, tune.get("sampler_options")),
        pruner=c.choice("tune.pruner", tune.get("pruner", default("tune.pruner")), PRUNERS),
        prune_after_trials=c.positive_int(
            "tune.prune_after_trials",
            tune.get("prune_after_trials", default("tune.prune_after_trials")),
            minimum=0,
        ),
        prune_warmup_steps=_prune_warmup(c, tune.get("prune_warmup_steps"), steps),
        seed=seed,
    )


SAMPLERS = ("tpe", "random", "cmaes", "qmc", "gp", "nsga2")


def _objectives(
    c: Collector, tune: Mapping[str, object], ev: EvalSettings | None, script: bool
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """tune.objective and tune.direction, as tuples of one length (empty: a problem is
    in the Collector)."""
    names = _as_list(tune.get("objective", default("tune.objective")))
    if not names or len({str(n) for n in names}) < len(names):
        c.add("tune.objective", names, "names an objective twice, or none", "list each once")
        return (), ()
    known = None
    if not script and ev is not None:
        known = ["train_loss", "eval_loss", *(f"eval_{m}" for m in ev.metrics)]
    objectives = []
    for name in names:
        line = c.line("tune.objective", name, "use tune.objective=eval_loss")
        if line is not None and known is not None and line not in known:
            c.add(
                "tune.objective",
                line,
                f"is not a value this run reports (these are: {', '.join(known)})",
                "use tune.objective=eval_loss, or add the metric to eval.metrics",
            )
            line = None
        objectives.append(line)
    directions = _as_list(tune.get("direction", default("tune.direction")))
    if len(directions) == 1:
        directions *= len(names)
    if len(directions) != len(names):
        c.add(
            "tune.direction",
            directions,
            f"has {len(directions)} directions for the {len(names)} objectives of tune.objective",
            "give one per objective, in the same order, or one for all",
        )
        return (), ()
    chosen = [c.choice("tune.direction", d, DIRECTIONS) for d in directions]
    if None in objectives or None in chosen:
        return (), ()
    return tuple(map(str, objectives)), tuple(map(str, chosen))


def _as_list(value: object) -> list[object]:
    """A config value that may be one item or a list of them (a ListConfig too)."""
    if isinstance(value, Sequence) and not isinstance(value, str):
        return list(value)
    return [value]


def _prune_warmup(c: Collector, value: object, steps: int | None) -> int | None:
    """tune.prune_warmup_steps; null: a quarter of train.steps. Learning rates and sizes
    rank differently after a few hundred steps than at the first evaluation: pruned at
    step 100 in one study, a rate completed with the best value in another (issue 45;
    bench/bench_pruning.py measures the default against no pruning)."""
    if value is None:
        return (steps or 0) // 4
    return c.positive_int("tune.prune_warmup_steps", value, minimum=0)


def _sampler_options(c: Collector, options: object) -> tuple[tuple[str, Any], ...] | None:
    """tune.sampler_options: a mapping of the sampler's keyword arguments (their names
    are checked against the sampler where the study opens: tune/study.py)."""
    if options is None:
        return ()
    if not isinstance(options, Mapping) or not all(isinstance(k, str) for k in options):
        c.add(
            "tune.sampler_options",
            options,
            "is not a mapping of keyword arguments",
            "use e.g. tune.sampler_options={n_startup_trials: 5}",
        )
        return None
    return tuple(sorted(options.items()))


PRUNERS = ("median", "hyperband", "none")


def _tune_params(c: Collector, params: object) -> tuple[tuple[str, str], ...] | None:
    """tune.params: {config key: Hydra sweep syntax}; the syntax itself is read by
    jeanzay_kit/tune/space.py, before the study starts."""
    if not isinstance(params, Mapping):
        c.add("tune.params", params, "is not a mapping", 'use tune.params="{optim.lr: ...}"')
        return None
    pairs = []
    for key, value in params.items():
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            c.add(
                f"tune.params.{key}",
                value,
                "is not a sweep",
                f'use e.g. tune.params.{key}="interval(0.001, 0.1)" or "choice(1, 2)"',
            )
            return None
        pairs.append((str(key), str(value)))
    return tuple(pairs)
