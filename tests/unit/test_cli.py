"""jzk as a user runs it: exit codes, messages without tracebacks, files written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from jeanzay_kit.cli import main


def test_validate_prints_the_resolved_request(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "validate",
            "cluster=jeanzay_h100",
            "cluster.account=abc@h100",
            "resources.nodes=2",
            "resources.gpus_per_node=4",
            "resources.time=10:00:00",
            "train.global_batch_size=64",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "qos_gpu_h100-t3  (auto: shortest QoS that fits 10:00:00)" in out
    assert "gpu_p6  selected with -C h100" in out
    assert "world size 8 = 8 data-parallel x 1 pipeline" in out
    assert "OK: the request fits the profile." in out


def test_validate_error_exits_2_with_the_hint(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "validate",
            "cluster=jeanzay_h100",
            "cluster.account=abc@h100",
            "resources.gpus_per_node=8",
            "train.global_batch_size=64",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip() == (
        "jzk validate: error: resources.gpus_per_node=8 but jeanzay_h100 nodes have 4 GPUs. "
        "HINT: use resources.nodes=2 resources.gpus_per_node=4"
    )


def test_bad_override_syntax_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "resources.nodes"]) == 2
    assert "cannot apply the overrides" in capsys.readouterr().err


def test_render_writes_job_name_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["render", "-o", str(tmp_path / "out"), "job.name=my_run"])
    assert code == 0
    script = (tmp_path / "out" / "my_run.sbatch").read_text()
    assert "#SBATCH --job-name=my_run" in script
    assert "sbatch" in capsys.readouterr().err


def test_render_array(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "--array", "0-3", "cluster=slurm_local"]) == 0
    assert "#SBATCH --array=0-3" in capsys.readouterr().out


def test_clusters_lists_every_profile(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["clusters"]) == 0
    out = capsys.readouterr().out
    for name in (
        "local",
        "jeanzay_v100",
        "jeanzay_v100_8gpu",
        "jeanzay_a100",
        "jeanzay_h100",
        "slurm_local",
        "generic_slurm",
    ):
        assert f"\n{name}: " in f"\n{out}"
    assert "partition gpu_p6 (default): 4 GPUs, 96 CPUs per node, max 100:00:00, via -C h100" in out
    assert "qos qos_gpu_h100-t4: max 100:00:00, max 16 GPUs/job" in out
    assert (
        "partition low: 4 GPUs, 2 CPUs per node, max 01:00:00, via --partition, preemptible" in out
    )


@pytest.mark.parametrize("command", [[], ["validate"], ["render"], ["clusters"]])
def test_help(command: list[str]) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "jeanzay_kit.cli", *command, "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0
    assert "usage: jzk" in result.stdout


def test_installed_console_script_reports_errors_without_traceback() -> None:
    jzk = Path(sys.executable).parent / "jzk"
    if not jzk.exists():
        pytest.skip("jzk console script not installed (run scripts/setup.sh)")
    result = subprocess.run(
        [str(jzk), "validate", "cluster=jeanzay_v100", "train.precision=bf16"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "cluster.account=null is not set" in result.stderr
    assert "train.precision=bf16 but jeanzay_v100 GPUs have no bfloat16 support" in result.stderr


def test_status_of_a_local_run_reads_its_files(tmp_path: Path, capsys) -> None:
    import json
    import time

    run_dir = tmp_path / "run"
    (run_dir / "heartbeat").mkdir(parents=True)
    evaluated = {"step": 100, "loss": 0.3, "eval_loss": 0.5, "eval_accuracy": 0.875}
    last = {"step": 150, "loss": 0.25, "step_time_s": 0.1, "eta_s": 25.0, "data_wait_share": 0.12}
    (run_dir / "metrics.jsonl").write_text(json.dumps(evaluated) + "\n" + json.dumps(last) + "\n")
    beat = {
        "rank": 0,
        "host": "h",
        "pid": 1,
        "job_id": None,
        "step": 151,
        "total_steps": 400,
        "phase": "forward_backward",
        "progress_time": time.time() - 5,
        "wall_time": time.time() - 5,
        "token": "t",
        "interval_s": 2.0,
    }
    (run_dir / "heartbeat" / "rank-0.json").write_text(json.dumps(beat))
    (run_dir / "restarts.json").write_text(json.dumps({"restarts": [{"reason": "hang"}]}))
    assert main(["status", str(run_dir)]) == 0
    row = capsys.readouterr().out.splitlines()[1].split()
    # The newest evaluation (an earlier record than the last) and the last window's wait.
    assert row[:12] == [
        "local",
        "RUNNING",
        "-",
        "151/400",
        "0.2500",
        "0.5000",
        "accuracy=0.875",
        "12%",
        "25s",
        "5s",
        "ago",
        "1",
    ]


@pytest.mark.parametrize(
    ("argv0", "program"),
    [
        ("train.py", "train.py"),
        ("/home/me/jeanzay_kit/train.py", "train.py"),
        ("jzk train", "jzk train"),
        ("python -m jeanzay_kit.train_app", "jzk train"),
        ("/venv/lib/python3.11/site-packages/submitit/core/_submit.py", "jzk train"),
    ],
)
def test_training_messages_name_the_program_the_user_ran(argv0: str, program: str) -> None:
    from jeanzay_kit.report import training_program

    assert training_program(argv0) == program
