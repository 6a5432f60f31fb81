"""The example scripts in sbatch/ are what conf/ renders today."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from jeanzay_kit.config.compose import compose_config
from jeanzay_kit.config.spec import build_job_spec
from jeanzay_kit.slurm.sbatch import render_sbatch

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "sbatch").glob("*.sbatch"))
HEADER = "# Re-render: jzk render "


def _overrides(path: Path) -> list[str]:
    for line in path.read_text().splitlines()[:5]:
        if line.startswith(HEADER):
            return shlex.split(line[len(HEADER) :])
    raise AssertionError(f"{path} has no '{HEADER}...' line")


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_has_not_drifted_from_conf(path: Path) -> None:
    overrides = _overrides(path)
    spec = build_job_spec(compose_config(overrides))
    fresh = render_sbatch(spec, rendered_by=overrides, workdir=spec.job.workdir)
    assert fresh == path.read_text(), (
        f"sbatch/{path.name} no longer matches what conf/ renders. If the change is intended, "
        "run `bash scripts/render-examples.sh` and review `git diff sbatch/`"
    )


def test_every_jean_zay_profile_has_an_example() -> None:
    profiles = {
        o.split("=", 1)[1] for p in EXAMPLES for o in _overrides(p) if o.startswith("cluster=")
    }
    assert {"jeanzay_v100", "jeanzay_v100_8gpu", "jeanzay_a100", "jeanzay_h100"} <= profiles
