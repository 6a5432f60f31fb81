"""The default run directory: one per experiment, the same for a re-run or requeue."""

from __future__ import annotations

import re

import pytest

from jeanzay_kit.config.compose import compose_config


def run_dir(*overrides: str) -> str:
    return compose_config(list(overrides))["job"]["run_dir"]


def test_default_run_dir_is_job_name_and_short_config_hash() -> None:
    assert re.fullmatch(r"outputs/jzk-[0-9a-f]{8}", run_dir())
    assert re.fullmatch(r"outputs/demo-[0-9a-f]{8}", run_dir("job.name=demo"))


@pytest.mark.parametrize(
    "change",
    ["model=gpt data=stdlib_text", "optim.lr=0.1", "parallel=fsdp", "train.seed=7"],
)
def test_a_different_experiment_gets_another_run_dir(change: str) -> None:
    assert run_dir(*change.split()) != run_dir()


@pytest.mark.parametrize(
    "change",
    # What a resume may change (config/identity.py RESUME_IGNORES): the same experiment.
    [
        "train.steps=5000",
        "cluster=slurm_local",
        "resources.time=02:00:00",
        "checkpoint.every_steps=7",
        "resume=never",
        "job.python=/opt/py/bin/python",
    ],
)
def test_the_same_experiment_keeps_its_run_dir(change: str) -> None:
    assert run_dir(change) == run_dir()


def test_an_explicit_run_dir_is_kept() -> None:
    assert run_dir("job.run_dir=/scratch/me/run1") == "/scratch/me/run1"
