"""The composition cache gives what Hydra gives, and never an outdated config."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jeanzay_kit.config.compose import compose_config
from jeanzay_kit.config.compose_cache import cache_folder

ACC = "{_target_: torchmetrics.Accuracy, task: multiclass, num_classes: 10}"
CASES = [
    [],
    ["cluster=jeanzay_h100", "cluster.account=abc@h100", "parallel=fsdp", "resources.nodes=2"],
    ["cluster=jeanzay_v100_8gpu", "model=gpt", "data=stdlib_text", "optim=sgd"],
    ["cluster=slurm_local", "parallel=pipeline_ddp", "loss=criterion"],
    ["model=image_cnn", "data=image_folder", "data.root=/x", f"eval.metrics={{acc: {ACC}}}"],
    ["job.args=[--lr=0.1,--device=cpu]", "job.entry=train_script.py", "+model.extra=3"],
]  # fmt: skip


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("JZK_COMPOSE_CACHE", raising=False)
    folder = cache_folder(os.environ)
    assert folder is not None
    return folder


@pytest.mark.parametrize("overrides", CASES, ids=lambda o: " ".join(o)[:40] or "defaults")
def test_a_cached_composition_is_hydras(
    overrides: list[str], cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JZK_COMPOSE_CACHE", "0")
    plain = compose_config(overrides)
    assert not cache.exists()
    monkeypatch.delenv("JZK_COMPOSE_CACHE")
    filled = compose_config(overrides)
    assert len(list(cache.glob("*.json"))) == 1
    assert compose_config(overrides) == filled == plain


def test_an_edited_project_config_is_composed_again(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "project"
    (project / "conf" / "model").mkdir(parents=True)
    mine = project / "conf" / "model" / "mine.yaml"
    mine.write_text("_target_: torch.nn.Linear\nin_features: 4\nout_features: 2\n")
    monkeypatch.chdir(project)
    assert compose_config(["model=mine"])["model"]["in_features"] == 4
    mine.write_text("_target_: torch.nn.Linear\nin_features: 8\nout_features: 2\n")
    os.utime(mine, ns=(1, 1))  # even an edit that keeps the size and rewinds the clock
    assert compose_config(["model=mine"])["model"]["in_features"] == 8
    (project / "conf" / "model" / "other.yaml").write_text("in_features: 1\n")
    assert compose_config(["model=mine"])["model"]["in_features"] == 8  # new file, new key
    assert len(list(cache.glob("*.json"))) == 3


def test_interpolations_are_resolved_in_the_shell_that_asks(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    overrides = ["job.name=${oc.env:JZK_TEST_NAME}"]
    monkeypatch.setenv("JZK_TEST_NAME", "first")
    assert compose_config(overrides)["job"]["name"] == "first"
    monkeypatch.setenv("JZK_TEST_NAME", "second")
    assert compose_config(overrides)["job"]["name"] == "second"
    assert len(list(cache.glob("*.json"))) == 1
