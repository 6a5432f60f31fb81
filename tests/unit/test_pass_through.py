"""job.sbatch_args / job.srun_args: any Slurm option the toolkit does not set itself
reaches the script (and submitit) quoted; one it sets is refused naming its key."""

from __future__ import annotations

import pytest

from jeanzay_kit.config.compose import compose_config
from jeanzay_kit.config.spec import build_job_spec
from jeanzay_kit.errors import SpecError
from jeanzay_kit.launch.arrays import submitit_parameters
from jeanzay_kit.slurm.sbatch import render_sbatch


def spec_with(**job):
    cfg = compose_config(["cluster=slurm_local"])
    cfg["job"].update(job)
    return build_job_spec(cfg)


def test_options_reach_the_script_and_submitit() -> None:
    spec = spec_with(
        sbatch_args=["--mail-type=END", "--mail-user=a b@lab.fr", "--exclusive"],
        srun_args=["--cpu-bind=cores", "--label"],
    )
    script = render_sbatch(spec)
    assert "#SBATCH --mail-type=END" in script
    assert '#SBATCH --mail-user="a b@lab.fr"' in script
    assert "#SBATCH --exclusive\n" in script
    assert "srun --kill-on-bad-exit=1 --cpu-bind=cores --label python" in script
    # submitit writes values unquoted: one with a space is refused on that path alone.
    params = submitit_parameters(
        spec_with(
            sbatch_args=["--mail-type=END", "--exclusive"], srun_args=list(spec.job.srun_args)
        )
    )
    extra = params["additional_parameters"]
    assert extra["mail-type"] == "END" and extra["exclusive"] is True
    assert params["srun_args"] == ["--kill-on-bad-exit=1", "--cpu-bind=cores", "--label"]


@pytest.mark.parametrize(
    ("key", "arg", "says"),
    [
        ("sbatch_args", "--time=10:00", "is set by resources.time"),
        ("sbatch_args", "--nodes=3", "is set by resources.nodes"),
        ("sbatch_args", "--gres=gpu:2", "is set by resources.gpus_per_node"),
        ("sbatch_args", "--array=0-3", "is set by `jzk render --array`"),
        ("sbatch_args", "--output=x.out", "is set by job.log_dir"),
        ("sbatch_args", "-x n1", "is not a long option"),
        ("srun_args", "--kill-on-bad-exit=0", "is set by the toolkit"),
        ("srun_args", "--ntasks=3", "is set by resources.gpus_per_node"),
    ],
)
def test_an_option_the_toolkit_sets_is_refused_naming_its_key(key, arg, says) -> None:
    with pytest.raises(SpecError) as err:
        spec_with(**{key: [arg]})
    assert f"job.{key}=" in str(err.value) and says in str(err.value)


def test_a_string_instead_of_a_list_is_refused() -> None:
    with pytest.raises(SpecError, match="must be a list of options"):
        spec_with(sbatch_args="--mail-type=END")
