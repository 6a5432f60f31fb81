"""Every end of an attempt classified, and no restart that cannot help (issue 58).

The user's project is docs/examples/your_model with a dataset that raises on one corrupt
record, read by real loader worker processes under 2 gloo ranks, as the issue met it: the
run restarted 3 times from step 0 (preemption.max_restarts=3), failing at the same record
each time. Now it ends after the first repeat, naming the record, and the run's record,
`jzk status --json` and `jzk report` say why.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.distributed.test_your_model import EXAMPLE, JZK, jzk, run_dir_of

CORRUPT = """
import torch

from userpkg.cnn import SmallCNN
from userpkg.images import RandomImages


class CorruptImages(RandomImages):
    def __getitem__(self, index):
        if index == 1500:
            raise ValueError(f"corrupt record {index}")
        return super().__getitem__(index)


class GreedyCNN(SmallCNN):
    # An out-of-memory stand-in on CPU: PyTorch's own exception and words, at the 6th call.
    calls = 0

    def forward(self, x):
        GreedyCNN.calls += 1
        if GreedyCNN.calls > 5:
            raise torch.OutOfMemoryError(
                "CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity "
                "of 79.19 GiB of which 1.25 GiB is free."
            )
        return super().forward(x)
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "images-project"
    shutil.copytree(EXAMPLE, folder, ignore=shutil.ignore_patterns("outputs", "__pycache__"))
    (folder / "userpkg" / "corrupt.py").write_text(CORRUPT)
    return folder


@pytest.mark.timeout(400)
def test_a_corrupt_record_ends_the_run_after_the_first_repeat(project: Path) -> None:
    run = jzk(
        project,
        "train",
        "resources.gpus_per_node=2",
        "data._target_=userpkg.corrupt.CorruptImages",
        "train.steps=60",
        "train.eval_every=0",
        "checkpoint.every_steps=50",  # no checkpoint before the record
        "preemption.max_restarts=3",
        timeout=380,
    )
    err = run.stderr
    assert run.returncode != 0, err[-3000:]
    run_dir = run_dir_of(project, "images")
    # One restart (the first failure may be a passing one), then the repeat ends it.
    assert err.count("restarting after a crash") == 1, err[-4000:]
    assert "(2/3)" not in err, err[-4000:]
    endings = [json.loads(line) for line in (run_dir / "endings.jsonl").read_text().splitlines()]
    assert [e["kind"] for e in endings] == ["data_error", "data_error"], endings
    assert [e["retried"] for e in endings] == [True, False], endings
    assert endings[0]["step"] == endings[1]["step"] and endings[0]["step"] > 0, endings
    assert endings[1]["index"] == 1500, endings
    assert "ValueError: corrupt record 1500 (dataset index 1500)" in endings[1]["evidence"]
    said = [line for line in err.splitlines() if "not restarted" in line]
    assert said and "corrupt record 1500" in said[-1], err[-4000:]
    assert "the attempt before failed the same way at the same step" in said[-1], said
    assert "HINT: fix or skip the named sample" in said[-1], said

    # jzk status --json and jzk report say the same.
    status = subprocess.run(
        [JZK, "status", str(run_dir), "--json"], cwd=project, capture_output=True, text=True
    )
    obj = json.loads(status.stdout.splitlines()[0])
    assert obj["verdict"] == "data_error", obj
    assert "corrupt record 1500" in obj["evidence"], obj
    report = jzk(project, "report", str(run_dir), timeout=120)
    assert "data error at step" in report.stdout and "corrupt record 1500" in report.stdout, (
        report.stdout[-2000:],
        report.stderr[-2000:],
    )


@pytest.mark.timeout(300)
def test_out_of_memory_ends_at_once_with_its_figure(project: Path) -> None:
    run = jzk(
        project,
        "train",
        "resources.gpus_per_node=2",
        "model._target_=userpkg.corrupt.GreedyCNN",
        "job.name=greedy",
        "train.steps=30",
        "train.eval_every=0",
        "preemption.max_restarts=3",
        timeout=280,
    )
    err = run.stderr
    assert run.returncode != 0 and "restarting" not in err, err[-3000:]
    said = [line for line in err.splitlines() if "not restarted" in line]
    assert said, err[-3000:]
    assert "out of GPU memory at step" in said[-1], said
    assert "Tried to allocate 20.00 GiB. GPU 0 has a total capacity of 79.19 GiB" in said[-1]
    assert "HINT: lower train.micro_batch_size" in said[-1], said
    ending = json.loads((run_dir_of(project, "greedy") / "endings.jsonl").read_text())
    assert ending["kind"] == "gpu_oom" and ending["retried"] is False, ending


OOM_SCRIPT = """
import torch

print("step 1", flush=True)
raise torch.OutOfMemoryError(
    "CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity "
    "of 79.19 GiB of which 1.25 GiB is free."
)
"""


@pytest.mark.timeout(120)
def test_a_local_script_run_records_its_end(tmp_path: Path) -> None:
    """`jzk train job.entry=script.py` on this machine: the script's end is classified
    from its log and recorded as a Slurm job's is (before: outcome.json only, no class)."""
    (tmp_path / "greedy.py").write_text(OOM_SCRIPT)
    run = jzk(tmp_path, "train", "job.entry=greedy.py", "job.name=script", timeout=100)
    assert run.returncode != 0, run.stderr[-3000:]
    run_dir = run_dir_of(tmp_path, "script")
    (ending,) = [json.loads(x) for x in (run_dir / "endings.jsonl").read_text().splitlines()]
    assert (ending["kind"], ending["retried"]) == ("gpu_oom", False), ending
    assert (
        "Tried to allocate 20.00 GiB. GPU 0 has a total capacity of 79.19 GiB"
        in (ending["evidence"])
    ), ending
    status = subprocess.run(
        [JZK, "status", str(run_dir), "--json"], cwd=tmp_path, capture_output=True, text=True
    )
    assert json.loads(status.stdout.splitlines()[0])["verdict"] == "gpu_oom", status.stdout
