"""The study in Optuna's own storage: open it, hand out trials, record their ends.

The storage is a JournalStorage file (`<tune.dir>/study.journal`, Optuna's advice for a
shared filesystem without a database server: an append-only log written under a lock
file, JournalFileBackend) or an RDB URL. Every task of a study opens the same storage;
Optuna's own tools (optuna-dashboard, `optuna.load_study`) read it too.

A trial handed to a task carries the task's name (`jzk_task`): a task that was stopped
before its trial ended (preemption, time limit, a killed task) takes the same trial again
when it starts again, so a trial is never counted twice nor restarted from zero.
"""

from __future__ import annotations

import contextlib
import json
import warnings
import zlib
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.trial import TrialState

from jeanzay_kit.config.sections import TuneSettings
from jeanzay_kit.errors import Problem, SpecError
from jeanzay_kit.tune.files import JOURNAL_FILE, STORAGE_FILE, TASK_ATTR, trial_dir
from jeanzay_kit.tune.space import SearchParam

ASK_LOCK_FILE = "ask.lock"
OWNER_ATTR = "jzk_owner"  # where the task runs: slurm:<array job>_<task>, or pid:<host>:<pid>
RUN_DIR_ATTR = "jzk_run_dir"
REASON_ATTR = "jzk_reason"
# Trials that count towards tune.n_trials: all but those still WAITING in a queue.
COUNTED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL, TrialState.RUNNING)


@dataclass(frozen=True)
class TrialTicket:
    """A trial a task runs: Optuna's handle, its values, whether it is a resumed one."""

    trial: optuna.trial.Trial
    values: dict[str, Any]
    resumed: bool
    reported: frozenset[int] = frozenset()  # steps whose value the study already has

    @property
    def number(self) -> int:
        return self.trial.number


def distribution(param: SearchParam) -> BaseDistribution:
    """Optuna's distribution of one search dimension, its errors naming the key."""
    try:
        if param.kind == "float":
            return FloatDistribution(param.low, param.high, log=param.log, step=param.step)
        if param.kind == "int":
            return IntDistribution(
                int(param.low), int(param.high), log=param.log, step=int(param.step or 1)
            )
        return CategoricalDistribution(param.choices)
    except ValueError as err:
        bounds = f"{param.kind} {param.low}..{param.high}"
        raise SpecError(
            Problem(f"tune.params.{param.key}", bounds, str(err).rstrip("."), "fix its bounds")
        ) from None


def storage_of(settings: TuneSettings, study_dir: Path) -> Any:
    """tune.storage (an RDB URL), or the JournalStorage file in the study's folder. The
    folder is made either way: it holds the trials' run directories and the ask lock."""
    study_dir.mkdir(parents=True, exist_ok=True)
    if settings.storage:
        # Owner-only: a URL may carry a database password.
        where = study_dir / STORAGE_FILE
        where.touch(mode=0o600)
        record = {"url": settings.storage, "study_name": settings.study_name}
        where.write_text(json.dumps(record) + "\n")
        return settings.storage
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock

    path = str(study_dir / JOURNAL_FILE)
    # The open(O_EXCL) lock: works on NFS and Lustre, where flock may not.
    return JournalStorage(JournalFileBackend(path, lock_obj=JournalFileOpenLock(path)))


def trial_seed(seed: int, number: int) -> int:
    """The seed of trial `number`'s draws: one stream per trial of the study, so a
    restarted, extended or requeued task never replays draws it made before (a seed per
    task did: its second start drew its first start's values again)."""
    return zlib.crc32(f"{seed}:{number}".encode())


# tune.sampler -> Optuna's class, and the packages it needs beyond Optuna.
SAMPLER_CLASSES = {
    "tpe": ("TPESampler", ()),
    "random": ("RandomSampler", ()),
    "cmaes": ("CmaEsSampler", ("cmaes",)),
    "qmc": ("QMCSampler", ("scipy",)),
    "gp": ("GPSampler", ("scipy",)),
    "nsga2": ("NSGAIISampler", ()),
}


def _plain_sampler(
    name: str, seed: int | None, options: Sequence[tuple[str, Any]] = ()
) -> optuna.samplers.BaseSampler:
    class_name, _needs = SAMPLER_CLASSES[name]
    return getattr(optuna.samplers, class_name)(seed=seed, **dict(options))


def check_sampler(name: str, options: Sequence[tuple[str, Any]]) -> None:
    """Refuse, before any trial, a sampler whose package is missing or an option it does
    not take (the names are its constructor's: Optuna's docs of the class)."""
    import importlib.util
    import inspect

    class_name, needs = SAMPLER_CLASSES[name]
    missing = [m for m in needs if importlib.util.find_spec(m) is None]
    if missing:
        raise SpecError(
            Problem(
                "tune.sampler",
                name,
                f"needs {', '.join(missing)}, not installed here",
                "pip install 'jeanzay_kit[tune]'",
            )
        )
    takes = set(inspect.signature(getattr(optuna.samplers, class_name)).parameters) - {"seed"}
    for key, value in options:
        if key not in takes:
            raise SpecError(
                Problem(
                    f"tune.sampler_options.{key}",
                    value,
                    f"is not an option of Optuna's {class_name}",
                    f"use one of {', '.join(sorted(takes))}",
                )
            )


class TrialSeeded(optuna.samplers.BaseSampler):
    """tune.sampler, seeded by the number of the trial it draws for (trial_seed): the
    study is reproducible as a study (trial N of a seed draws from the same stream,
    given the same history for TPE), and whatever restarts a task, no trial number is
    drawn for twice. Optuna calls before_trial once the trial has its number."""

    def __init__(self, name: str, seed: int, options: Sequence[tuple[str, Any]] = ()) -> None:
        self._name, self._seed, self._options = name, seed, tuple(options)
        self._inner = _plain_sampler(name, seed, self._options)

    def before_trial(self, study: optuna.Study, trial: Any) -> None:
        seed = trial_seed(self._seed, trial.number)
        self._inner = _plain_sampler(self._name, seed, self._options)
        self._inner.before_trial(study, trial)

    def infer_relative_search_space(self, study: optuna.Study, trial: Any) -> dict[str, Any]:
        return self._inner.infer_relative_search_space(study, trial)

    def sample_relative(
        self, study: optuna.Study, trial: Any, search_space: dict[str, Any]
    ) -> dict[str, Any]:
        return self._inner.sample_relative(study, trial, search_space)

    def sample_independent(
        self, study: optuna.Study, trial: Any, param_name: str, param_distribution: Any
    ) -> Any:
        return self._inner.sample_independent(study, trial, param_name, param_distribution)

    def after_trial(
        self, study: optuna.Study, trial: Any, state: Any, values: Sequence[float] | None
    ) -> None:
        self._inner.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self._inner.reseed_rng()


def sampler_of(settings: TuneSettings) -> optuna.samplers.BaseSampler:
    """tune.sampler with tune.sampler_options; with tune.seed, seeded per trial
    (TrialSeeded), not per task. QMC keeps one seed: its sequence is indexed in the
    study, and one scramble for every trial is what keeps it low-discrepancy."""
    check_sampler(settings.sampler, settings.sampler_options)
    if settings.seed is None or settings.sampler == "qmc":
        return _plain_sampler(settings.sampler, settings.seed, settings.sampler_options)
    return TrialSeeded(settings.sampler, settings.seed, settings.sampler_options)


def pruner_of(settings: TuneSettings) -> optuna.pruners.BasePruner:
    """tune.pruner: the median of the finished trials' values at the same step (after
    tune.prune_after_trials trials, from tune.prune_warmup_steps), or Hyperband, whose
    smallest budget is the warm-up and largest the trials' longest step seen."""
    if settings.several:  # Optuna prunes single-objective studies only (Trial.report)
        return optuna.pruners.NopPruner()
    if settings.pruner == "median":
        return optuna.pruners.MedianPruner(
            n_startup_trials=settings.prune_after_trials,
            n_warmup_steps=settings.prune_warmup_steps,
        )
    if settings.pruner == "hyperband":
        return optuna.pruners.HyperbandPruner(min_resource=max(1, settings.prune_warmup_steps))
    return optuna.pruners.NopPruner()


def open_study(
    settings: TuneSettings, study_dir: Path, directions: str | Sequence[str]
) -> optuna.Study:
    """The study, created on first use; a later run (another task, a resubmission)
    loads it. A changed direction is refused: the values already told would mean the
    opposite. Several directions: a study of several objectives (its Pareto front)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    directions = [directions] if isinstance(directions, str) else list(directions)
    storage = storage_of(settings, study_dir)
    if not settings.storage:  # a study's folder holds its own journal, no other study's
        others = optuna.study.get_all_study_names(storage)
        if others and settings.study_name not in others:
            raise SpecError(
                Problem(
                    "tune.study_name",
                    settings.study_name,
                    f"is not the study {study_dir / JOURNAL_FILE} holds ({', '.join(others)})",
                    f"that journal belongs in {study_dir.parent / others[0]}; a new study "
                    "gets a folder of its own with another tune.study_name",
                )
            )
    study = optuna.create_study(
        storage=storage,
        study_name=settings.study_name,
        directions=[optuna.study.StudyDirection[d.upper()] for d in directions],
        sampler=sampler_of(settings),
        pruner=pruner_of(settings),
        load_if_exists=True,
    )
    had = [d.name.lower() for d in study.directions]
    if had != list(directions):
        said = had[0] if len(had) == 1 else "[" + ",".join(had) + "]"
        raise SpecError(
            Problem(
                "tune.direction",
                "/".join(directions),
                f"is not the direction of study {settings.study_name!r}, which "
                f"{'/'.join(h + 's' for h in had)} {len(had)} objective(s)",
                f"keep tune.direction={said} (and its objectives), or name a new study "
                "with tune.study_name",
            )
        )
    if study.metric_names is None:  # what Optuna's plots and dashboard call them
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names(list(settings.objectives))
    return study


def check_space(study: optuna.Study, space: Sequence[SearchParam], study_dir: Path) -> None:
    """Refuse, before any trial is asked, a search space the study cannot take: a
    parameter its trials drew from another kind of distribution or other choices (Optuna
    raises only once the new trial exists, and leaves it RUNNING for good)."""
    wanted = {p.key: distribution(p) for p in space if p.kind != "fixed"}
    for trial in study.get_trials(deepcopy=False):
        for key, old in trial.distributions.items():
            if key not in wanted:
                continue
            new = wanted[key]
            try:
                optuna.distributions.check_distribution_compatibility(old, new)
            except ValueError as err:
                raise SpecError(
                    Problem(
                        f"tune.params.{key}",
                        _describe(new),
                        f"is not the space study {study.study_name!r} drew trial "
                        f"{trial.number} from ({_describe(old)}): {str(err).rstrip('.')}",
                        f"keep the study's space for {key}, or start a new study: "
                        f"tune.study_name=<new name> or a new tune.dir (not {study_dir})",
                    )
                ) from None


def _describe(dist: BaseDistribution) -> str:
    if isinstance(dist, CategoricalDistribution):
        return "choice(" + ", ".join(map(str, dist.choices)) + ")"
    low, high = getattr(dist, "low", "?"), getattr(dist, "high", "?")
    return f"{type(dist).__name__.removesuffix('Distribution').lower()} {low}..{high}"


@contextlib.contextmanager
def _ask_lock(study_dir: Path) -> Iterator[None]:
    """One task at a time counts the trials and asks: n_trials is never overshot."""
    from optuna.storages.journal import JournalFileOpenLock

    lock = JournalFileOpenLock(str(study_dir / ASK_LOCK_FILE))
    lock.acquire()
    try:
        yield
    finally:
        lock.release()


def next_trial(
    study: optuna.Study,
    space: Sequence[SearchParam],
    n_trials: int,
    task: str,
    study_dir: Path,
    owner: str = "",
) -> TrialTicket | None:
    """The trial this task runs next: its own unfinished one, else a new one while the
    study has fewer than n_trials; None when the study has all it needs. owner: where
    this task runs, recorded on the trial for reap_orphans."""
    with _ask_lock(study_dir):
        trials = study.get_trials(deepcopy=False, states=COUNTED)
        for frozen in trials:
            if frozen.state == TrialState.RUNNING and frozen.user_attrs.get(TASK_ATTR) == task:
                # Optuna's handle of a trial still running: Trial(study, trial_id), the
                # id being the storage's (FrozenTrial keeps it, unexported).
                handle = optuna.trial.Trial(study, frozen._trial_id)
                handle.set_user_attr(OWNER_ATTR, owner)
                values = _values(space, frozen.params)
                done = frozenset(frozen.intermediate_values)
                return TrialTicket(handle, values, resumed=True, reported=done)
        if len(trials) >= n_trials:
            return None
        dists = {p.key: distribution(p) for p in space if p.kind != "fixed"}
        trial = study.ask(dists)
        trial.set_user_attr(TASK_ATTR, task)
        trial.set_user_attr(OWNER_ATTR, owner)
        trial.set_user_attr(RUN_DIR_ATTR, str(trial_dir(study_dir, trial.number)))
        return TrialTicket(trial, _values(space, trial.params), resumed=False)


def _values(space: Sequence[SearchParam], drawn: dict[str, Any]) -> dict[str, Any]:
    """Every key of the space with this trial's value (a fixed one included)."""
    return {p.key: p.choices[0] if p.kind == "fixed" else drawn[p.key] for p in space}


def reap_orphans(
    study: optuna.Study,
    task: str,
    study_dir: Path,
    gone: Callable[[str], bool],
    only: Collection[str] | None = None,
    ownerless: bool = False,
) -> list[int]:
    """Tell FAIL the trials still RUNNING for another task whose process is gone (killed:
    it could not say so itself); a task waiting in the queue after a requeue is not
    gone, and takes its trial again. only: these tasks' trials alone; ownerless: also
    trials no task of jzk holds (`jzk tune --fail-stuck`). The numbers of the trials
    told."""
    told = []
    with _ask_lock(study_dir):
        for frozen in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            owner = str(frozen.user_attrs.get(OWNER_ATTR, ""))
            name = frozen.user_attrs.get(TASK_ATTR)
            if name == task or (only is not None and name not in only):
                continue
            if not owner and not ownerless or owner and not gone(owner):
                continue
            handle = optuna.trial.Trial(study, frozen._trial_id)
            task_name = frozen.user_attrs.get(TASK_ATTR)
            reason = (
                f"its task ({task_name}, {owner}) ended without telling it: killed"
                if owner
                else "RUNNING with no task of jzk to finish it: failed by jzk tune --fail-stuck"
            )
            handle.set_user_attr(REASON_ATTR, reason)
            study.tell(handle, state=TrialState.FAIL)
            told.append(frozen.number)
    return told


def finish_trial(
    study: optuna.Study,
    ticket: TrialTicket,
    values: float | Sequence[float] | None,
    reason: str,
    pruned: bool = False,
) -> None:
    """Tell the study how a trial ended: PRUNED, its value(s), or FAIL with the reason."""
    if pruned:
        study.tell(ticket.trial, state=TrialState.PRUNED)
        return
    if values is not None:
        study.tell(ticket.trial, values if isinstance(values, float) else list(values))
        return
    ticket.trial.set_user_attr(REASON_ATTR, reason)
    study.tell(ticket.trial, state=TrialState.FAIL)


def summary_lines(study: optuna.Study, n_trials: int | None) -> list[str]:
    """The study at a glance: trials by state, the best value and its values."""
    trials = study.get_trials(deepcopy=False)
    counts = {state: sum(t.state == state for t in trials) for state in TrialState}
    said = ", ".join(
        f"{counts[s]} {s.name.lower()}" for s in (*COUNTED, TrialState.WAITING) if counts[s]
    )
    of = f" of {n_trials}" if n_trials is not None else ""
    lines = [f"study {study.study_name!r}: {len(trials)}{of} trial(s): {said or 'none'}"]
    done = [t for t in trials if t.state == TrialState.COMPLETE]
    if done and len(study.directions) > 1:
        lines += pareto_lines(study)
    elif done:
        best = study.best_trial
        values = " ".join(f"{k}={v!r}" for k, v in best.params.items())
        lines.append(f"best: trial {best.number}, value {best.value:.6g}, {values}")
        if RUN_DIR_ATTR in best.user_attrs:
            lines.append(f"  run dir {best.user_attrs[RUN_DIR_ATTR]}")
    for t in trials:
        if t.state == TrialState.FAIL and REASON_ATTR in t.user_attrs:
            lines.append(f"trial {t.number} failed: {t.user_attrs[REASON_ATTR]}")
    return lines


def pareto_lines(study: optuna.Study) -> list[str]:
    """A study of several objectives has no single best: its Pareto front (Optuna's
    best_trials, the trials no other beats on every objective), one line each."""
    front = sorted(study.best_trials, key=lambda t: t.number)
    lines = [f"Pareto front: {len(front)} trial(s) ({', '.join(_direction_names(study))})"]
    for t in front:
        values = ", ".join(f"{v:.6g}" for v in t.values)
        params = " ".join(f"{k}={v!r}" for k, v in t.params.items())
        lines.append(f"  trial {t.number}: values {values}, {params}")
    return lines


def _direction_names(study: optuna.Study) -> list[str]:
    names = study.metric_names or [f"objective {i}" for i in range(len(study.directions))]
    return [f"{d.name.lower()} {n}" for d, n in zip(study.directions, names, strict=False)]
