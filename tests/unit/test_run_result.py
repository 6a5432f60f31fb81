"""A run's result (runtime/run_result.py) and tune.* (config/data_rules.py check_tune):
what a search reads from a run, as pure functions over metrics.jsonl's records."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from torch import nn

from jeanzay_kit import session
from jeanzay_kit.config.compose import compose_config
from jeanzay_kit.config.spec import build_job_spec
from jeanzay_kit.errors import SpecError
from jeanzay_kit.rundir.run_directory import RunDir
from jeanzay_kit.runtime.run_result import (
    final_values,
    missing_reason,
    read_result,
    result_record,
    write_end_result,
)

# Sessions install signal handlers (tests/conftest.py puts pytest's back).
pytestmark = pytest.mark.usefixtures("keep_signal_handlers")

RECORDS = [
    {"step": 10, "loss": 0.9, "lr": 1e-3},
    {"step": 20, "loss": 0.5, "eval_loss": 0.7, "eval_acc": 0.6},
    {"step": 30, "loss": 0.4},
    {"step": 40, "loss": 0.3, "eval_loss": 0.45, "eval_acc": 0.8},
    {"step": 50, "loss": 0.2},
]


@pytest.mark.parametrize(
    ("records", "expected"),
    [
        ([], {}),
        (RECORDS[:1], {"train_loss": 0.9, "step": 10}),
        # The newest evaluation, with the step it was measured at; the last loss.
        (
            RECORDS,
            {"train_loss": 0.2, "step": 50, "eval_loss": 0.45, "eval_acc": 0.8, "eval_step": 40},
        ),
        # A torn or foreign record changes nothing.
        ([{"step": 5, "loss": "nan?"}, {"eval_flag": True}], {}),
    ],
)
def test_final_values(records: list[dict], expected: dict) -> None:
    assert final_values(records) == expected


@pytest.mark.parametrize(
    ("objective", "value"),
    [("eval_loss", 0.45), ("eval_acc", 0.8), ("train_loss", 0.2), ("eval_f1", None)],
)
def test_the_objective_names_one_value(objective: str, value: float | None) -> None:
    record = result_record(final_values(RECORDS), objective, "minimize")
    assert (record["objective"], record["value"], record["direction"]) == (
        objective,
        value,
        "minimize",
    )


def test_a_value_that_is_not_finite_is_no_value() -> None:
    assert result_record({"eval_loss": math.nan}, "eval_loss", "minimize")["value"] is None


def test_a_missing_value_says_what_to_change() -> None:
    no_eval = missing_reason("eval_loss", {"train_loss": 0.2, "step": 50})
    assert "logged no evaluation" in no_eval and "eval.every_steps" in no_eval
    other = missing_reason("eval_f1", final_values(RECORDS))
    assert "eval_f1 is not among the run's values (train_loss, eval_loss, eval_acc)" in other


@pytest.mark.parametrize(
    ("overrides", "problem"),
    [
        (["tune.objective=eval_loss"], None),
        (["tune.objective=train_loss", "tune.direction=minimize"], None),
        (
            ["tune.objective=eval_acc"],
            "tune.objective=eval_acc is not a value this run reports (these are: train_loss, "
            "eval_loss)",
        ),
        (["tune.direction=down"], "tune.direction=down is not one of minimize, maximize, auto"),
        (["tune.objective="], "tune.objective='' must be a non-empty single-line string"),
        # A script reports its own values: any name.
        (["job.entry=train_plain.py", "tune.objective=bleu"], None),
        # Several objectives: one direction for all, or one each.
        (["tune.objective=[eval_loss,train_loss]"], None),
        (["tune.objective=[eval_loss,train_loss]", "tune.direction=[minimize,auto]"], None),
        (
            ["tune.objective=[eval_loss,train_loss]", "tune.direction=[minimize,auto,auto]"],
            "tune.direction=['minimize', 'auto', 'auto'] has 3 directions for the 2 objectives",
        ),
        (
            ["tune.objective=[eval_loss,eval_loss]"],
            "tune.objective=['eval_loss', 'eval_loss'] names an objective twice, or none",
        ),
        (
            ["tune.objective=[eval_loss,eval_f1]"],
            "tune.objective=eval_f1 is not a value this run reports",
        ),
        (
            ["tune.objective=[eval_loss,train_loss]", "tune.sampler=cmaes"],
            "tune.sampler=cmaes optimizes one objective, and tune.objective names 2",
        ),
    ],
)
def test_tune_keys_are_checked_before_anything_runs(
    overrides: list[str], problem: str | None
) -> None:
    if problem is None:
        build_job_spec(compose_config(overrides))
        return
    with pytest.raises(SpecError) as caught:
        build_job_spec(compose_config(overrides))
    assert problem in str(caught.value)


def _loop(run_dir: Path, report: float | None, **options: object) -> None:
    with session(steps=3, run_dir=run_dir, env={}, stall_seconds=0, **options) as s:
        model = s.wrap(nn.Linear(2, 1))
        for step in range(3):
            loss = model(torch.ones(4, 2)).pow(2).mean()
            s.log(step + 1, loss=loss)
            s.should_stop(step, loss=loss)
        if report is not None:
            s.report(report, step=3)


def test_a_session_writes_the_result_from_its_log_or_its_report(tmp_path: Path) -> None:
    _loop(tmp_path / "logged", None, objective="train_loss")
    logged = read_result(RunDir.of(tmp_path / "logged"))
    assert logged is not None and logged["objective"] == "train_loss"
    assert logged["value"] == logged["train_loss"] and logged["direction"] == "minimize"

    _loop(tmp_path / "reported", 0.75, objective="eval_accuracy", direction="maximize")
    reported = read_result(RunDir.of(tmp_path / "reported"))
    assert reported is not None
    assert (reported["value"], reported["direction"], reported["objective_step"]) == (
        0.75,
        "maximize",
        3,
    )


@pytest.mark.parametrize(
    ("sweeper", "told"),
    [
        ("hydra._internal.core_plugins.basic_sweeper.BasicSweeper", False),
        ("hydra_plugins.jeanzay_launcher.jeanzay_sweeper.JeanzaySweeper", False),
        ("hydra_plugins.hydra_optuna_sweeper.optuna_sweeper.OptunaSweeper", True),
    ],
)
def test_a_search_whose_run_has_no_value_is_told_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], sweeper: str, told: bool
) -> None:
    """train_app's return value to Hydra: a grid reads nothing, a search gets one line
    naming tune.objective and the fix, and exit 2, instead of a TypeError in Optuna."""
    from jeanzay_kit.runtime.run_result import write_result
    from jeanzay_kit.train_app import _run_value

    write_result(
        RunDir(tmp_path), result_record({"train_loss": 0.2, "step": 10}, "eval_loss", "minimize")
    )
    if not told:
        assert _run_value(RunDir(tmp_path), sweeper, "train.py") is None
        return
    with pytest.raises(SystemExit) as ended:
        _run_value(RunDir(tmp_path), sweeper, "train.py")
    assert ended.value.code == 2
    err = capsys.readouterr().err
    assert (
        "needs the run's value: tune.objective=eval_loss, but the run logged no evaluation" in err
    )
    assert "eval.every_steps" in err


def test_several_objectives_are_listed_the_first_also_alone() -> None:
    values = {"eval_loss": 0.25, "eval_accuracy": 0.875, "step": 10}
    record = result_record(values, ["eval_loss", "eval_accuracy"], ["minimize", "maximize"])
    assert (record["objective"], record["value"], record["direction"]) == (
        "eval_loss",
        0.25,
        "minimize",
    )
    assert record["objectives"] == ["eval_loss", "eval_accuracy"]
    assert record["values"] == [0.25, 0.875]
    assert record["directions"] == ["minimize", "maximize"]
    missing = result_record(values, ["eval_loss", "eval_f1"], ["minimize", "maximize"])
    assert missing["values"] == [0.25, None]


@pytest.mark.parametrize(
    ("objective", "direction", "higher", "expected"),
    [
        ("eval_loss", "auto", None, "minimize"),  # a loss goes down
        ("val_loss", "auto", None, "minimize"),  # a script's own loss
        ("eval_acc", "auto", True, "maximize"),  # a metric that says higher is better
        ("eval_err", "auto", False, "minimize"),
        ("accuracy", "auto", None, "minimize"),  # unknown: Optuna's default
        ("accuracy", "maximize", None, "maximize"),  # said: kept
        ("eval_loss", "maximize", None, "maximize"),
    ],
)
def test_one_direction_rule_for_every_loop(
    objective: str, direction: str, higher: bool | None, expected: str
) -> None:
    """The toolkit's loop and a session resolve tune.direction=auto alike (issue 44: two
    rules before, a session wrote `auto` where the loop minimized)."""
    from jeanzay_kit.runtime.run_result import direction_of

    assert direction_of(objective, direction, higher) == expected


@pytest.mark.parametrize(
    ("objectives", "records", "noted"),
    [
        (["eval_loss"], [{"step": 5, "loss": 0.3}], False),  # nothing asked: a plain run
        (["eval_loss"], [{"step": 5, "loss": 0.3, "eval_acc": 0.9}], True),  # evaluated
        (["train_los"], [{"step": 5, "loss": 0.3}], True),  # set, and not among them
        (["train_loss"], [{"step": 5, "loss": 0.3}], False),  # set, and found
    ],
)
def test_a_missing_value_is_noted_only_when_one_was_asked_for(
    objectives, records, noted, tmp_path: Path, capsys
) -> None:
    import json

    run = RunDir(tmp_path)
    run.metrics.write_text("".join(json.dumps(r) + "\n" for r in records))
    write_end_result(run, objectives, ["minimize"])
    assert ("note: no result value" in capsys.readouterr().out) is noted
    assert read_result(run) is not None  # written either way: jzk report reads it
