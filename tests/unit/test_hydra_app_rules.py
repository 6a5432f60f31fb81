"""A Hydra app as a script task: recognised from its source, given one output directory
in its run directory, told the fix when it saved nothing (script/hydra_app_rules.py)."""

from __future__ import annotations

import pytest

from jeanzay_kit.script import hydra_app_rules as rules
from jeanzay_kit.script.script_rules import requeue_note, resume_warning

DECORATED = """
import hydra
from omegaconf import DictConfig

@hydra.main(version_base=None, config_path="conf", config_name="config")
def main(cfg: DictConfig) -> None:
    pass
"""


@pytest.mark.parametrize(
    "source",
    [
        DECORATED,
        "from hydra import main\n@main(config_path='conf')\ndef f(cfg): ...\n",
        "from hydra import main as hmain\nf = hmain(config_path='conf')(lambda c: c)\n",
        "import hydra as h\n@h.main(version_base=None)\ndef f(cfg): ...\n",
    ],
)
def test_a_script_calling_hydra_main_is_a_hydra_app(source: str) -> None:
    assert rules.is_hydra_app(source)


@pytest.mark.parametrize(
    "source",
    [
        "import torch\nprint('hydra.main')\n",  # a string
        "# @hydra.main(config_path='conf')\nimport argparse\n",  # a comment
        "from hydra import compose, initialize\n",  # the compose API: no output directory
        "def main(): ...\nmain()\n",
        "import hydra\n@hydra.main(\n",  # does not parse
    ],
)
def test_other_scripts_are_not(source: str) -> None:
    assert not rules.is_hydra_app(source)


def never(_value: str) -> bool:
    return False


def test_the_output_directory_is_given_unless_the_args_choose_one() -> None:
    assert rules.app_args(["epochs=3"], "/runs/a/cwd", never) == ["hydra.run.dir=/runs/a/cwd"]
    # A path Hydra's grammar would misread is quoted.
    assert rules.app_args([], "/runs/a 0/cwd", never) == ["hydra.run.dir='/runs/a 0/cwd'"]
    assert rules.app_args(["++hydra.run.dir=/elsewhere"], "/runs/a/cwd", never) == []
    assert rules.app_args(["-m", "lr=1,2"], "/runs/a/cwd", never) == []


def test_a_run_dir_of_the_users_that_is_the_run_directory_keeps_the_toolkit_record() -> None:
    args = ["hydra.run.dir=outputs/x"]
    assert rules.app_args(args, "/runs/x/cwd", lambda v: v == "outputs/x") == [
        "hydra.output_subdir=cwd/.hydra"
    ]
    both = [*args, "hydra.output_subdir=mine"]
    assert rules.app_args(both, "/runs/x/cwd", lambda v: True) == []


def test_hydras_own_files_are_not_the_apps_progress() -> None:
    assert rules.is_hydra_record(("cwd", ".hydra", "config.yaml"), "my_app")
    assert rules.is_hydra_record(("cwd", "my_app.log"), "my_app")
    assert not rules.is_hydra_record(("cwd", "ckpt.pt"), "my_app")
    assert not rules.is_hydra_record(("cwd", "sub", "my_app.log"), "my_app")
    assert not rules.is_hydra_record((".hydra", "config.yaml"), "my_app")
    assert rules.job_name("my_app.py") == "my_app"
    assert rules.job_name("src/apps/train.py") == "train"
    assert rules.job_name("-m pkg.app") == "app"


def test_the_stop_hint_of_a_hydra_app_names_hydra_run_dir_not_out_dir() -> None:
    hint = rules.stop_hint("/runs/a/cwd", [])
    note = requeue_note(False, [], "/runs/a", True, hint)
    assert "hydra.run.dir" in note and "--out_dir" not in note
    assert "HydraConfig.get().runtime.output_dir" in note and "/runs/a/cwd" in note
    theirs = rules.stop_hint("/runs/a/cwd", ["hydra.run.dir=outputs/${now:%H}"])
    assert "your hydra.run.dir=outputs/${now:%H} in job.args" in theirs
    # A note for a script that wrote its files is the same for an app.
    assert requeue_note(True, [], "/runs/a", True, hint) == requeue_note(True, [], "/runs/a")


def test_before_the_queue_a_hydra_app_gets_the_hydra_hint() -> None:
    warning = resume_warning([], [], DECORATED, "outputs/a")
    assert warning is not None and "hydra.run.dir" in warning and "--out_dir" not in warning
    saves = DECORATED + "    out = HydraConfig.get().runtime.output_dir\n"
    assert resume_warning([], [], saves, "outputs/a") is None
    # On the session API (in the app or a module of the user's it imports), it resumes
    # from the run directory's checkpoints: no warning (a user trial read a false one).
    assert resume_warning([], [], DECORATED, "outputs/a", uses_toolkit=True) is None


@pytest.mark.parametrize(
    ("config_yaml", "is_the_apps"),
    [
        ("epochs: 3\nlr: 0.1\n", True),  # a Hydra app's own root config
        ("defaults:\n  - model: resnet\n  - _self_\nepochs: 3\n", True),
        ("defaults:\n  - jeanzay_kit\n  - override model: net\n  - _self_\n", False),  # jzk init
        ("defaults:\n  - base_config\n  - _self_\n", False),
        (None, False),  # no config.yaml: groups of the project's own (conf/model/net.yaml)
    ],
)
def test_a_projects_conf_is_left_to_its_hydra_app_when_not_the_toolkits(
    tmp_path, config_yaml: str | None, is_the_apps: bool
) -> None:
    from jeanzay_kit.config.compose import config_roots, is_app_conf

    conf = tmp_path / "conf"
    (conf / "model").mkdir(parents=True)
    if config_yaml is not None:
        (conf / "config.yaml").write_text(config_yaml)
    assert is_app_conf(conf) == is_the_apps
    origins = [r.origin for r in config_roots({"JZK_CONFIG_HOME": str(tmp_path / "me")}, tmp_path)]
    assert origins == (
        ["user", "jeanzay_kit"] if is_the_apps else ["project", "user", "jeanzay_kit"]
    )
