"""Your own Hydra app on the toolkit's launcher (issue 55): Hydra's submitit example
(plugins/hydra_submitit_launcher/example: `submitit.JobEnvironment()` logged by a
`@hydra.main` task function) grown into a small DDP training that saves and resumes its
checkpoint in Hydra's output directory, its config.yaml unchanged but for the launcher
line (`override hydra/launcher: submitit_slurm` -> `jeanzay`), on the local cluster:

- a point that cannot fit (8 GPUs a node on 4-GPU nodes) is refused before anything is
  queued, in the launcher's keys;
- a 2-point sweep on the preemptible partition runs the app's own function on every
  task (its lines in each task's log); one point is preempted by a `high` job and
  requeued by Slurm, the other gets submitit's time-limit signal (USR2) and requeues
  itself through submitit's checkpoint protocol; each function, called again, resumes
  from its own checkpoint mid-way; both end COMPLETED with the returned loss as
  result.json, and `jzk status` reads the sweep.

The app is written against Hydra, submitit and torch only. A second app runs its loop on
the toolkit's session (public `from jeanzay_kit import session`), on this launcher and on
hydra-submitit-launcher side by side: stopped by submitit's signal, each resumes to the
model of an uninterrupted run; `jzk cancel` ends one point of the sweep.
"""

from __future__ import annotations

import json
import re
import subprocess
import textwrap
import time
from pathlib import Path
from subprocess import PIPE, STDOUT

import pytest

from tests.slurm.cluster import JZK, PYTHON, manifest_records, run, sacct_states, sbatch, wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(420)]

CONFIG = textwrap.dedent(
    """
    defaults:
      - override hydra/launcher: submitit_slurm
    task: 1
    lr: 0.1
    epochs: 40
    epoch_seconds: 1.0
    """
)

APP = textwrap.dedent(
    """
    import logging
    import os
    import time
    from pathlib import Path

    import hydra
    import submitit
    import torch
    import torch.distributed as dist
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import DictConfig

    log = logging.getLogger(__name__)


    @hydra.main(version_base=None, config_path=".", config_name="config")
    def my_app(cfg: DictConfig) -> float:
        env = submitit.JobEnvironment()
        log.info(f"Process ID {os.getpid()} executing task {cfg.task}, with {env}")
        submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
        dist.init_process_group("gloo")
        out = Path(HydraConfig.get().runtime.output_dir)
        ckpt = out / "checkpoint.pt"
        torch.manual_seed(0)
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
        opt = torch.optim.SGD(model.parameters(), lr=cfg.lr)
        start, loss = 0, torch.tensor(float("nan"))
        if ckpt.exists():
            state = torch.load(ckpt)
            model.module.load_state_dict(state["model"])
            opt.load_state_dict(state["opt"])
            start, loss = state["epoch"] + 1, torch.tensor(state["loss"])
            log.info(f"rank {env.global_rank}: resumed from {ckpt} at epoch {start}")
        x = torch.randn(64, 4, generator=torch.Generator().manual_seed(env.global_rank))
        y = x.sum(1, keepdim=True)
        for epoch in range(start, cfg.epochs):
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(cfg.epoch_seconds)
            if env.global_rank == 0:
                state = {"model": model.module.state_dict(), "opt": opt.state_dict()}
                torch.save({**state, "epoch": epoch, "loss": loss.item()}, out / "checkpoint.tmp")
                os.replace(out / "checkpoint.tmp", ckpt)
                log.info(f"epoch {epoch} loss {loss.item():.4f} world {dist.get_world_size()}")
            dist.barrier()
        dist.destroy_process_group()
        return float(loss)


    if __name__ == "__main__":
        my_app()
    """
)


def _app(tmp_path: Path) -> Path:
    project = tmp_path / "my_app"
    project.mkdir()
    (project / "my_app.py").write_text(APP)
    # The one line that changes from hydra-submitit-launcher's example.
    (project / "config.yaml").write_text(CONFIG.replace("submitit_slurm", "jeanzay"))
    return project


def _sweep(project: Path, env: dict[str, str], sweep_dir: Path, *keys: str):
    argv = [PYTHON, "my_app.py", "-m", "hydra.launcher.cluster=slurm_local", *keys]
    return run([*argv, f"hydra.sweep.dir={sweep_dir}"], env, project, timeout=180)


def _wait_for_text(path: Path, text: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text():
            return
        time.sleep(0.5)
    pytest.fail(f"{text!r} not in {path} after {timeout} s")


def _not_preempted(records: list[dict]) -> dict:
    """The point the high job did not preempt: the other one's tasks are told SIGTERM
    (submitit's handler logs that it bypasses it)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        hit = [r for r in records if "Bypassing signal SIGTERM" in Path(r["log"]).read_text()]
        if hit:
            (other,) = [r for r in records if r is not hit[0]]
            return other
        time.sleep(0.2)
    pytest.fail("no point was preempted within 60 s")


def _wait_running(job_id: str, env: dict[str, str]) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        state = run(["squeue", "-h", "-j", job_id, "-o", "%T"], env).stdout.strip()
        if state in ("RUNNING", "COMPLETING", ""):
            return
        time.sleep(0.2)
    pytest.fail(f"job {job_id} did not start within 90 s")


def test_a_hydra_apps_sweep_runs_its_function_resumes_after_preemption(
    slurm, tmp_path: Path
) -> None:
    project = _app(tmp_path)
    too_big = tmp_path / "too_big"
    eight = ["hydra.launcher.tasks_per_node=8", "hydra.launcher.gpus_per_node=8"]
    refused = _sweep(project, slurm, too_big, *eight, "lr=1,2")
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert "nothing was submitted" in refused.stderr
    assert "hydra.launcher.gpus_per_node=8 but slurm_local nodes have 4 GPUs" in refused.stderr
    assert not (too_big / "manifest.jsonl").exists()
    assert run(["squeue", "-h", "-n", "my_app"], slurm).stdout.strip() == ""

    sweep_dir = tmp_path / "multirun"
    launched = _sweep(
        project,
        slurm,
        sweep_dir,
        "hydra.launcher.tasks_per_node=2",
        "hydra.launcher.cpus_per_task=1",
        "hydra.launcher.gpus_per_node=2",
        "hydra.launcher.partition=low",
        "hydra.launcher.timeout_min=10",
        "hydra.launcher.max_num_timeout=1",  # a time-limit requeue allowed (default 0)
        "lr=0.1,0.01",
    )
    assert launched.returncode == 0, launched.stderr[-3000:]
    assert "each task calling __main__.my_app" in launched.stdout
    records = manifest_records(sweep_dir)
    assert [r["overrides"] for r in records] == [["lr=0.1"], ["lr=0.01"]]
    for rec in records:
        _wait_for_text(Path(rec["log"]), "epoch 2 loss", timeout=120)

    # A job of the high partition on one node: Slurm preempts (requeues) the point there.
    high = tmp_path / "high.sbatch"
    high.write_text("#!/bin/bash\n#SBATCH -p high -N 1 -n 2 -o /dev/null\nsleep 3\n")
    high_id = sbatch(high, slurm, tmp_path)
    # Once the high job holds the preempted point's node, the other point gets
    # submitit's time-limit signal (what --signal=USR2@120 sends): its rank 0 checkpoints
    # (the same call) and requeues the job with scontrol. (Sooner, its freed node would
    # go to the high job, and the preempted point would finish in its grace time.)
    other = _not_preempted(records)
    _wait_running(high_id, slurm)
    signalled = run(["scancel", "--signal=USR2", other["job_id"]], slurm)
    assert signalled.returncode == 0, signalled.stderr
    wait_for(high_id, slurm, timeout=120)
    wait_for(records[0]["array_job_id"], slurm, timeout=240)

    preempted = []
    for rec in records:
        run_dir, log = Path(rec["run_dir"]), Path(rec["log"])
        out = log.read_text()
        states = sacct_states(rec["job_id"], slurm, duplicates=True)
        assert states[-1] == "COMPLETED", (states, out[-3000:])
        # The app's own lines, from its own function, on each of its two tasks.
        assert "executing task 1, with JobEnvironment(" in out
        rank1 = Path(rec["log"].replace("_0_log.out", "_1_log.out")).read_text()
        assert "global_rank=1(2)" in rank1
        assert "epoch 39 loss" in out and "world 2" in out
        # Hydra's output directory is the point's run directory, the same at each start.
        assert (run_dir / "checkpoint.pt").is_file() and (run_dir / ".hydra").is_dir()
        result = json.loads((run_dir / "result.json").read_text())
        last = re.findall(r"epoch 39 loss (\S+)", out)[-1]
        assert result["value"] == pytest.approx(float(last), abs=1e-4), result
        # Killed mid-way (preempted: SIGTERM, then SIGKILL after the partition's
        # GraceTime; or requeued at submitit's signal): the function called again goes
        # on from its last epoch, not from 0.
        resumed = re.findall(r"rank 0: resumed from .*checkpoint.pt at epoch (\d+)", out)
        assert resumed and 0 < int(resumed[-1]) < 40, (states, out[-3000:])
        if "PREEMPTED" in states:
            preempted.append(rec["num"])
        else:
            assert rec is other and "REQUEUED" in states, states
            assert "Caught signal SIGUSR2" in out, out[-3000:]
    assert len(preempted) == 1, preempted

    status = run([JZK, "status", str(sweep_dir)], slurm, project)
    assert status.returncode == 0, status.stderr
    assert status.stdout.count("COMPLETED") >= 2, status.stdout
    assert "GPU hours" in status.stdout, status.stdout  # sacct's, every start counted
    logs = run([JZK, "logs", str(sweep_dir)], slurm, project)
    assert logs.returncode == 0 and logs.stdout.count("executing task 1") >= 2, logs.stderr
    # One point, as the sweep lists it: its own log, and its two starts as a restart.
    point = run([JZK, "logs", records[0]["run_dir"]], slurm, project)
    assert point.returncode == 0 and "executing task 1" in point.stdout, point.stderr
    shown = run([JZK, "status", "--json", str(sweep_dir)], slurm, project).stdout
    rows = [json.loads(line) for line in shown.splitlines() if line.strip()]
    assert len(rows) == 2 and all(row["restarts"] >= 1 for row in rows), rows


# The same kind of app, its loop on the toolkit's session (docs/your-own-loop.md): the
# session's handler takes submitit's signal, stops at a step boundary, saves in the point's
# run directory, and the launcher hands the stop to submitit, which requeues the job.
SESSION_APP = textwrap.dedent(
    """
    import time

    import hydra
    import torch
    from omegaconf import DictConfig

    from jeanzay_kit import session


    @hydra.main(version_base=None, config_path=".", config_name="config")
    def my_app(cfg: DictConfig) -> float:
        with session(steps=cfg.steps) as s:
            torch.manual_seed(0)
            model = s.wrap(torch.nn.Linear(4, 1))
            opt = torch.optim.SGD(model.parameters(), lr=cfg.lr)
            ckpt = s.checkpointer(model, opt)
            step = ckpt.resume()
            print(f"starting at step {step}", flush=True)
            x = torch.randn(64, 4, generator=torch.Generator().manual_seed(1))
            y = x.sum(1, keepdim=True)
            while step < cfg.steps:
                loss = torch.nn.functional.mse_loss(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                time.sleep(cfg.step_seconds)
                if s.should_stop(step, loss=loss):
                    ckpt.save(step + 1)
                    s.requeue_and_exit()
                step += 1
                if step % 5 == 0 or step == cfg.steps:
                    ckpt.save(step)
                    s.log(step, loss=loss)
            digest = s.save_model(model)
            print(f"done: model digest {digest} loss {float(loss)!r}", flush=True)
            return float(loss)


    if __name__ == "__main__":
        my_app()
    """
)


def test_a_session_in_a_hydra_app_resumes_exactly_and_jzk_cancel_ends_a_point(
    slurm, tmp_path: Path
) -> None:
    project = tmp_path / "my_app"
    project.mkdir()
    (project / "my_app.py").write_text(SESSION_APP)
    config = "defaults:\n  - override hydra/launcher: jeanzay\nlr: 0.1\nsteps: 40\n"
    (project / "config.yaml").write_text(config + "step_seconds: 0.4\n")
    # The reference: the same app, run through on this machine (one process, the CPU).
    # A single run (not -m) keeps outputs/session of its working directory, so that
    # running it again resumes (its Hydra output folder is dated anew each time).
    ref_cwd = tmp_path / "ref"
    ref_cwd.mkdir()
    ref = run([PYTHON, str(project / "my_app.py"), "step_seconds=0"], slurm, ref_cwd)
    assert ref.returncode == 0, ref.stderr[-3000:]
    digest, loss = re.search(r"model digest (\S+) loss (\S+)", ref.stdout).groups()

    # Alongside, the same app kept on hydra-submitit-launcher (which waits for its jobs).
    hsl_dir = tmp_path / "hsl"
    hsl_argv = [PYTHON, "my_app.py", "-m", "hydra/launcher=submitit_slurm", "lr=0.1"]
    hsl_argv += ["hydra.launcher.partition=low", f"hydra.sweep.dir={hsl_dir}"]
    hsl = subprocess.Popen(hsl_argv, env=slurm, cwd=project, stdout=PIPE, stderr=STDOUT, text=True)
    sweep_dir = tmp_path / "multirun"
    keys = ["hydra.launcher.tasks_per_node=1", "hydra.launcher.gpus_per_node=1"]
    keys += ["hydra.launcher.partition=low", "hydra.launcher.max_num_timeout=1"]
    launched = _sweep(project, slurm, sweep_dir, *keys, "lr=0.1,0.5")
    assert launched.returncode == 0, launched.stderr[-3000:]
    first, second = manifest_records(sweep_dir)
    _wait_for_text(hsl_dir / "0" / "metrics.jsonl", '"step": 5', timeout=60)
    (hsl_job,) = [d.name for d in (hsl_dir / ".submitit").iterdir() if d.name.isdigit()]
    assert run(["scancel", "--signal=USR2", hsl_job], slurm).returncode == 0
    # The session writes in each point's run directory (not outputs/session of the cwd).
    for rec in (first, second):
        _wait_for_text(Path(rec["run_dir"]) / "metrics.jsonl", '"step": 5', timeout=120)
    signalled = run(["scancel", "--signal=USR2", first["job_id"]], slurm)
    assert signalled.returncode == 0, signalled.stderr
    cancelled = run([JZK, "cancel", second["run_dir"]], slurm, project)
    assert cancelled.returncode == 0 and "cancelled 1 job(s)" in cancelled.stdout, cancelled
    wait_for(first["array_job_id"], slurm, timeout=180)

    out = Path(first["log"]).read_text()
    states = sacct_states(first["job_id"], slurm, duplicates=True)
    assert states[-1] == "COMPLETED" and "REQUEUED" in states, (states, out[-3000:])
    resumed = [int(n) for n in re.findall(r"starting at step (\d+)", out)]
    assert resumed[0] == 0 and 5 < resumed[-1] < 40, (resumed, out[-3000:])
    assert f"model digest {digest}" in out, out[-3000:]  # as if never stopped
    result = json.loads((Path(first["run_dir"]) / "result.json").read_text())
    assert result["value"] == float(loss), result  # the function's return value
    assert sacct_states(second["job_id"], slurm)[-1] == "CANCELLED"

    # Under hydra-submitit-launcher: the session writes in the point's output directory
    # and requeues the job itself at submitit's signal.
    hsl_out, _ = hsl.communicate(timeout=180)
    assert hsl.returncode == 0, hsl_out[-3000:]
    log = (hsl_dir / ".submitit" / hsl_job / f"{hsl_job}_0_log.out").read_text()
    assert "REQUEUED" in sacct_states(hsl_job, slurm, duplicates=True), log[-3000:]
    assert len(re.findall(r"starting at step (\d+)", log)) == 2, log[-3000:]
    assert f"model digest {digest}" in log, log[-3000:]
    sessions = list(tmp_path.rglob("outputs/session"))
    assert sessions == [ref_cwd / "outputs" / "session"], "a point wrote outside its folder"
