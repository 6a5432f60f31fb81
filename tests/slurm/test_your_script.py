"""A nanoGPT-style script, unchanged, on 2 nodes of the local Slurm cluster (issue 32).

docs/examples/your_script/train.py, copied into a project folder of its own, submitted
with `jzk submit ... -- ARGS` exactly as a user types it: it trains with torchrun's
variables set from SLURM's, dies of the time-limit signal (SIGUSR1, which it does not
handle), the job is requeued, and the second attempt runs it with job.resume_args: it goes
on from its own checkpoint, its iteration counter going on. A second job checks that
awkward arguments reach a script byte for byte through the rendered script and sbatch.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from tests.slurm.cluster import (
    JZK,
    PYTHON,
    REPO,
    manifest_records,
    run,
    sacct_states,
    wait_for,
    wait_for_line,
)
from tests.unit.test_script_runs import AWKWARD_ARGUMENTS

pytestmark = pytest.mark.timeout(600)


def test_a_nanogpt_style_script_is_requeued_and_resumes_its_own_checkpoint(
    slurm, tmp_path: Path
) -> None:
    project = tmp_path / "my gpt"
    shutil.copytree(REPO / "docs" / "examples" / "your_script", project)
    sub = run(
        [
            JZK,
            "submit",
            "cluster=slurm_local",
            "resources.nodes=2",
            "resources.gpus_per_node=1",
            "job.name=gpt",
            f"job.python={PYTHON}",
            "job.entry=train.py",
            "job.resume_args=[--init_from=resume]",
            "--",
            "config/tiny.py",
            "--out_dir=${job.run_dir}",
            "--step_seconds=0.2",
        ],
        slurm,
        project,
    )
    assert sub.returncode == 0, sub.stderr
    assert "warning" not in sub.stderr, sub.stderr  # it has resume arguments
    (run_dir,) = (project / "outputs").glob("gpt-*")
    (record,) = manifest_records(run_dir)
    job_id, log = record["job_id"], Path(record["log"])
    wait_for_line(log, "iter 13:", job_id, slurm)
    signalled = run(["scancel", "--signal=USR1", job_id], slurm)
    assert signalled.returncode == 0, signalled.stderr
    wait_for(job_id, slurm, timeout=300)

    out, err = log.read_text(), log.with_suffix(".err").read_text()
    assert "requeued job" in err and "no restart spent" in err, err[-3000:]
    assert "runs the script again with --init_from=resume" in err, err[-3000:]
    assert "running it with job.resume_args --init_from=resume" in out, out[-3000:]
    saved_at = int(re.search(r"resuming from .*ckpt.pt at iter (\d+)", out).group(1))
    assert saved_at == 10, out[-3000:]
    after = out.split("resuming from", 1)[1]
    assert re.search(r"^iter 11:.*world 2$", after, re.MULTILINE), after[:2000]
    assert "done: 40 iters" in out, err[-3000:]
    assert sacct_states(job_id, slurm, duplicates=True)[-1] == "COMPLETED"
    # Its record says what happened: no save on the signal, which it does not handle.
    stop = json.loads((run_dir / "endings.jsonl").read_text().splitlines()[0])
    assert stop["kind"] == "stopped" and "after a save" not in stop["evidence"], stop
    assert "SIGUSR1, which the script does not handle" in stop["evidence"], stop
    # The config file named in the arguments was read from the frozen copy: its relative
    # path resolves in the script's working directory, whose config/ leads there.
    frozen = (run_dir / "cwd" / "config" / "tiny.py").resolve()
    assert frozen.is_relative_to((project / "logs" / "code").resolve()), frozen


def test_arguments_reach_the_script_byte_for_byte_through_sbatch(slurm, tmp_path: Path) -> None:
    """`jzk render ... -- ARGS`, then plain `sbatch` of the written script from a folder
    where nothing was prepared: the script writes the argv it got."""
    project = tmp_path / "args project"
    project.mkdir()
    (project / "echo_args.py").write_text(
        "import json, os, sys\n"
        "with open(os.path.join(os.environ['JZK_RUN_DIR'], 'argv.json'), 'w') as f:\n"
        "    json.dump(sys.argv[1:], f)\n"
    )
    rendered = run(
        [
            JZK,
            "render",
            "-o",
            str(project),
            "cluster=slurm_local",
            "resources.gpus_per_node=1",
            f"job.python={PYTHON}",
            "job.entry=echo_args.py",
            "job.name=args",
            f"job.run_dir={tmp_path / 'run'}",
            "--",
            *AWKWARD_ARGUMENTS,
        ],
        slurm,
        project,
    )
    assert rendered.returncode == 0, rendered.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    sub = run(["sbatch", "--parsable", str(project / "args.sbatch")], slurm, elsewhere)
    assert sub.returncode == 0, sub.stderr
    job_id = sub.stdout.strip().split(";")[0]
    wait_for(job_id, slurm, timeout=180)
    assert json.loads((tmp_path / "run" / "argv.json").read_text()) == AWKWARD_ARGUMENTS
