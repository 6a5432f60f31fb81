"""Evaluation's pure parts: which rank reads which validation sample (runtime/sampler.py:
eval_share), the eval.* keys with their older train.eval_* spellings
(config/data_rules.py: check_eval), and what a metric is updated with
(train/evaluate.py)."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from jeanzay_kit.config.compose import compose_config
from jeanzay_kit.config.spec import build_job_spec
from jeanzay_kit.errors import ContractError, JzkError, SpecError
from jeanzay_kit.runtime.sampler import eval_share
from jeanzay_kit.train.evaluate import metric_target, prediction


@pytest.mark.parametrize(
    ("count", "dp", "micro"),
    [(100, 1, 16), (101, 2, 16), (7, 3, 2), (2, 4, 8), (64, 4, 16), (1000, 3, 7)],
)
def test_each_validation_sample_is_read_once_by_one_rank(count: int, dp: int, micro: int) -> None:
    shares = [eval_share(count, dp, rank, micro) for rank in range(dp)]
    seen = Counter(int(i) for share in shares for batch in share.batches for i in batch)
    assert seen == Counter(range(count))  # none dropped, none twice
    sizes = [sum(len(b) for b in share.batches) for share in shares]
    assert max(sizes) - min(sizes) <= 1
    # Every rank makes the same number of forward calls (FSDP's collectives meet).
    assert len({share.rounds for share in shares}) == 1
    assert all(len(share.batches) <= share.rounds for share in shares)
    assert all(len(b) <= micro for share in shares for b in share.batches)


def spec(*overrides: str):
    return build_job_spec(compose_config(list(overrides)))


ACCURACY = (
    "+eval.metrics.accuracy._target_=torchmetrics.classification.MulticlassAccuracy",
    "+eval.metrics.accuracy.num_classes=4",
)


@pytest.mark.parametrize(
    ("overrides", "every", "max_batches", "micro"),
    [
        ((), 50, None, 8),  # the whole held-out set, every train.eval_every steps
        (("train.eval_every=20", "train.eval_batches=3"), 20, 3, 8),  # the older spelling
        (("eval.every_steps=5", "eval.max_batches=2", "train.eval_every=20"), 5, 2, 8),
        (("train.eval_batches=0",), 0, None, 8),  # older "never"
        (("eval.micro_batch_size=32",), 50, None, 32),
    ],
)
def test_eval_keys_and_their_older_spelling(
    overrides: tuple[str, ...], every: int, max_batches: int | None, micro: int
) -> None:
    ev = spec(*overrides).eval
    assert (ev.every_steps, ev.max_batches, ev.micro_batch_size) == (every, max_batches, micro)


def test_a_validation_set_of_its_own_holds_nothing_of_data_out() -> None:
    from jeanzay_kit.runtime.sampler import held_out

    assert held_out(spec(), 1000) == 50
    own = spec("+eval.data._target_=mypkg.Validation", "+eval.data.root=/scratch/val")
    assert own.eval.data == {"_target_": "mypkg.Validation", "root": "/scratch/val"}
    assert held_out(own, 1000) == 0


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        (("eval.every_steps=-1",), "eval.every_steps=-1"),
        (("eval.max_batches=0",), "eval.max_batches=0"),
        (("+eval.data.root=/x",), "eval.data._target_=null is not set"),
        (
            ("+eval.metrics.accuracy.num_classes=4",),
            "eval.metrics.accuracy._target_=null is not set",
        ),
        (
            ("+eval.metrics.top-1._target_=torchmetrics.Accuracy",),
            "eval.metrics.top-1=top-1 is not a plain name",
        ),
        (
            ("parallel=pipeline", "resources.gpus_per_node=2", *ACCURACY),
            "eval.metrics=accuracy cannot be used with parallel.mode=pipeline",
        ),
    ],
)
def test_bad_eval_keys_are_refused_naming_the_key(
    overrides: tuple[str, ...], fragment: str
) -> None:
    with pytest.raises(SpecError) as info:
        spec(*overrides)
    problems = [str(p) for p in info.value.problems]
    assert any(fragment in p for p in problems), problems
    assert all("HINT" in p for p in problems)


def test_a_metric_is_updated_with_logits_and_labels() -> None:
    logits = torch.randn(4, 3)
    assert prediction(logits) is logits
    assert prediction({"loss": torch.zeros(()), "logits": logits}) is logits
    assert prediction(SimpleNamespace(loss=torch.zeros(()), logits=logits)) is logits
    labels = torch.tensor([0, 1, 2, 0])
    assert metric_target({"input_ids": logits, "labels": labels}, None) is labels
    assert metric_target((logits, labels), labels) is labels
    with pytest.raises(ContractError, match="eval.metrics: the batch has no target"):
        metric_target({"input_ids": np.zeros(3)}, None)


@pytest.mark.parametrize(
    ("mode", "expected"),
    [("min", 20), ("max", 10)],
)
def test_the_best_evaluated_checkpoint(mode: str, expected: int) -> None:
    from jeanzay_kit.ckpt.layout import best_step

    evaluated = {10: {"eval_loss": 0.9}, 20: {"eval_loss": 0.2}, 30: {}, 40: {"eval_loss": 0.5}}
    assert best_step(evaluated, "eval_loss", mode) == expected
    assert best_step({10: {}}, "eval_loss", mode) is None
    # A tie goes to the newest.
    assert best_step({10: {"a": 1.0}, 20: {"a": 1.0}}, "a", mode) == 20


def test_retention_keeps_the_protected_step() -> None:
    from jeanzay_kit.ckpt.layout import Entry, to_delete

    entries = [Entry(s, f"step-{s}", True) for s in (10, 20, 30, 40)]
    dropped = to_delete(entries, keep_last=1, good=[10, 20, 30, 40], protect=[20])
    assert sorted(e.step for e in dropped) == [10, 30]


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        (("checkpoint.keep_best=accuracy",), "checkpoint.keep_best=accuracy is not an evaluated"),
        (
            ("checkpoint.keep_best=loss", "eval.every_steps=0"),
            "checkpoint.keep_best=loss needs evaluations",
        ),
        (("checkpoint.keep_best=loss", "checkpoint.keep_best_mode=best"), "keep_best_mode=best"),
    ],
)
def test_keep_best_names_an_evaluated_value(overrides: tuple[str, ...], fragment: str) -> None:
    with pytest.raises(SpecError) as info:
        spec(*overrides)
    assert any(fragment in str(p) for p in info.value.problems), info.value.problems


def test_keep_best_takes_the_metrics_jsonl_key() -> None:
    assert spec("checkpoint.keep_best=loss").checkpoint.keep_best == "eval_loss"
    chosen = spec(*ACCURACY, "checkpoint.keep_best=accuracy", "checkpoint.keep_best_mode=max")
    assert (chosen.checkpoint.keep_best, chosen.checkpoint.keep_best_mode) == (
        "eval_accuracy",
        "max",
    )


@pytest.mark.parametrize(
    ("metric", "fragment"),
    [
        ("torchmetrics.regression.MeanSquaredError", None),
        (
            "torchmetrics.classification.MulticlassAccuracy",
            "eval.metrics.score._target_=torchmetrics.classification.MulticlassAccuracy: "
            "updating it with the model's output Tensor[8, 8] float32",
        ),
        ("torchmetrics.NoSuchMetric", "eval.metrics.score._target_=torchmetrics.NoSuchMetric"),
    ],
)
def test_jzk_check_updates_each_metric_once_before_the_queue(
    metric: str, fragment: str | None
) -> None:
    """A metric that does not fit the model's output is named by `jzk check` (and the
    check at the start of every run), not at the first evaluation hours in. The default
    MLP regresses 8 values: a mean squared error fits, a class accuracy does not."""
    from jeanzay_kit.train.check import check_contracts

    checked = spec(
        f"+eval.metrics.score._target_={metric}",
        *(["+eval.metrics.score.num_classes=8"] if "Multiclass" in metric else []),
        "loader.num_workers=0",
    )
    if fragment is None:
        assert check_contracts(checked, torch.device("cpu"), "fp32").loss > 0
        return
    with pytest.raises(ContractError, match="HINT") as err:
        check_contracts(checked, torch.device("cpu"), "fp32")
    assert fragment in str(err.value)


@pytest.mark.parametrize(
    ("overrides", "direction"),
    [
        (("checkpoint.keep_best=loss",), "min"),
        ((*ACCURACY, "checkpoint.keep_best=accuracy"), "max"),  # higher_is_better=True
        (
            (
                "+eval.metrics.mse._target_=torchmetrics.regression.MeanSquaredError",
                "checkpoint.keep_best=mse",
            ),
            "min",  # higher_is_better=False
        ),
        ((*ACCURACY, "checkpoint.keep_best=accuracy", "checkpoint.keep_best_mode=min"), "min"),
    ],
)
def test_keep_best_takes_the_metrics_own_direction(
    overrides: tuple[str, ...], direction: str
) -> None:
    """checkpoint.keep_best_mode=auto (the default): an accuracy is kept at its highest,
    an error at its lowest (torchmetrics' higher_is_better); a mode given wins."""
    from jeanzay_kit.train.directions import best_direction

    assert best_direction(spec(*overrides)) == direction


@pytest.mark.parametrize(
    "override",
    [
        "eval.metrics={acc:{_target_:torchmetrics.classification.MulticlassAccuracy,num_classes:4}}",
        "eval.metrics.acc={_target_:torchmetrics.classification.MulticlassAccuracy,num_classes:4}",
        "+eval.metrics.acc._target_=torchmetrics.classification.MulticlassAccuracy "
        "+eval.metrics.acc.num_classes=4",
    ],
)
def test_hydras_dict_syntax_sets_a_metric(override: str) -> None:
    """Every form of Hydra's syntax for a dict key works (issue 32: `key={...}` was refused
    with "eval.metrics.acc=null is not a key of dict")."""
    cfg = compose_config(override.split(" "))
    assert cfg["eval"]["metrics"] == {
        "acc": {"_target_": "torchmetrics.classification.MulticlassAccuracy", "num_classes": 4}
    }


def test_an_unknown_key_names_the_forms_that_are_accepted() -> None:
    with pytest.raises(SpecError) as info:
        compose_config(["model.dropout_rate=0.1"])
    assert "model.dropout_rate=0.1 is not a key of MLPConfig" in str(info.value)
    assert "+model.dropout_rate=VALUE" in str(info.value) and "model={key: value" in str(info.value)


@pytest.mark.parametrize(
    ("overrides", "refused"),
    [
        (("tune.objective=eval_mean",), "tune.objective=eval_mean"),
        (("checkpoint.keep_best=mean",), "checkpoint.keep_best=eval_mean"),
        (("tune.objective=eval_mean", "tune.direction=maximize"), None),  # said: fine
        (("checkpoint.keep_best=mean", "checkpoint.keep_best_mode=min"), None),
    ],
)
def test_a_metric_that_cannot_say_which_way_is_better_is_refused_at_validation(
    overrides: tuple[str, ...], refused: str | None
) -> None:
    """MeanMetric has no higher_is_better: with direction auto the request is refused
    when it is validated (jzk validate/submit/tune), naming the key and the fix, not at
    the start (or, before, the end) of the run."""
    from jeanzay_kit.launch.request import spec_of

    request = ["+eval.metrics.mean._target_=torchmetrics.aggregation.MeanMetric", *overrides]
    if refused is None:
        spec_of(request, None)
        return
    with pytest.raises(JzkError, match="higher_is_better") as err:
        spec_of(request, None)
    assert refused in str(err.value) and "HINT" in str(err.value)
