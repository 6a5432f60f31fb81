"""job.container (issue 42 point 1): the rules, the rendered words run through bash, and
the requeue asked of the batch shell from inside a container. The Slurm test with a
stand-in runtime is tests/slurm/test_container.py; the Jean Zay golden script is
tests/golden/h100_container_2x4.sbatch."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from jeanzay_kit.cli.validate import container_warning, describe_spec
from jeanzay_kit.config.compose import compose_config
from jeanzay_kit.config.spec import build_job_spec
from jeanzay_kit.distributed.ranks import rank_info_from_env
from jeanzay_kit.ending.requeue import after_stop
from jeanzay_kit.errors import LaunchError, RenderError, SpecError
from jeanzay_kit.launch.arrays import submitit_parameters
from jeanzay_kit.node.restart_job import restart_after_failure
from jeanzay_kit.rundir.run_directory import RunDir
from jeanzay_kit.slurm.sbatch import render_sbatch
from jeanzay_kit.slurm.shell_words import expanding_word
from tests.helpers import bash_prints
from tests.unit.test_restart_job import Scontrol

JZ = ["cluster=jeanzay_h100", "cluster.account=abc@h100"]
IMAGE = "job.container.image=$SINGULARITY_ALLOWED_DIR/pytorch.sif"


def _spec(*overrides: str, interpreter: str | None = "/venv/bin/python"):
    return build_job_spec(compose_config(list(overrides)), interpreter=interpreter)


@pytest.mark.parametrize(
    ("overrides", "key", "words"),
    [
        (["job.container.image='$(id).sif'"], "job.container.image", "only $NAME"),
        (["job.container.image=/x/img"], "job.container.image", "not a .sif image"),
        (["job.container.image=docker://pytorch"], "job.container.image", "not a .sif"),
        ([IMAGE, "job.container.runtime=docker"], "job.container.runtime", "not one of"),
        ([IMAGE, "job.container.binds=['a,b']"], "job.container.binds", "one bind spec"),
        ([IMAGE, "job.container.binds=['a:b:ro:x']"], "job.container.binds", "one bind spec"),
        ([IMAGE, "job.container.options=[--cleanenv]"], "job.container.options", "environment"),
        ([IMAGE, "job.container.options=[-C]"], "job.container.options", "environment"),
        (
            [IMAGE, "cluster.pytorch_module=pytorch-gpu/py3/2.9.0"],
            "cluster.pytorch_module",
            "both bring torch",
        ),
    ],
)
def test_a_container_that_would_fail_on_the_node_is_refused_first(overrides, key, words) -> None:
    with pytest.raises(SpecError) as err:
        _spec(*JZ, *overrides)
    assert f"{key}=" in str(err.value) and words in str(err.value)


def test_a_container_is_for_slurm_jobs_not_local_workers() -> None:
    with pytest.raises(SpecError, match="cluster=local starts its workers on this machine"):
        _spec("job.container.image=/x/pt.sif")


def test_the_profile_gives_the_runtime_its_module_and_the_python_is_the_images() -> None:
    spec = _spec(*JZ, IMAGE)
    assert spec.job.container is not None and spec.job.container.runtime == "singularity"
    assert spec.loaded_modules == ("arch/h100", "singularity")
    assert spec.job.python == "python"  # job.python=auto: the image's, not the login node's
    assert _spec(*JZ).job.python == "/venv/bin/python"
    table = describe_spec(spec)
    assert "singularity exec --nv $SINGULARITY_ALLOWED_DIR/pytorch.sif" in table
    assert "scontrol in the batch shell, outside the container" in table


def test_an_image_outside_the_allowed_folder_is_named_with_idrcontmgr(tmp_path: Path) -> None:
    allowed = tmp_path / "allowed"
    env = {"SINGULARITY_ALLOWED_DIR": str(allowed), "WORK": str(tmp_path / "work")}
    assert container_warning(_spec(*JZ, IMAGE), env) is None
    line = container_warning(_spec(*JZ, "job.container.image=$WORK/pt.sif"), env)
    assert line is not None and f"idrcontmgr cp {tmp_path}/work/pt.sif" in line
    assert "job.container.image='$SINGULARITY_ALLOWED_DIR/pt.sif'" in line
    local = ["cluster=slurm_local", "job.container.image=/x/pt.sif"]
    assert container_warning(_spec(*local), env) is None  # no allowed folder there


def test_only_variables_are_expanded_in_an_image_word() -> None:
    out = bash_prints(expanding_word("$DIR/my ${NAME}.sif"), {"DIR": "/a b", "NAME": "pt"})
    assert out == "/a b/my pt.sif"
    with pytest.raises(RenderError):
        expanding_word("$DIR/`id`.sif")


def test_the_step_runs_in_the_container_and_the_requeue_outside(tmp_path: Path) -> None:
    spec = _spec(
        "cluster=slurm_local",
        "job.container.image=$IMAGES/pt.sif",
        f"job.run_dir={tmp_path}/run",
        "job.container.options=[--writable-tmpfs]",
    )
    script = render_sbatch(spec, workdir=str(tmp_path))
    subprocess.run(["bash", "-n"], input=script, text=True, check=True, timeout=10)
    srun = next(line for line in script.splitlines() if line.startswith("srun "))
    assert srun.startswith('srun --kill-on-bad-exit=1 "${jzk_container[@]}" ')
    restart = next(line for line in script.splitlines() if "restart_job" in line)
    assert restart.lstrip().startswith('"${jzk_container[@]}" ')
    assert "jzk_container=(apptainer exec" in script and "--nv" not in script  # CPU nodes
    # The requeue asked from inside is run by this shell, after the step.
    assert script.index("restart_job") < script.rindex('scontrol requeue "$jzk_requeue"')
    with pytest.raises(LaunchError, match="jzk submit"):
        submitit_parameters(spec)


def test_the_bind_loop_keeps_only_folders_this_node_has(tmp_path: Path) -> None:
    spec = _spec("cluster=slurm_local", "job.container.image=/i/pt.sif", f"job.log_dir={tmp_path}")
    script = render_sbatch(spec, workdir=str(tmp_path / "project"))
    start = script.index("jzk_binds=()")
    lines = script[start:].splitlines()[:4]
    shown = subprocess.run(
        ["bash", "-c", "\n".join([*lines, 'printf "%s\\n" "${jzk_binds[@]}"'])],
        capture_output=True,
        text=True,
        check=True,
        timeout=10,
    ).stdout.split()
    assert shown == [f"--bind={tmp_path}"]  # the project folder does not exist here


def test_inside_a_container_every_rank_asks_the_shell_instead_of_scontrol(
    tmp_path: Path, capsys
) -> None:
    request = tmp_path / ".jzk-requeue-request"
    for rank in (1, 0):
        env = {
            "SLURM_JOB_ID": "42",
            "SLURM_PROCID": str(rank),
            "SLURM_LOCALID": "0",
            "SLURM_NTASKS": "2",
            "SLURM_NNODES": "2",
            "SLURM_TASKS_PER_NODE": "1(x2)",
            "SLURM_NODEID": str(rank),
            "SLURM_STEP_NODELIST": "n[1-2]",
            "SLURM_JOB_NODELIST": "n[1-2]",
            "JZK_REQUEUE_FILE": str(request),
        }
        info = rank_info_from_env(env)
        runner = Scontrol()
        with pytest.raises(SystemExit) as ended:
            after_stop(info, "SIGUSR1", 50, runner=runner, sleep=lambda s: None)
        assert ended.value.code == 3 and runner.calls == []
        assert request.read_text() == "42\n"
        request.unlink()
    assert "asked the batch shell to requeue job 42; it resumes from step-50" in (
        capsys.readouterr().out
    )


def test_a_restart_inside_a_container_asks_the_shell(tmp_path: Path) -> None:
    request = tmp_path / "request"
    env = {"SLURM_JOB_ID": "42", "JZK_REQUEUE_FILE": str(request)}
    runner = Scontrol()
    line = restart_after_failure(RunDir(tmp_path), 4, 3, env=env, runner=runner)
    assert runner.calls == [] and request.read_text() == "42\n"
    assert "hang; requeued job 42 (1/3)" in line


def test_a_rank_that_cannot_write_the_request_leaves_the_word_to_rank_0(tmp_path: Path) -> None:
    from dataclasses import replace

    from jeanzay_kit.ending.requeue import ask_from_every_rank

    env = {"SLURM_JOB_ID": "42", "JZK_REQUEUE_FILE": str(tmp_path / "gone" / "request")}
    info = replace(rank_info_from_env(env), rank=1)
    ask_from_every_rank(info)  # no folder to write in: no exception, rank 0 reports it
    assert not (tmp_path / "gone").exists()
    with pytest.raises(RenderError):
        expanding_word("$DIR/!x.sif")  # one rule with the config check: only $NAME
