"""hydra-submitit-launcher's keys under `hydra/launcher=jeanzay` in a Hydra app of yours
(launch/app_rules.py): each key's meaning, as the toolkit validates and submits it, and
the keys it cannot honour refused with why and what to use."""

from __future__ import annotations

from typing import Any

import pytest

from jeanzay_kit.errors import LaunchError
from jeanzay_kit.launch.app_rules import APP_KEYS, in_launcher_words, translate
from jeanzay_kit.runtime.run_result import returned_record

BASE = {"cluster": "jeanzay_h100", "gpus_per_node": 4, "tasks_per_node": 4}

# (keys added to BASE, toolkit overrides expected among the request's, submit extras)
MEANINGS: list[tuple[dict[str, Any], list[str], dict[str, Any]]] = [
    ({}, ["cluster=jeanzay_h100", "resources.time=60", "resources.nodes=1"], {}),
    ({}, ["resources.gpus_per_node=4", "parallel.launcher=srun"], {}),
    ({}, ["preemption.lead_seconds=120", "job.name=my_app"], {}),
    ({"timeout_min": 90}, ["resources.time=90"], {}),
    ({"nodes": 2}, ["resources.nodes=2"], {}),
    ({"tasks_per_node": 1}, ["resources.gpus_per_node=4", "parallel.launcher=torchrun"], {}),
    ({"cpus_per_task": 10}, ["resources.cpus_per_task=10"], {}),
    ({"mem_gb": 64}, ["resources.mem=64G"], {}),
    ({"partition": "gpu_p6"}, ["resources.partition=gpu_p6"], {}),
    ({"qos": "qos_gpu_h100-t4"}, ["resources.qos=qos_gpu_h100-t4"], {}),
    ({"constraint": "h100"}, ["resources.constraint=h100"], {}),
    ({"account": "abc@h100"}, ["cluster.account=abc@h100"], {}),
    ({"signal_delay_s": 300}, ["preemption.lead_seconds=300"], {}),
    ({"name": "lr_sweep"}, ["job.name=lr_sweep"], {}),
    ({"comment": "exp 3"}, [], {"comment": "exp 3"}),
    ({"exclude": "n1"}, [], {"exclude": "n1"}),
    ({"setup": ["module load x"]}, [], {"setup": ["module load x"]}),
    ({"srun_args": ["--cpu-bind=none"]}, [], {"srun_args": ["--cpu-bind=none"]}),
    ({"stderr_to_stdout": True}, [], {"stderr_to_stdout": True}),
    (
        {"additional_parameters": {"mail_type": "END", "mail-user": "me@lab"}},
        [],
        {"additional_parameters": (("mail-type", "END"), ("mail-user", "me@lab"))},
    ),
]


@pytest.mark.parametrize(("keys", "overrides", "extra"), MEANINGS)
def test_each_key_keeps_its_meaning(
    keys: dict[str, Any], overrides: list[str], extra: dict[str, Any]
) -> None:
    request = translate({**BASE, **keys}, "my_app")
    assert set(overrides) <= set(request.overrides), request.overrides
    for key, value in extra.items():
        assert request.extra_dict[key] == (tuple(value) if isinstance(value, list) else value)


def test_unset_keys_take_hydra_submitit_launchers_defaults() -> None:
    unset = {key: None for key in APP_KEYS} | BASE
    request = translate(unset, "my_app")
    assert "resources.time=60" in request.overrides  # timeout_min: 60
    assert request.max_num_timeout == 0  # max_num_timeout: 0
    assert request.extra_dict["stderr_to_stdout"] is False
    assert translate({**BASE, "max_num_timeout": 3}, "x").max_num_timeout == 3


# (keys added to BASE or replacing it, words the refusal must hold)
REFUSALS: list[tuple[dict[str, Any], list[str]]] = [
    ({"cluster": None}, ["hydra.launcher.cluster is not set", "HINT", "jeanzay_h100"]),
    ({"gres": "gpu:4"}, ["hydra.launcher.gres", "cluster profile", "gpus_per_node=N"]),
    ({"cpus_per_gpu": 8}, ["hydra.launcher.cpus_per_gpu", "cpus_per_task"]),
    ({"gpus_per_task": 1}, ["hydra.launcher.gpus_per_task", "tasks_per_node"]),
    ({"mem_per_gpu": "40G"}, ["hydra.launcher.mem_per_gpu", "mem_gb"]),
    ({"mem_per_cpu": "4G"}, ["hydra.launcher.mem_per_cpu", "mem_gb"]),
    ({"tasks_per_node": 3}, ["tasks_per_node=3", "tasks_per_node=4", "tasks_per_node=1"]),
    ({"gpus_per_node": None}, ["gpus_per_node is not set", "gpus_per_node=N"]),
    ({"timeout_min": 0}, ["hydra.launcher.timeout_min=0", ">= 1"]),
    ({"nodes": "two"}, ["hydra.launcher.nodes='two'"]),
    ({"mem_gb": -1}, ["hydra.launcher.mem_gb=-1"]),
    ({"setup": "module load x"}, ["hydra.launcher.setup", "list of strings"]),
    (
        {"additional_parameters": {"time": "10"}},
        ["additional_parameters.time is --time", "hydra.launcher.timeout_min"],
    ),
    (
        {"additional_parameters": {"gres": "gpu:8"}},
        ["--gres", "hydra.launcher.gpus_per_node"],
    ),
    (
        {"additional_parameters": {"signal": "USR1@60"}},
        ["--signal", "hydra.launcher.signal_delay_s"],
    ),
]


@pytest.mark.parametrize(("keys", "words"), REFUSALS)
def test_a_key_it_cannot_honour_is_refused_with_why_and_what_to_use(
    keys: dict[str, Any], words: list[str]
) -> None:
    with pytest.raises(LaunchError) as err:
        translate({**BASE, **keys}, "my_app")
    for word in words:
        assert word in str(err.value), str(err.value)


def test_every_problem_is_named_at_once() -> None:
    with pytest.raises(LaunchError) as err:
        translate({"gres": "gpu:1", "mem_per_cpu": "1G", "gpus_per_node": 2}, "x")
    text = str(err.value)
    assert "cluster is not set" in text and "gres" in text and "mem_per_cpu" in text


def test_refusals_of_the_profile_name_the_launchers_keys() -> None:
    said = "resources.gpus_per_node=8 but n nodes have 4 GPUs. HINT: use resources.nodes=2"
    assert in_launcher_words(said) == (
        "hydra.launcher.gpus_per_node=8 but n nodes have 4 GPUs. HINT: use hydra.launcher.nodes=2"
    )
    assert in_launcher_words("eval.resources.nodes") == "eval.resources.nodes"
    said = (
        "resources.time=116:40:00 is above the 100:00:00 limit. HINT: use resources.time=100:00:00"
    )
    assert in_launcher_words(said) == (
        "hydra.launcher.timeout_min=7000 is above the 100:00:00 limit. HINT: use "
        "hydra.launcher.timeout_min=6000"
    )


@pytest.mark.parametrize(
    ("returned", "record"),
    [
        (0.5, {"value": 0.5, "returned": 0.5}),
        (3, {"value": 3.0}),
        ([0.1, 2], {"value": 0.1, "values": [0.1, 2.0]}),
        (float("nan"), {"value": None}),
        (None, {"value": None, "returned": None}),
        ({"acc": 0.9}, {"value": None, "returned": {"acc": 0.9}}),
        (object, {"value": None, "returned": repr(object)}),
    ],
)
def test_the_returned_value_is_the_points_result(returned: Any, record: dict[str, Any]) -> None:
    got = returned_record(returned)
    assert got["objective"] == "returned"
    for key, value in record.items():
        assert got[key] == value
