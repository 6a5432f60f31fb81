"""Sweep points composed once per group (launch/point_configs.py) equal Hydra's own
composition of each point, hydra node included, in any order of points."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import ConfigCompositionException
from hydra.types import RunMode
from omegaconf import OmegaConf, open_dict

from jeanzay_kit.config.compose import DEFAULT_CONFIG_DIR, register_schemas
from jeanzay_kit.config.resolvers import register_resolvers
from jeanzay_kit.launch.point_configs import PointConfigs, resolved_point, resolved_task_config

SWEEP_OVERRIDES = ["cluster=slurm_local", "hydra.sweep.dir=/tmp/jzk-point-configs"]

# Each case: the points of one sweep, in order. Later points check that an earlier
# point's values were put back (a point that does not set optim.lr has the default).
CASES = {
    "values only": [
        ["optim.lr=0.1"],
        ["optim.lr=0.01", "train.steps=7"],
        ["train.steps=3"],
        [],
    ],
    "groups and values, groups alternating": [
        ["model=gpt", "data=stdlib_text", "optim.lr=0.1"],
        ["model=mlp", "optim.lr=0.2"],
        ["model=gpt", "data=stdlib_text", "train.steps=4"],
        ["model=mlp"],
    ],
    "a value that interpolates the hydra node": [
        ["job.name=run-${hydra:job.id}", "optim.lr=0.5"],
        ["job.name=run-${hydra:job.num}", "optim.lr=0.25"],
    ],
    "add, force-add and delete forms are composed in full": [
        ["+extra=1", "optim.lr=0.1"],
        ["++train.steps=9", "optim.lr=0.2"],
        ["~resume", "optim.lr=0.3"],
        ["optim.lr=0.4"],
    ],
    "a hydra override per point": [
        ["hydra.job.chdir=true", "optim.lr=0.1"],
        ["hydra.job.chdir=false", "optim.lr=0.1"],
    ],
    "dict and list values": [
        ["train={steps:11,log_every:2}"],
        ["cluster.modules=[a,b]", "optim.lr=0.3"],
        ["train.steps=5"],
    ],
}


@pytest.fixture(scope="module")
def hydra_loader() -> Iterator:
    register_resolvers()
    register_schemas()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(DEFAULT_CONFIG_DIR), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        master = loader.load_configuration(
            "config", overrides=SWEEP_OVERRIDES, run_mode=RunMode.MULTIRUN
        )
        yield loader, master


def hydra_composed(loader, master, overrides: list[str], num: int) -> tuple[dict, dict]:
    """What Hydra's own load_sweep_config gives for the point: the whole config unresolved,
    and the resolved task config."""
    cfg = loader.load_sweep_config(master, overrides)
    with open_dict(cfg):
        cfg.hydra.job.id = f"jzk_{num}"
        cfg.hydra.job.num = num
    HydraConfig.instance().set_config(cfg)
    return OmegaConf.to_container(cfg), resolved_task_config(cfg, f"/runs/{num}")


@pytest.mark.parametrize("case", list(CASES))
def test_each_point_equals_hydras_composition(hydra_loader, case: str) -> None:
    loader, master = hydra_loader
    composer = PointConfigs(loader, master)
    ours = []
    for num, overrides in enumerate(CASES[case]):
        with composer.point(overrides, num) as cfg:
            ours.append((OmegaConf.to_container(cfg), resolved_task_config(cfg, f"/runs/{num}")))
    for num, overrides in enumerate(CASES[case]):
        whole, task = hydra_composed(loader, master, overrides, num)
        assert ours[num][0] == whole, f"point {num} {overrides}: the config differs"
        assert ours[num][1] == task, f"point {num} {overrides}: the resolved config differs"
    # Points that differ only in values share one composition.
    expected = {"values only": 1, "groups and values, groups alternating": 2}
    if case in expected:
        assert composer.compositions == expected[case]


@pytest.mark.parametrize("case", [*CASES, "a subdir of the user's own"])
def test_the_run_directory_is_the_one_hydra_resolves(hydra_loader, case: str) -> None:
    """resolved_point names the point's folder from the sections it resolved (the default
    subdir, ${jzk.point_name:}) without the resolver: the same name as Hydra resolving
    hydra.sweep.subdir, suffix of a resume-ignored override included; a subdir the user
    set is Hydra's to resolve."""
    loader, master = hydra_loader
    composer = PointConfigs(loader, master)
    points = CASES.get(case) or [
        ["hydra.sweep.subdir=p${hydra:job.num}", "optim.lr=0.1"],
        ["hydra.sweep.subdir=p${hydra:job.num}", "train.steps=3"],
    ]
    names = set()
    for num, overrides in enumerate(points):
        with composer.point(overrides, num) as cfg:
            run_dir, plain = resolved_point(cfg, "/sweep")
            assert run_dir == f"/sweep/{cfg.hydra.sweep.subdir}", overrides
            assert plain == resolved_task_config(cfg, run_dir)
        names.add(run_dir)
    if case == "values only":  # the last two differ only in train.steps: the suffix
        assert len(names) == len(points)
    if case == "a subdir of the user's own":
        assert names == {"/sweep/p0", "/sweep/p1"}


def test_resolved_values_follow_each_point(hydra_loader) -> None:
    loader, master = hydra_loader
    composer = PointConfigs(loader, master)
    seen = []
    for num, lr in enumerate(["0.1", "0.2", "0.3"]):
        with composer.point([f"optim.lr={lr}", "job.name=p${hydra:job.num}"], num) as cfg:
            plain = resolved_task_config(cfg, f"/runs/{num}")
        seen.append((plain["optim"]["lr"], plain["job"]["name"], plain["job"]["run_dir"]))
    assert seen == [(0.1, "p0", "/runs/0"), (0.2, "p1", "/runs/1"), (0.3, "p2", "/runs/2")]
    assert composer.compositions == 1


def test_a_refused_value_is_hydras_error_and_the_next_point_is_intact(hydra_loader) -> None:
    loader, master = hydra_loader
    composer = PointConfigs(loader, master)
    with pytest.raises(ConfigCompositionException) as ours:  # noqa: SIM117
        with composer.point(["optim.lr=0.5", "train.steps=many"], 0):
            pass
    with pytest.raises(ConfigCompositionException) as hydras:
        loader.load_sweep_config(master, ["optim.lr=0.5", "train.steps=many"])
    assert str(ours.value) == str(hydras.value)
    with pytest.raises(ConfigCompositionException, match="Could not override 'train.nope'"):  # noqa: SIM117
        with composer.point(["train.nope=1"], 1):
            pass
    with composer.point(["train.steps=6"], 2) as cfg:
        plain = resolved_task_config(cfg, "/runs/2")
    whole, task = hydra_composed(loader, master, ["train.steps=6"], 2)
    assert plain == task


def test_job_run_dir_in_a_points_args_is_that_points_run_directory(hydra_loader) -> None:
    """`--out_dir=${job.run_dir}` or `hydra.run.dir=${job.run_dir}/cwd` in a sweep point's
    job.args (a script task) names the point's own folder, and the config as written keeps
    its default afterwards."""
    loader, master = hydra_loader
    composer = PointConfigs(loader, master)
    args = "job.args=['--out_dir=${job.run_dir}','hydra.run.dir=${job.run_dir}/cwd']"
    for num, lr in enumerate(["1", "2"]):
        overrides = ["job.entry=app.py", args, f"+lr={lr}"]
        with composer.point(overrides, num) as cfg:
            run_dir, plain = resolved_point(cfg, "/sweep")
            assert plain["job"]["args"] == [f"--out_dir={run_dir}", f"hydra.run.dir={run_dir}/cwd"]
            assert plain["job"]["run_dir"] == run_dir and run_dir.startswith("/sweep/")
            assert str(cfg.job.run_dir) != run_dir  # the written default is back
