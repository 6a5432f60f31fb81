"""The trackers' rules: what is sent once, what a resume keeps, what is never imported."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from jeanzay_kit.config.collector import Collector
from jeanzay_kit.config.run_rules import check_metrics
from jeanzay_kit.rundir.run_directory import RunDir
from jeanzay_kit.runtime.trackers import (
    TrackerOptions,
    Trackers,
    flat_params,
    scalars,
    sync_command,
)


class Recorder:
    def __init__(self, fail_at: int = 0) -> None:
        self.sent: list[tuple[int, dict[str, float]]] = []
        self.fail_at = fail_at
        self.closed = False

    def log(self, values: dict[str, float], step: int) -> None:
        if step == self.fail_at:
            raise RuntimeError("service gone")
        self.sent.append((step, values))

    def close(self) -> None:
        self.closed = True


def trackers_with(run_dir: Path, fake: Recorder, step: int = 0) -> Trackers:
    """Trackers whose W&B is a recorder that last received `step` (none started)."""
    (run_dir / "trackers.json").write_text(json.dumps({"wandb": {"id": "abc", "step": step}}))
    trackers = Trackers(RunDir(run_dir), TrackerOptions(), {}, [])
    trackers.open["wandb"] = fake
    return trackers


def test_a_resumed_attempt_sends_only_steps_the_tracker_has_not_received(tmp_path: Path) -> None:
    fake = Recorder()
    trackers = trackers_with(tmp_path, fake, step=14)  # checkpoint at 10, sent up to 14
    for step in (12, 14, 16, 18):
        trackers.log({"step": step, "loss": step / 100, "eta_s": None, "note": "x"})
    assert [s for s, _ in fake.sent] == [16, 18]
    assert fake.sent[0][1] == {"loss": 0.16}  # numbers only, the step is the axis
    assert json.loads((tmp_path / "trackers.json").read_text())["wandb"] == {
        "id": "abc",
        "step": 18,
    }
    trackers.close()
    assert fake.closed


def test_an_older_runs_float_steps_are_sent_as_steps(tmp_path: Path) -> None:
    # metrics.jsonl of a session loop logged before s.log kept its step whole, replayed
    # to the tracker on a resume.
    fake = Recorder()
    trackers = trackers_with(tmp_path, fake, step=10)
    for step in (10.0, 20.0, 25.5):
        trackers.log({"step": step, "loss": 0.5})
    assert [s for s, _ in fake.sent] == [20]
    trackers.close()


def test_a_failing_tracker_is_dropped_and_training_goes_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = Recorder(fail_at=4)
    trackers = trackers_with(tmp_path, fake)
    for step in (2, 4, 6):
        trackers.log({"step": step, "loss": 1.0})
    assert [s for s, _ in fake.sent] == [2]
    assert "metrics.wandb: logging failed (RuntimeError: service gone)" in capsys.readouterr().err
    assert json.loads((tmp_path / "trackers.json").read_text())["wandb"]["step"] == 2


def test_pure_rules() -> None:
    assert flat_params({"optim": {"lr": 1e-3, "betas": [0.9, 0.95]}, "x": None}) == {
        "optim.lr": 1e-3,
        "optim.betas": "[0.9, 0.95]",
        "x": None,
    }
    assert scalars({"step": 3, "loss": 0.5, "ok": True, "eta_s": float("nan"), "n": 2}) == {
        "loss": 0.5,
        "n": 2.0,
    }
    run_dir = Path("/nonexistent/run")
    assert sync_command(RunDir(run_dir), "abc", "proj", "team") == [
        "wandb", "sync", "--id", "abc", "--project", "proj", "--entity", "team"
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ({"wandb_mode": "cloud"}, "metrics.wandb_mode"),
        ({"mlflow": "yes"}, "metrics.mlflow"),
        ({"wandb_project": ""}, "metrics.wandb_project"),
        ({"mlflow_uri": "a\nb"}, "metrics.mlflow_uri"),
    ],
)
def test_bad_tracker_settings_are_refused_by_key(override: dict[str, object], key: str) -> None:
    met = {"tensorboard": False, "wandb": True, "wandb_mode": "offline", "mlflow": False}
    c = Collector()
    assert check_metrics(c, {**met, **override}) is None
    assert [p.key for p in c.problems] == [key]


def test_neither_package_is_imported_when_the_trackers_are_off(tmp_path: Path) -> None:
    code = (
        "import sys; from pathlib import Path\n"
        "from jeanzay_kit.runtime.metrics import MetricsWriter\n"
        "from jeanzay_kit.runtime.trackers import TrackerOptions\n"
        "from jeanzay_kit.rundir.run_directory import RunDir\n"
        f"w = MetricsWriter(RunDir(Path({str(tmp_path)!r})), True, 4, trackers=TrackerOptions())\n"
        "w.log({'step': 1, 'loss': 1.0, 'step_time_s': 0.1}); w.close()\n"
        "assert not {'wandb', 'mlflow'} & set(sys.modules), 'imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_validate_says_where_each_tracker_writes_and_what_is_missing() -> None:
    from jeanzay_kit.cli.validate import tracker_lines
    from jeanzay_kit.config.compose import compose_config
    from jeanzay_kit.config.spec import build_job_spec

    overrides = ["metrics.wandb=true", "metrics.mlflow=true", "metrics.wandb_project=llm"]
    spec = build_job_spec(compose_config(overrides))
    lines = tracker_lines(spec, lambda name: name == "mlflow")
    assert lines[0].startswith("tracker: W&B project llm, offline (<run_dir>/wandb")
    assert lines[1] == "tracker: MLflow <run_dir>/mlruns (file store)"
    assert lines[2].startswith("WARNING: metrics.wandb=true but wandb is not installed here")
    assert len(lines) == 3
    assert tracker_lines(build_job_spec(compose_config([])), lambda _: False) == []
