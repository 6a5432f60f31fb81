"""Issue 42 point 8: a Hugging Face Trainer script of the Trainer docs' shape
(docs/examples/hf_trainer/train_hf.py: a small GPT-2 from a config, `save_steps`, resume
with `get_last_checkpoint(output_dir)`), unchanged, through `jzk submit` on the 2 nodes of
the local cluster, with the real transformers and accelerate. Two jobs run side by side
and get the time-limit signal (SIGUSR1) after their checkpoint-10: without the toolkit's
callback the Trainer dies of it, the job is requeued and resumes from checkpoint-10 (the
steps after it are redone); with `trainer.add_callback(SaveOnStop())` it saves at the
signal's step and exits 3, the job is requeued and resumes from that step. Both end
COMPLETED at their last step."""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import pytest

from tests.slurm.cluster import JZK, PYTHON, REPO, manifest_records, run, sacct_states, wait_for

pytest.importorskip("transformers")
pytest.importorskip("accelerate")
pytestmark = pytest.mark.timeout(600)
ARGS = ["--output_dir", "out", "--max_steps", "30", "--save_steps", "10", "--step_seconds", "0.3"]


def _submit(project: Path, slurm, name: str, *extra: str) -> tuple[str, Path, Path]:
    sub = run(
        [
            JZK, "submit", "cluster=slurm_local", "resources.nodes=2", "resources.gpus_per_node=1",
            f"job.name={name}", f"job.python={PYTHON}", "job.entry=train_hf.py",
            "--", *ARGS, *extra,
        ],
        slurm,
        project,
    )  # fmt: skip
    assert sub.returncode == 0, sub.stderr
    (run_dir,) = (project / "outputs").glob(f"{name}-*")
    (record,) = manifest_records(run_dir)
    return record["job_id"], run_dir, Path(record["log"])


def _after_checkpoint_10(run_dir: Path, job: str, slurm, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not (run_dir / "cwd" / "out" / "checkpoint-10").is_dir():
        assert time.monotonic() < deadline, f"job {job}: no checkpoint-10 in {run_dir}"
        time.sleep(0.5)
    time.sleep(2.0)  # a few steps past it (0.3 s each): the steps a preemption can lose


def test_a_trainer_is_requeued_and_resumes_and_with_save_on_stop_loses_no_step(
    slurm, tmp_path: Path
) -> None:
    project = tmp_path / "hf project"
    shutil.copytree(REPO / "docs" / "examples" / "hf_trainer", project)
    plain, plain_dir, plain_log = _submit(project, slurm, "plain")
    saving, saving_dir, saving_log = _submit(project, slurm, "saving", "--save_on_stop")
    for job, run_dir in ((plain, plain_dir), (saving, saving_dir)):
        _after_checkpoint_10(run_dir, job, slurm)
        assert run(["scancel", "--signal=USR1", job], slurm).returncode == 0
    for job in (plain, saving):
        wait_for(job, slurm, timeout=300)

    plain_out = plain_log.read_text()
    assert "resuming from out/checkpoint-10" in plain_out, plain_out[-3000:]
    assert "requeued job" in plain_log.with_suffix(".err").read_text()

    out, err = saving_log.read_text(), saving_log.with_suffix(".err").read_text()
    stopped = re.search(r"stop signal \(SIGUSR1\): saving checkpoint-(\d+)", out)
    assert stopped and int(stopped.group(1)) > 10, out[-3000:]
    assert f"resuming from out/checkpoint-{stopped.group(1)}" in out, out[-3000:]
    assert "requeued job" in err and "no restart spent" in err, err[-3000:]
    for job, log in ((plain, plain_log), (saving, saving_log)):
        assert "finished at step 30" in log.read_text()
        assert sacct_states(job, slurm, duplicates=True)[-1] == "COMPLETED"
