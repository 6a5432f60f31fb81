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


# Each case: a sweep as `jzk validate -m` takes it. Group choices mixed with values, and
# values alone: the points composed once per group choice (launch/point_configs.py
# sweep_compositions) must give, point by point, the JobSpec that composing each point
# from scratch gives (and the same sbatch script).
SWEEPS = {
    "values only": ["cluster=slurm_local", "optim.lr=0.1,0.01", "train.steps=3,4"],
    "model choice and values": [
        "cluster=slurm_local", "model=gpt,causal_lm", "data=stdlib_text", "optim.lr=0.5,0.25"
    ],
    "parallel choice, nodes and a name": [
        *H100, "parallel=ddp,fsdp", "resources.nodes=1,2", "job.name=a,b"
    ],
    "a dict value and a list value": [
        "cluster=slurm_local", "train={steps:11,log_every:2}", "cluster.modules=[a,b],[c]"
    ],
    "a value that names another key": ["cluster=slurm_local", "job.name=x,y${optim.lr}"],
}  # fmt: skip


def _specs(points: list[list[str]], tmp_path: Path) -> list[object]:
    from jeanzay_kit.launch.request import spec_of
    from jeanzay_kit.slurm.sbatch import render_sbatch

    specs = [spec_of(point, None, fit=False) for point in points]
    return [(s, s.notes, s.auto_keys, render_sbatch(s, workdir=str(tmp_path))) for s in specs]


@pytest.mark.parametrize("sweep", list(SWEEPS.values()), ids=list(SWEEPS))
def test_a_sweep_composed_once_per_group_choice_gives_each_points_spec(
    sweep: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jeanzay_kit.launch.point_configs import sweep_compositions

    monkeypatch.setenv("JZK_COMPOSE_CACHE", "0")  # each point composed from scratch
    monkeypatch.chdir(tmp_path)
    points = sweep_points(sweep)
    alone = _specs(points, tmp_path)
    with sweep_compositions(None) as sweep_of:
        together = _specs(list(reversed(points)), tmp_path)[::-1]  # any order of points
        composed = sweep_of.compositions
    for number, (one, other) in enumerate(zip(alone, together, strict=True)):
        assert one == other, f"point {number}: {points[number]}"
    groups = {tuple(o for o in p if o.split("=")[0] in ("model", "parallel")) for p in points}
    assert composed == len(groups)  # one composition per distinct group choice


BAD_POINTS = [
    # (sweep, the bad point's number of how many, what its error says)
    (["cluster=slurm_local", "train.steps=3,many,5"], "point 1 of 3", "train.steps"),
    ([*H100, "resources.nodes=1,900", "model=mlp,image_cnn"], "point 2 of 4", "900 GPUs"),
    (["cluster=slurm_local", "optim.lr=0.1,0.2", "optim.lrr=1"], "point 0 of 2", "lrr"),
    (["cluster=slurm_local", "model=mlp,nope"], "point 1 of 2", "nope"),
]


@pytest.mark.parametrize(("sweep", "where", "says"), BAD_POINTS)
def test_validate_names_the_bad_point(
    sweep: list[str], where: str, says: str, tmp_path: Path
) -> None:
    done = subprocess.run(
        [JZK, "validate", "-m", *sweep], capture_output=True, text=True, cwd=tmp_path
    )
    assert done.returncode == 2, done.stdout
    point = sweep_points(sweep)[int(where.split()[1])]
    assert f"{where}: {' '.join(point)}" in done.stderr
    assert says in done.stderr


def test_validate_lists_every_bad_point_not_the_first_only(tmp_path: Path) -> None:
    sweep = [*H100, "resources.nodes=1,900", "model=mlp,image_cnn"]
    done = subprocess.run(
        [JZK, "validate", "-m", *sweep], capture_output=True, text=True, cwd=tmp_path
    )
    assert done.returncode == 2, done.stdout
    assert "point 2 of 4" in done.stderr and "point 3 of 4" in done.stderr
    assert "point 0 of 4" not in done.stderr and "point 1 of 4" not in done.stderr
    assert "2 of 4 sweep point(s) fail the checks above" in done.stderr
