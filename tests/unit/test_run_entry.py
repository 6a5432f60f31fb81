"""The node entry point refuses to train a Slurm profile outside a Slurm task."""

from __future__ import annotations

from pathlib import Path

from jeanzay_kit.config.compose import compose_config
from jeanzay_kit.run import is_launched_task, main


def test_a_slurm_profile_outside_a_job_step_is_refused(tmp_path: Path, capsys) -> None:
    cfg = compose_config(["cluster=slurm_local"])
    assert main(cfg, {"SLURM_JOB_ID": "5"}, tmp_path) == 2  # salloc shell, not srun
    err = capsys.readouterr().err
    assert "not a task of a Slurm job step" in err and "jzk submit cluster=slurm_local" in err
    assert not list(tmp_path.iterdir())  # nothing trained, nothing written


def test_launched_tasks_are_told_apart_from_shells() -> None:
    assert is_launched_task({"SLURM_PROCID": "0", "SLURM_STEP_ID": "0"})
    assert is_launched_task({"RANK": "0", "LOCAL_RANK": "0"})
    assert not is_launched_task({"SLURM_JOB_ID": "5", "SLURM_PROCID": "0"})
