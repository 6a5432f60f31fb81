"""The runtime's settings (config/runtime_settings.py): declared once (the schema's
defaults), taken from the job under `jzk train|submit job.entry=...`, a keyword argument
of the script's session(...) winning over both."""

from __future__ import annotations

import inspect
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest
import torch
from torch import nn

from jeanzay_kit import Session, session
from jeanzay_kit.config import schema
from jeanzay_kit.config.compose import compose_config
from jeanzay_kit.config.runtime_settings import (
    KEYS,
    RuntimeSettings,
    changed,
    from_env,
    from_spec,
    resolve,
    to_env,
)
from jeanzay_kit.config.spec import build_job_spec
from jeanzay_kit.distributed.script_env import SETTINGS_ENV
from jeanzay_kit.errors import JzkError

SECTIONS = {
    "cluster": schema.ClusterConfig,
    "parallel": schema.ParallelConfig,
    "checkpoint": schema.CheckpointConfig,
    "watchdog": schema.WatchdogConfig,
    "preemption": schema.PreemptionConfig,
    "tune": schema.TuneConfig,
}


# Sessions install signal handlers (tests/conftest.py puts pytest's back).
pytestmark = pytest.mark.usefixtures("keep_signal_handlers")


@pytest.mark.parametrize("name", [f.name for f in fields(RuntimeSettings)])
def test_each_default_is_the_schemas(name: str) -> None:
    section, key = KEYS[name].split(".")
    expected = getattr(SECTIONS[section](), key)
    if name == "device":  # a session has no cluster profile: it looks at the machine
        expected = "auto"
    assert getattr(RuntimeSettings(), name) == expected


def test_every_setting_is_a_keyword_of_session_that_defaults_to_the_job() -> None:
    params = inspect.signature(Session).parameters
    for f in fields(RuntimeSettings):
        if f.name == "allow_config_change":  # s.checkpointer(..., allow_config_change=)
            param = inspect.signature(Session.checkpointer).parameters[f.name]
        else:
            param = params[f.name]
        assert param.kind is inspect.Parameter.KEYWORD_ONLY or f.name == "allow_config_change"
        assert param.default is None, f.name
    assert session is Session


def test_a_jobs_settings_travel_as_json_and_come_back_equal() -> None:
    spec = build_job_spec(
        compose_config(
            [
                "preemption.signal=USR2",
                "checkpoint.keep_last=1",
                "watchdog.stall_seconds=42",
                "parallel.timeout_minutes=3",
            ]
        )
    )
    job = from_spec(spec)
    assert (job.requeue_signal, job.keep_last, job.stall_seconds, job.timeout_minutes) == (
        "USR2",
        1,
        42.0,
        3.0,
    )
    assert from_env({SETTINGS_ENV: to_env(job)}) == job
    assert from_env({}) == RuntimeSettings()
    assert "preemption.signal=USR2" in changed(job) and "checkpoint.keep_last=1" in changed(job)


def test_what_the_script_gives_wins_over_the_job() -> None:
    job = RuntimeSettings(keep_last=1, stall_seconds=42.0)
    mine = resolve(job, {"keep_last": 5, "stall_seconds": None})
    assert (mine.keep_last, mine.stall_seconds) == (5, 42.0)


@pytest.mark.parametrize(
    "text, words",
    [("{not json", "not JSON"), ('{"keep_lats": 1}', "keep_lats"), ("[1]", "not an object")],
)
def test_a_settings_variable_the_toolkit_did_not_write_is_refused(text: str, words: str) -> None:
    with pytest.raises(JzkError, match=words):
        from_env({SETTINGS_ENV: text})


def _saves(run_dir: Path, env: dict[str, str], **options) -> list[str]:
    with session(steps=4, run_dir=run_dir, env=env, **options) as s:
        model = s.wrap(nn.Linear(2, 1))
        ckpt = s.checkpointer(model, torch.optim.SGD(model.parameters(), lr=0.1))
        ckpt.resume()
        for step in range(4):
            ckpt.save(step + 1)
    return sorted(p.name for p in (run_dir / "checkpoints").glob("step-*"))


def test_a_session_under_a_job_keeps_the_jobs_checkpoints_unless_told_otherwise(
    tmp_path: Path,
) -> None:
    env = {SETTINGS_ENV: to_env(RuntimeSettings(keep_last=1, stall_seconds=0.0))}
    assert _saves(tmp_path / "job", env) == ["step-4"]
    assert _saves(tmp_path / "mine", env, keep_last=2) == ["step-3", "step-4"]


SCRIPT = """
from jeanzay_kit import session
with session(steps=1) as s:
    print("SETTINGS", s.settings.requeue_signal, s.settings.keep_last, s.settings.stall_seconds)
"""


def test_the_script_task_hands_the_settings_to_the_scripts_session(tmp_path: Path) -> None:
    """The rendered scripts' way (node/script_task.py with --settings), without Slurm."""
    (tmp_path / "train.py").write_text(SCRIPT)
    job = RuntimeSettings(requeue_signal="USR2", keep_last=1, stall_seconds=7.0)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "jeanzay_kit.node.script_task",
            f"--run-dir={tmp_path / 'run'}",
            f"--settings={to_env(job)}",
            "--",
            sys.executable,
            "train.py",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(Path(__file__).parents[2])},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "SETTINGS USR2 1 7.0" in done.stdout, done.stdout
    first = next(line for line in done.stdout.splitlines() if line.startswith("jzk session"))
    assert "checkpoint.keep_last=1" in first and "preemption.signal=USR2" in first, first


@pytest.mark.parametrize(
    "given, named",
    [
        ({"keep_last": 0}, "keep_last=0"),
        ({"requeue_signal": "SIGUSR1"}, "requeue_signal=SIGUSR1 is not one of USR1, USR2, TERM"),
        ({"backend": "mpi"}, "backend=mpi"),
        ({"device": "gpu"}, "device=gpu"),
        ({"heartbeat_seconds": 0}, "heartbeat_seconds=0"),
        ({"stall_seconds": -1}, "stall_seconds=-1"),
        ({"timeout_minutes": "ten"}, "timeout_minutes=ten is not a number"),
        ({"requeue": "yes"}, "requeue=yes is not true or false"),
    ],
)
def test_a_bad_keyword_is_refused_in_one_line_naming_it(
    given: dict, named: str, tmp_path: Path, capsys
) -> None:
    with pytest.raises(SystemExit) as refused:
        session(run_dir=tmp_path, env={}, **given)
    assert refused.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("session: error:") and named in err and "HINT" in err, err
    assert len(err.strip().splitlines()) == 1


def test_every_problem_is_said_at_once(tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit):
        session(run_dir=tmp_path, env={}, keep_last=0, backend="mpi")
    err = capsys.readouterr().err
    assert "keep_last=0" in err and "backend=mpi" in err
