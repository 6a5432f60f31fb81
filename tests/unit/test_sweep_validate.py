"""`jzk validate -m`: every point of a sweep checked, and the sweep's GPU-hour ceiling."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from jeanzay_kit.errors import ConfigError
from jeanzay_kit.launch.sweep_points import ceiling_gpu_hours, sweep_points

JZK = str(Path(sys.executable).parent / "jzk")
H100 = ["cluster=jeanzay_h100", "cluster.account=abc@h100"]


def test_points_are_hydras_cartesian_product() -> None:
    assert sweep_points(["optim.lr=1e-3,1e-4", "resources.nodes=range(1,3)", "model=mlp"]) == [
        ["optim.lr=0.001", "resources.nodes=1", "model=mlp"],
        ["optim.lr=0.001", "resources.nodes=2", "model=mlp"],
        ["optim.lr=0.0001", "resources.nodes=1", "model=mlp"],
        ["optim.lr=0.0001", "resources.nodes=2", "model=mlp"],
    ]
    assert sweep_points(["job.args=[--lr=0.1]"]) == [["job.args=['--lr=0.1']"]]
    with pytest.raises(ConfigError, match="cannot read the sweep"):
        sweep_points(["optim.lr=range(1"])


def test_ceiling() -> None:
    assert ceiling_gpu_hours([(4, 120), (8, 120), (0, 600)]) == 24.0


def test_validate_states_the_ceiling_and_names_a_bad_point() -> None:
    ok = subprocess.run(
        [JZK, "validate", "-m", *H100, "resources.nodes=1,2", "resources.gpus_per_node=4",
         "resources.time=02:00:00", "optim.lr=1e-3,1e-4"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    assert "sweep           4 point(s), each checked" in ok.stdout
    assert "ceiling         48.0 GPU hours" in ok.stdout  # 2 x (4 + 8) GPUs x 2 h
    bad = subprocess.run(
        [JZK, "validate", "-m", *H100, "resources.nodes=1,900"], capture_output=True, text=True
    )
    assert bad.returncode == 2
    assert (
        "point 1 of 2: cluster=jeanzay_h100 cluster.account=abc@h100 resources.nodes=900"
        in bad.stderr
    )
    assert "900 GPUs" in bad.stderr
