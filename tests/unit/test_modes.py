"""Parallel modes as data (config/modes.py, issue 44): one registration per mode."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

import jeanzay_kit
from jeanzay_kit.config.modes import MODE_TABLE, MODES, PIPELINE_MODES
from jeanzay_kit.train.strategies.base import Strategy

CONF = Path(jeanzay_kit.__file__).parent / "conf" / "parallel"


@pytest.mark.parametrize("mode", MODE_TABLE, ids=lambda m: m.name)
def test_each_mode_names_a_strategy_and_has_a_config(mode) -> None:  # noqa: ANN001
    module, _, name = mode.strategy.partition(":")
    cls = getattr(importlib.import_module(f"jeanzay_kit.train.strategies.{module}"), name)
    assert issubclass(cls, Strategy) and callable(cls.from_job)
    assert (CONF / f"{mode.name}.yaml").is_file()


def test_the_lists_derive_from_the_table() -> None:
    assert MODES == ("ddp", "fsdp", "pipeline", "pipeline_ddp", "dataparallel")
    assert PIPELINE_MODES == ("pipeline", "pipeline_ddp")
    assert sorted(p.stem for p in CONF.glob("*.yaml")) == sorted(MODES)
