"""A script task on 2 nodes of the local Slurm cluster, as Slurm's signals reach it.

- One signal: a script counting the SIGUSR1 it receives sees exactly one on every rank,
  whichever way `scancel --signal` delivers it: to the job step (what `--signal=USR1@T`
  does), to the batch shell only (`--batch`, as `--signal=B:USR1@T`), or to both
  (`--full`).
- A hung script is seen: after the signal one rank blocks in a collective and the other
  sits silent (a framework's handler stuck in a join). No task prints and no file changes
  for half of preemption.lead_seconds after the signal (watchdog.stall_seconds without
  one): each task's Python stacks are dumped into hang-<start>/, the step ends (exit 4)
  and the restart budget requeues the job, which resumes from the script's own
  checkpoint and completes.

The scripts are written as a user would, against torch and the environment only.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from tests.slurm.cluster import run, sacct_states, submit_script, wait_for, wait_for_line

pytestmark = pytest.mark.timeout(600)

COUNTING = textwrap.dedent(
    """
    import os, signal, sys, time

    seen = []
    signal.signal(signal.SIGUSR1, lambda signum, frame: seen.append(time.time()))
    rank = os.environ["RANK"]
    print(f"rank {rank} ready", flush=True)
    while not seen:
        time.sleep(0.05)
    time.sleep(6)  # a second copy (Slurm's, the batch shell's, a relay's) lands here
    out = os.path.join(os.environ["JZK_RUN_DIR"], f"count-{rank}")
    with open(out, "w") as f:
        f.write(str(len(seen)))
    print(f"rank {rank} saw {len(seen)}", flush=True)
    """
)


def _submit(project: Path, slurm: dict[str, str], name: str, *overrides: str):
    return submit_script(
        project, slurm, name, "resources.nodes=2", "resources.gpus_per_node=1", *overrides
    )


@pytest.mark.parametrize("how", [[], ["--batch"], ["--full"]], ids=["step", "batch", "full"])
def test_a_script_task_receives_the_signal_exactly_once(
    slurm, tmp_path: Path, how: list[str]
) -> None:
    project = tmp_path / "counting"
    project.mkdir()
    (project / "count_signals.py").write_text(COUNTING)
    name = "count" + "".join(h.strip("-") for h in how)
    job_id, run_dir, log = _submit(project, slurm, name, "job.entry=count_signals.py")
    wait_for_line(log, "rank 0 ready", job_id, slurm)
    wait_for_line(log, "rank 1 ready", job_id, slurm)
    signalled = run(["scancel", *how, "--signal=USR1", job_id], slurm)
    assert signalled.returncode == 0, signalled.stderr
    wait_for(job_id, slurm, timeout=120)
    err = log.with_suffix(".err").read_text()
    counts = {r: (run_dir / f"count-{r}").read_text() for r in (0, 1)}
    assert counts == {0: "1", 1: "1"}, (counts, log.read_text()[-2000:], err[-2000:])
    assert sacct_states(job_id, slurm) == ["COMPLETED"], err[-2000:]


HANGING = textwrap.dedent(
    """
    import argparse, os, signal, sys, time

    import torch
    import torch.distributed as dist

    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args()
    stop = []
    signal.signal(signal.SIGUSR1, lambda signum, frame: stop.append(signum))
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    path = os.path.join(os.environ["JZK_RUN_DIR"], "state.pt")
    step = torch.load(path, weights_only=True)["step"] if os.path.exists(path) else 0
    if rank == 0:
        print(f"starting at step {step}", flush=True)
    while step < args.steps:
        flag = torch.tensor([len(stop)])
        dist.all_reduce(flag)
        if flag.item():
            # A handler gone wrong: rank 0 waits for a thread that never ends, the
            # others in a barrier rank 0 never joins. Nothing printed, nothing written.
            if rank == 0:
                while True:
                    time.sleep(1)
            dist.barrier()
        step += 1
        if rank == 0:
            if step % 5 == 0:
                torch.save({"step": step}, path + ".tmp")
                os.replace(path + ".tmp", path)
            print(f"step {step}", flush=True)
        time.sleep(0.1)
    dist.destroy_process_group()
    if rank == 0:
        print("done", flush=True)
    """
)


def test_a_script_hung_in_a_collective_is_dumped_and_restarted(slurm, tmp_path: Path) -> None:
    project = tmp_path / "hanging"
    project.mkdir()
    (project / "hangs.py").write_text(HANGING)
    job_id, run_dir, log = _submit(
        project,
        slurm,
        "hangs",
        "job.entry=hangs.py",
        "job.args=[--steps,60]",
        # The default watchdog.stall_seconds (300): after the signal the script has half
        # of preemption.lead_seconds to save and end, 8 s here.
        "preemption.lead_seconds=16",
        "watchdog.heartbeat_seconds=1",
    )
    wait_for_line(log, "step 10", job_id, slurm)
    assert run(["scancel", "--signal=USR1", job_id], slurm).returncode == 0
    wait_for(job_id, slurm, timeout=300)
    out, err = log.read_text(), log.with_suffix(".err").read_text()
    assert "the script made no progress" in err and "8 s after the stop signal" in err, err[-3000:]
    assert "jzk: hang; requeued job" in err, err[-3000:]
    (hang,) = run_dir.glob("hang-*")
    stacks = {p.name: p.read_text() for p in hang.glob("rank-*.txt")}
    assert set(stacks) == {"rank-0.txt", "rank-1.txt"}, stacks
    assert "barrier" in stacks["rank-1.txt"] and "time.sleep" not in stacks["rank-1.txt"]
    assert "hangs.py" in stacks["rank-0.txt"], stacks["rank-0.txt"]
    # One restart spent, moved to the history once the script ran to its end: a run
    # of it again in place starts with its whole budget, as the toolkit's loop does.
    restarts = json.loads((run_dir / "restarts.json").read_text())
    assert restarts["restarts"] == [] and len(restarts["history"]) == 1, restarts
    assert "starting at step 0" in out and "done" in out, out[-2000:]
    resumed = [int(line.split()[-1]) for line in out.splitlines() if line.startswith("starting")]
    assert resumed[0] == 0 and resumed[1] >= 10, out[-2000:]
    assert sacct_states(job_id, slurm, duplicates=True)[-1] == "COMPLETED"


# A Hydra app as users write one (hydra-submitit-launcher's habit: the checkpoint in Hydra's
# output directory), on 2 tasks that meet through init_process_group; rank 0 saves.
HYDRA_APP = textwrap.dedent(
    """
    import os, time

    import hydra
    import torch
    import torch.distributed as dist
    from hydra.core.hydra_config import HydraConfig


    @hydra.main(version_base=None, config_path="conf", config_name="config")
    def main(cfg):
        dist.init_process_group("gloo")
        rank = dist.get_rank()
        ckpt = os.path.join(HydraConfig.get().runtime.output_dir, "ckpt.pt")
        first = torch.load(ckpt)["epoch"] + 1 if os.path.exists(ckpt) else 0
        if rank == 0:
            print(f"starting at epoch {first}", flush=True)
        for epoch in range(first, cfg.epochs):
            time.sleep(cfg.epoch_seconds)
            dist.barrier()
            if rank == 0:
                torch.save({"epoch": epoch}, ckpt + ".tmp")
                os.replace(ckpt + ".tmp", ckpt)
                print(f"epoch {epoch} saved", flush=True)
        dist.destroy_process_group()
        if rank == 0:
            print("done", flush=True)


    if __name__ == "__main__":
        main()
    """
)


def test_a_hydra_app_requeued_resumes_from_its_output_directory(slurm, tmp_path: Path) -> None:
    """It handles no signal: the time-limit warning kills it, the job is requeued and the
    app starts again with the same Hydra output directory (<run_dir>/cwd), where its
    checkpoint is (script/hydra_app_rules.py); its 2 tasks meet on the port task 0 chose
    (node/script_port.py)."""
    project = tmp_path / "hydra-app"
    (project / "conf").mkdir(parents=True)
    (project / "conf" / "config.yaml").write_text("epochs: 30\nepoch_seconds: 0.3\n")
    (project / "my_app.py").write_text(HYDRA_APP)
    job_id, run_dir, log = submit_script(
        project, slurm, "app", "resources.gpus_per_node=2", "job.entry=my_app.py"
    )
    wait_for_line(log, "epoch 3 saved", job_id, slurm)
    assert run(["scancel", "--signal=USR1", job_id], slurm).returncode == 0
    wait_for(job_id, slurm, timeout=300)
    out, err = log.read_text(), log.with_suffix(".err").read_text()
    starts = [int(line.split()[-1]) for line in out.splitlines() if line.startswith("starting")]
    assert len(starts) == 2 and starts[0] == 0 and starts[1] >= 4, (out[-2000:], err[-2000:])
    assert "done" in out and "requeued job" in err, err[-3000:]
    assert f"its output directory is {run_dir.resolve() / 'cwd'}" in out, out[-2000:]
    assert (run_dir / "cwd" / "ckpt.pt").is_file() and (run_dir / ".jzk-port").is_file()
    assert sacct_states(job_id, slurm, duplicates=True)[-1] == "COMPLETED"
