"""What `jzk tune` and each of its tasks start from: the checked request and its study."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jeanzay_kit.config.sections import TuneSettings
from jeanzay_kit.config.spec import JobSpec
from jeanzay_kit.errors import Problem, SpecError
from jeanzay_kit.tune.space import SearchParam, parse_space, trial_overrides


@dataclass(frozen=True)
class PreparedStudy:
    spec: JobSpec  # the request without any trial's values
    space: list[SearchParam]
    study_dir: Path
    directions: tuple[str, ...]  # minimize | maximize per objective, auto resolved
    # job.args as written (`--out_dir=${job.run_dir}` unresolved: each trial's own run
    # dir), which a trial's script options (`--lr`) follow.
    script_args: tuple[str, ...] = ()

    @property
    def direction(self) -> str:
        """The objectives' directions as said to the user: `minimize`, or
        `minimize/maximize` for two."""
        return "/".join(self.directions)

    @property
    def settings(self) -> TuneSettings:
        return self.spec.tune

    @property
    def n_trials(self) -> int:
        return self.spec.tune.n_trials


def check_request(
    overrides: Sequence[str], config_dir: str | None, config_name: str = "config"
) -> PreparedStudy:
    """The request and its search space, checked before any trial runs: the space's
    syntax, and a run at one corner of it (each key exists, each value is accepted)."""
    from jeanzay_kit.launch.request import spec_of, workdir_of
    from jeanzay_kit.train.directions import objective_directions

    spec = spec_of(overrides, config_dir, config_name)
    if not spec.tune.params:
        raise SpecError(
            Problem(
                "tune.params",
                None,
                "is empty: the study has nothing to search",
                "give keys and ranges, e.g. "
                "tune.params='{optim.lr: \"tag(log, interval(1e-4, 1e-1))\"}'",
            )
        )
    space = parse_space(spec.tune.params)
    check_options(space, spec)
    script_args = _written_args(overrides, config_dir, config_name) if spec.job.runs_script else ()
    corner = {p.key: _first(p) for p in space}
    spec_of([*overrides, *trial_overrides(corner, script_args)], config_dir, config_name)
    study_dir = workdir_of(spec) / spec.tune.dir
    return PreparedStudy(spec, space, study_dir, objective_directions(spec), script_args)


def _written_args(
    overrides: Sequence[str], config_dir: str | None, config_name: str
) -> tuple[str, ...]:
    """job.args with its interpolations unresolved."""
    from jeanzay_kit.config.compose import compose_unresolved

    args = compose_unresolved(overrides, config_dir, config_name)["job"].get("args")
    return tuple(str(a) for a in args or ())


def check_options(space: Sequence[SearchParam], spec: JobSpec) -> None:
    """A script's options (`--lr`) need a script, and one value each: not job.args's too."""
    from jeanzay_kit.tune.space import is_option

    for param in space:
        if not is_option(param.key):
            continue
        if not spec.job.runs_script:
            raise SpecError(
                Problem(
                    f"tune.params.{param.key}",
                    param.key,
                    "is an option of your own script, and job.entry is the toolkit's loop",
                    "search a config key (e.g. optim.lr), or set job.entry=<your script>",
                )
            )
        given = [a for a in spec.job.args if a == param.key or a.startswith(param.key + "=")]
        if given:
            raise SpecError(
                Problem(
                    f"tune.params.{param.key}",
                    param.key,
                    f"is given by job.args too ({' '.join(given)}): a trial would get two",
                    f"leave {param.key} out of job.args: each trial adds its own",
                )
            )


def _first(param: SearchParam) -> Any:
    if param.kind in ("categorical", "fixed"):
        return param.choices[0]
    return int(param.low) if param.kind == "int" else param.low


def prepare_study(
    overrides: Sequence[str], config_dir: str | None, task: str = "", config_name: str = "config"
) -> tuple[Any, PreparedStudy]:
    """The checked request and its study, opened (created on first use) for `task`."""
    from jeanzay_kit.ckpt.writable import check_writable
    from jeanzay_kit.tune.study import check_space, distribution, open_study

    prepared = check_request(overrides, config_dir, config_name)
    for param in prepared.space:  # bounds Optuna refuses, refused before the study exists
        if param.kind != "fixed":
            distribution(param)
    # Its journal, lock and trials' run directories: one line, not Optuna's traceback.
    check_writable(prepared.study_dir, "tune.dir")
    study = open_study(prepared.settings, prepared.study_dir, prepared.directions)
    check_space(study, prepared.space, prepared.study_dir)
    return study, prepared
