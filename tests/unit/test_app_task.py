"""`hydra/launcher=jeanzay` in your own Hydra app, without a cluster: what is submitted (a
stand-in sbatch records the script) and what each task does with the pickle submitit
would run (node/app_task.py), under a Slurm task's environment.

The Slurm side (a real sweep, a preemption and its resume) is
tests/slurm/test_hydra_app_launcher.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

APP = textwrap.dedent(
    """
    import logging
    import os

    import hydra
    import submitit
    from hydra.core.hydra_config import HydraConfig

    log = logging.getLogger(__name__)


    @hydra.main(version_base=None, config_path=".", config_name="config")
    def my_app(cfg):
        env = submitit.JobEnvironment()
        log.info(f"executing lr={cfg.lr} in {HydraConfig.get().runtime.output_dir} with {env}")
        if cfg.fail:
            raise ValueError("the app's own error")
        return cfg.lr


    if __name__ == "__main__":
        my_app()
    """
)

CONFIG = "defaults:\n  - override hydra/launcher: jeanzay\nlr: 0.1\nfail: false\n"

SBATCH = (
    '#!/bin/bash\ncp "${@: -1}" "$(dirname "$0")/script-$$.sh"\necho "Submitted batch job 42"\n'
)

RUN_PICKLE = """
import sys
from submitit.core.utils import DelayedSubmission

delayed = DelayedSubmission.load(sys.argv[1])
again = delayed.function.checkpoint(*delayed.args)  # submitit's requeue protocol
assert again.function is delayed.function and again.args == delayed.args, again.args
try:
    ret = delayed.result()
except ValueError as err:
    print("RAISED", err)
else:
    print("RETURNED", ret.status.name, ret.return_value)
"""


def _slurm_task_env(job: str, index: int) -> dict[str, str]:
    return {
        **os.environ,
        "SUBMITIT_EXECUTOR": "slurm",
        "SLURM_JOB_ID": f"{job}{index}",
        "SLURM_ARRAY_JOB_ID": job,
        "SLURM_ARRAY_TASK_ID": str(index),
        "SLURM_PROCID": "0",
        "SLURM_NTASKS": "1",
        "SLURM_JOB_NUM_NODES": "1",
        "SLURM_NODEID": "0",
        "SLURM_LOCALID": "0",
        "SLURM_JOB_NODELIST": "localhost",
    }


def test_your_function_is_submitted_and_each_task_runs_it(tmp_path: Path) -> None:
    project = tmp_path / "my_app"
    project.mkdir()
    (project / "my_app.py").write_text(APP)
    (project / "config.yaml").write_text(CONFIG)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text(SBATCH)
    (bin_dir / "sbatch").chmod(0o755)
    sweep = tmp_path / "multirun"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    argv = [sys.executable, "my_app.py", "-m", "hydra.launcher.cluster=slurm_local"]
    argv += ["hydra.launcher.gpus_per_node=1", "fail=false,true", f"hydra.sweep.dir={sweep}"]
    done = subprocess.run(argv, cwd=project, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "each task calling __main__.my_app" in done.stdout

    (script,) = [p.read_text() for p in bin_dir.glob("script-*.sh")]
    # One signal: submitit's, signal_delay_s (120) before the limit; not the toolkit's USR1.
    assert "#SBATCH --signal=USR2@120" in script and "USR1" not in script
    assert "#SBATCH --gres=gpu:1" in script and "#SBATCH --job-name=my_app" in script
    assert "#SBATCH --time=60" in script and "export JZK_CODE_DIR=" in script
    records = [json.loads(line) for line in (sweep / "manifest.jsonl").read_text().splitlines()]
    assert [(r["overrides"], r["run_dir"]) for r in records] == [
        (["fail=False"], str(sweep / "0")),  # as Hydra's sweeper writes the values
        (["fail=True"], str(sweep / "1")),
    ]

    (project / "run_pickle.py").write_text(RUN_PICKLE)
    said = []
    for index in (0, 1):
        pickle = sweep / ".submitit" / f"42_{index}" / f"42_{index}_submitted.pkl"
        task = subprocess.run(
            [sys.executable, "run_pickle.py", str(pickle)],
            cwd=project,
            env=_slurm_task_env("42", index),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert task.returncode == 0, task.stderr[-3000:]
        said.append(task.stdout)
    assert "RETURNED COMPLETED 0.1" in said[0]
    assert "RAISED the app's own error" in said[1]  # the job fails, as Slurm will say

    point = sweep / "0"
    assert json.loads((point / "result.json").read_text())["value"] == 0.1
    assert (point / "lease.json").is_file() and (point / "provenance").is_dir()
    # Hydra's output directory is the point's run directory; its log named after the app.
    log = (point / "my_app.log").read_text()
    assert f"executing lr=0.1 in {point} with JobEnvironment(job_id=42_0" in log
    assert not (sweep / "1" / "result.json").exists()
