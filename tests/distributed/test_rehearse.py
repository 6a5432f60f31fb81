"""`jzk rehearse` on this machine (issue 70): the toolkit's loop on 2 CPU workers under a
seeded schedule of seven faults, one of each kind (the time-limit warning, a worker
killed, a worker stopped, the warning during start-up, a NaN loss, a worker killed while a
checkpoint is written, the checkpoints' filesystem full: a real small tmpfs as
checkpoint.dir, filled), injected for real. Every fault survived within the checkpoint
interval (none lost on a stop signal), the final model bitwise the run without faults',
faults.json the seed's schedule, rehearsal.json the report. A session loop of a user's
project beside it (a Hydra app with a session loop), on its usual disk: no filesystem
filled there, said in one line."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from jeanzay_kit.rehearse.report_rules import NO_SAVE_ON_STOP
from jeanzay_kit.rehearse.schedule import FILL_LIMIT, KINDS, STORAGE_FULL, from_json, schedule
from tests.bench.test_run import RUN, load_run_module
from tests.mounts import tmpfs

JZK = str(Path(sys.executable).with_name("jzk"))


def _report(done: subprocess.CompletedProcess[str]) -> dict:
    """`jzk rehearse --json`'s report (its last line), or the failure with what it said."""
    last = done.stdout.splitlines()[-1:] or [""]
    assert last[0].startswith("{"), (done.returncode, done.stdout[-3000:] + done.stderr[-3000:])
    return json.loads(last[0])


@pytest.mark.timeout(600)
def test_a_rehearsal_survives_its_schedule_and_ends_with_the_reference_model(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "rehearsal"
    # Faults every 0.25 to 0.75 s of training: at most ~1050 steps of 5 ms (a fast
    # machine; 15 ms here) before the last one, so 1200 steps are enough (the suite's time).
    argv = [JZK, "rehearse", "train.steps=1200", "checkpoint.every_steps=50"]
    argv += ["watchdog.stall_seconds=5", "watchdog.heartbeat_seconds=0.5"]
    with tmpfs(tmp_path / "small", "size=64m") as small:
        argv += [f"checkpoint.dir={small}/checkpoints", "--faults", "7", "--every", "0.5"]
        done = subprocess.run(
            [*argv, "--seed", "3", "--dir", str(folder), "--json"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=560,
        )
        assert not list(small.rglob(".jzk-rehearsal-fill")), "the filler was left behind"
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    found = _report(done)
    assert found == json.loads((folder / "run" / "rehearsal.json").read_text())
    plan = from_json(json.loads((folder / "run" / "faults.json").read_text()))
    assert plan == schedule(7, 0.5, 3, ranks=2) and sorted(f.kind for f in plan) == sorted(KINDS)
    assert [f["kind"] for f in found["faults"]] == [f.kind for f in plan]
    for fault in found["faults"]:
        assert fault["verdict"] == "ok", found
        assert fault["detected_s"] is not None and fault["resumed_s"] is not None, fault
        if fault["kind"] in ("preempt", "startup"):
            assert fault["lost_steps"] == 0, fault
        if fault["kind"] == "hang":
            assert fault["detected_s"] < 5 + 2 * 0.5 + 5, fault  # stall + two beats + slack
        if fault["kind"] == STORAGE_FULL:  # the save that met it said so, in one line
            assert "could not be written" in fault["by"] and "No space left" in fault["by"]
    assert found["digest_equal"] is True and 0 < found["goodput"] < 1, found
    assert "final model equal to the run without faults: True" in done.stdout
    # Each fault said as it ended, while the rehearsal went on.
    said = [line for line in done.stdout.splitlines() if line.startswith("rehearse: #")]
    assert [line.split()[1:3] for line in said] == [[f"#{f.number}", f.kind] for f in plan], said
    assert said[-1].split()[3] == "(7/7)" and "went on from step" in said[-1], said
    # On CPU the digest is what must hold; the final loss, read from both runs' logs,
    # agrees as well (it decides on GPUs).
    assert found["bitwise"] is True and found["loss_close"] is True, found

    # bench/bench_rehearse.py's figures, read from this rehearsal (no second schedule).
    bench = [sys.executable, str(RUN.parent / "bench_rehearse.py"), "--from", str(folder)]
    done = subprocess.run(bench, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    result = json.loads((RUN.parent / "results" / "rehearse.json").read_text())
    figures = {f.key: f.value for f in load_run_module().rehearse_figures(result)}
    assert figures["rehearsal_goodput"] == found["goodput"]
    assert len(figures) == 1 + len(KINDS) and all(v > 0 for v in figures.values()), figures

    # `jzk report` of the rehearsal's run: its table, and the loss drawn with the faults.
    drawn = subprocess.run(
        [JZK, "report", str(folder / "run")], capture_output=True, text=True, timeout=120
    )
    assert drawn.returncode == 0, drawn.stderr
    assert "rehearsal (jzk rehearse):" in drawn.stdout and "final model equal" in drawn.stdout
    assert (folder / "run" / "report" / "rehearsal.png").stat().st_size > 10_000


# A user's Hydra app around the loop of docs/examples/own_loop/train_session.py (the
# session API, docs/your-own-loop.md part b), written against Hydra's public API only.
HYDRA_APP = """import hydra
from omegaconf import DictConfig

from jeanzay_kit import session
from train_session import train


@hydra.main(version_base=None, config_path=".", config_name="config")
def main(cfg: DictConfig) -> None:
    with session(steps=cfg.steps) as s:
        train(cfg, s)


if __name__ == "__main__":
    main()
"""


@pytest.mark.timeout(400)
def test_a_users_hydra_app_with_a_session_loop_is_rehearsed_too(tmp_path: Path) -> None:
    """A Hydra app of a user's project (its config.yaml, overrides in job.args) run by
    `jzk rehearse job.entry=app.py`: its own steps and checkpoint interval read off the
    run without faults, a crash or a hang run again as its user would, nothing lost; on
    its usual disk no filesystem is filled."""
    project = tmp_path / "own project"
    project.mkdir()
    example = RUN.parents[1] / "docs" / "examples" / "own_loop" / "train_session.py"
    (project / "train_session.py").write_text(example.read_text())
    (project / "app.py").write_text(HYDRA_APP)
    (project / "config.yaml").write_text("steps: 60\nsave_every: 10\nstep_seconds: 0.0\n")
    # Faults every 0.25 to 0.75 s of training: 800 steps fit them up to 300 steps/s
    # (137 here, alone); each start, not each step, is what costs (the suite's time).
    argv = [JZK, "rehearse", "job.entry=app.py", "job.args=[steps=800]"]
    # 10 s, not 5: a loaded machine starved its run without faults for 5 s (exit 4).
    argv += ["watchdog.stall_seconds=10", "watchdog.heartbeat_seconds=0.5"]
    argv += ["--faults", "4", "--every", "0.5", "--seed", "2", "--dir", "rehearsal", "--json"]
    done = subprocess.run(argv, cwd=project, capture_output=True, text=True, timeout=380)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    if shutil.disk_usage(project).total > FILL_LIMIT:  # a disk of its usual size: not filled
        assert f"rehearse: {STORAGE_FULL} left out: the checkpoints' filesystem" in done.stdout
    found = _report(done)
    assert sorted(f["kind"] for f in found["faults"]) == sorted(KINDS[:4])
    for fault in found["faults"]:
        assert fault["verdict"] == "ok" and fault["resumed_s"] is not None, found
        assert fault["lost_steps"] <= 10, fault  # the app's own save_every
    assert found["digest_equal"] is True, found
    # Its interval is its own: the advice never names the config's checkpoint.every_steps.
    assert not any("checkpoint.every_steps" in line for line in found["advice"]), found
    # Hydra's output folder of each start is in the run directory, not in the project.
    assert not (project / "outputs").exists(), sorted(p.name for p in project.iterdir())


# A nanoGPT-style script of a user's own: its own checkpoint in out/, no toolkit import.
# Rank 0 alone saves (nanoGPT's master_process), aside then renamed: the job starts two
# processes, and a rank loading the file while its peer wrote it failed the run (CI, exit 1).
PLAIN_SCRIPT = """\
import os, time, torch
os.makedirs("out", exist_ok=True)
start = torch.load("out/ckpt.pt", weights_only=True)["iter"] if os.path.exists("out/ckpt.pt") else 0
w = torch.zeros(4)
for it in range(start, 30):
    w += 1
    print(f"iter {it}", flush=True)
    if it % 10 == 0 and os.environ.get("RANK", "0") == "0":
        torch.save({"iter": it, "w": w}, "out/ckpt.tmp")
        os.replace("out/ckpt.tmp", "out/ckpt.pt")
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("first_line", "runs_first"),
    [
        ("import os, time, torch", False),  # no module of the toolkit's: said at once
        ("import jeanzay_kit  # its version, no session", True),  # said once its run shows
    ],
)
def test_a_plain_script_is_refused_in_one_line_with_the_way_that_works(
    tmp_path: Path, first_line: str, runs_first: bool
) -> None:
    """Not rehearsed yet (docs/rehearse.md): said in one line with the way that works,
    never a traceback (it was FileNotFoundError on model_final.sha256); before anything
    runs when none of the script's own modules names the toolkit (it was said only after
    the run without faults, as long as the job), else once that run has shown it."""
    (tmp_path / "train.py").write_text(PLAIN_SCRIPT.replace("import os, time, torch", first_line))
    if runs_first:
        (tmp_path / "train.py").write_text(
            "import os, time, torch\n" + (tmp_path / "train.py").read_text()
        )
    done = subprocess.run(
        [JZK, "rehearse", "job.entry=train.py", "--faults", "2", "--every", "1", "--dir", "r"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    said = done.stderr.strip().splitlines()
    assert len(said) == 1 and said[0].startswith("jzk rehearse: error: "), done.stderr
    assert "session" in said[0] and "HINT: " in said[0] and "Traceback" not in done.stderr
    assert (tmp_path / "r" / "reference").exists() is runs_first, done.stdout


@pytest.mark.timeout(200)
def test_a_loop_that_does_not_save_on_the_stop_signal_is_told_so(tmp_path: Path) -> None:
    """The documented session loop with its save on `should_stop` left out, and a save
    every 50 steps it logs only then: the time-limit warning meets it between two saves
    (the schedule follows its heartbeats, not only what it logs), the steps since its
    last save are lost, and the advice names the missing save."""
    example = RUN.parents[1] / "docs" / "examples" / "own_loop" / "train_session.py"
    saving = "                ckpt.save(step + 1)\n                s.requeue_and_exit()\n"
    assert saving in example.read_text()
    source = example.read_text().replace(saving, "                s.requeue_and_exit()\n")
    (tmp_path / "train_session.py").write_text(source)
    # 5 ms of pretend work a step: the loop's own 3 ms would let the fault's 1.34 s of
    # training take more steps than the run has on an idle machine (then refused). 800
    # steps: the fault comes after about 100 to 200 of them. With 400, CI once ended the
    # rehearsal without its report (stderr not kept), as a rehearsal stopped (SIGSTOP)
    # for 8 s after the run's first log does: the run completes before it is seen past
    # the fault's step (report_rules.ended_before_fault says so).
    args = "job.args=[--steps,800,--save-every,50,--step-seconds,0.005]"
    argv = [JZK, "rehearse", "job.entry=train_session.py", args]
    # 10 s, not 5: a loaded machine starved its run for 5 s, named hung (exit 4).
    argv += ["watchdog.stall_seconds=10", "watchdog.heartbeat_seconds=0.5"]
    argv += ["--faults", "1", "--every", "1", "--seed", "0", "--dir", "rehearsal", "--json"]
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=180)
    found = _report(done)
    (fault,) = found["faults"]
    assert done.returncode == 1 and fault["kind"] == "preempt", (fault, done.stdout[-1500:])
    assert 0 < fault["lost_steps"] <= 50 and fault["verdict"].startswith("lost "), fault
    assert NO_SAVE_ON_STOP in found["advice"], found["advice"]


def test_a_rehearsal_interrupted_stops_its_run(tmp_path: Path) -> None:
    """`timeout 300 jzk rehearse` (a SIGTERM) left the run it was watching training on,
    with its ranks: a rehearsal that ends before its run ends the run too."""
    import os
    import signal
    import time

    folder = tmp_path / "rehearsal"
    argv = [JZK, "rehearse", "train.steps=100000", "--faults", "1", "--every", "1"]
    with subprocess.Popen(
        [*argv, "--seed", "1", "--dir", str(folder)],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as rehearsal:
        metrics = folder / "reference" / "metrics.jsonl"
        deadline = time.monotonic() + 120
        while not metrics.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert metrics.exists(), rehearsal.stderr
        rehearsal.send_signal(signal.SIGTERM)
        out, err = rehearsal.communicate(timeout=60)
    assert rehearsal.returncode == 128 + signal.SIGTERM, out + err
    assert "interrupted: its run is stopped too" in err, err
    left = [
        pid
        for pid in os.listdir("/proc")
        if pid.isdigit() and str(folder).encode() in _cmdline(pid)
    ]
    assert not left, left


def _cmdline(pid: str) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""
