"""A script task's `jzk validate` table and rendered header say what the script gets
(issue 42 point 7), not the toolkit loop's batch, loader and loss, which it never reads."""

from __future__ import annotations

import pytest

from jeanzay_kit.cli.validate import describe_spec
from jeanzay_kit.config.compose import compose_config
from jeanzay_kit.config.spec import build_job_spec
from jeanzay_kit.slurm.sbatch import render_sbatch

SHAPE = ["cluster=generic_slurm", "resources.nodes=2", "resources.gpus_per_node=4"]


def _spec(*overrides: str):
    return build_job_spec(compose_config([*SHAPE, *overrides]), interpreter="/venv/bin/python")


@pytest.mark.parametrize(
    ("launcher", "per_node"), [("parallel.launcher=srun", 4), ("parallel.launcher=torchrun", 4)]
)
def test_a_script_task_is_described_by_what_it_gets(launcher: str, per_node: int) -> None:
    spec = _spec(
        "job.entry=prep.py",
        "job.args=[--epochs=3]",
        "job.resume_args=[--resume]",
        launcher,
    )
    table = describe_spec(spec)
    rows = {line.split("  ")[0] for line in table.splitlines()}
    assert {"script", "processes", "each gets", "on a stop", "resumes with"} <= rows
    assert not rows & {"batch", "loader", "loss", "precision", "parallel"}
    assert "/venv/bin/python prep.py --epochs=3" in table
    assert f"WORLD_SIZE=8, LOCAL_WORLD_SIZE={per_node}" in table
    assert "resumes with    --resume" in table
    header = render_sbatch(spec).splitlines()[3]
    assert header == (
        "# 2 node(s) x 4 GPU(s): your command prep.py, 8 processes with torchrun's "
        "variables (RANK, WORLD_SIZE, ...)"
    )


def test_the_toolkit_loop_is_still_described_by_its_layout_and_batch() -> None:
    table = describe_spec(_spec())
    assert "batch           global" in table and "script" not in table
