"""The node entry point refuses to train a Slurm profile outside a Slurm task."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jeanzay_kit.config.compose import compose_config
from jeanzay_kit.distributed.ranks import launched_by
from jeanzay_kit.node.entry import main, task_threads
from jeanzay_kit.rundir.run_directory import RunDir


def test_a_slurm_profile_outside_any_allocation_is_refused_naming_both_ways(
    tmp_path: Path, capsys
) -> None:
    cfg = compose_config(["cluster=slurm_local"])
    assert main(cfg, {}, RunDir(tmp_path)) == 2  # a login node's shell
    err = capsys.readouterr().err
    assert "neither a task of a Slurm job step nor inside an allocation" in err
    assert "jzk submit cluster=slurm_local" in err and "salloc -N2" in err
    assert not list(tmp_path.iterdir())  # nothing trained, nothing written


# (node count of the allocation, resources.nodes asked, nodes of the step or None: refused)
STEP_NODES = [(2, 1, 2), (2, 2, 2), (3, 2, 2), (1, 2, None)]


@pytest.mark.parametrize(("allocated", "asked", "step"), STEP_NODES)
def test_inside_an_allocation_the_step_takes_its_nodes(allocated, asked, step) -> None:
    from jeanzay_kit.config.spec import build_job_spec
    from jeanzay_kit.errors import JzkError
    from jeanzay_kit.node.allocation import allocation_nodes, step_config, step_environment

    env = {"SLURM_JOB_ID": "7", "SLURM_JOB_NUM_NODES": str(allocated)}
    assert allocation_nodes(env) == allocated and allocation_nodes({}) is None
    cfg = compose_config(
        ["cluster=slurm_local", f"resources.nodes={asked}", "resources.gpus_per_node=2"]
    )
    spec = build_job_spec(cfg)
    if step is None:
        with pytest.raises(JzkError, match=f"resources.nodes={asked} but this allocation"):
            step_config(cfg, spec, allocated, "7")
        return
    inside = build_job_spec(step_config(cfg, spec, allocated, "7"))
    assert inside.resources.nodes == step
    assert not inside.preemption.requeue  # an allocation is not Slurm's to requeue
    assert not inside.watchdog.health_gate  # nor shrunk by a step's gate
    shape = step_environment(env, inside)
    assert (shape["SLURM_NNODES"], shape["SLURM_NTASKS"]) == (str(step), str(2 * step))


def test_launched_tasks_are_told_apart_from_shells() -> None:
    assert launched_by({"SLURM_PROCID": "0", "SLURM_STEP_ID": "0"}) == "srun"
    assert launched_by({"SLURM_PROCID": "0", "SLURM_STEPID": "0"}) == "srun"
    assert launched_by({"RANK": "0", "LOCAL_RANK": "0", "SLURM_PROCID": "0"}) == "torchrun"
    assert launched_by({"TORCHELASTIC_RUN_ID": "x"}) == "torchrun"
    assert launched_by({"SLURM_JOB_ID": "5", "SLURM_PROCID": "0"}) is None  # batch script
    assert launched_by({}) is None


def test_signals_after_training_are_ignored_until_the_process_exits(tmp_path: Path) -> None:
    """A time-limit signal after the last step must not kill a finished task."""
    import signal

    from jeanzay_kit.ending.preemption import StopRequest

    previous = {s: signal.getsignal(s) for s in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM)}
    stop = StopRequest()
    try:
        cfg = compose_config(["resources.gpus_per_node=1", "train.steps=2", "train.eval_every=0"])
        env = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1"}
        env |= {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(29500 + os.getpid() % 1000)}
        assert main(cfg, env, RunDir(tmp_path), stop=stop) == 0
        assert (tmp_path / "model_final.sha256").exists()
        # Ignored, not merely handled: CPython resets Python handlers to the default
        # action (which kills) while it shuts down; SIG_IGN survives that.
        for sig in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM):
            assert signal.getsignal(sig) == signal.SIG_IGN
        os.kill(os.getpid(), signal.SIGUSR1)  # would end pytest with the default action
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@pytest.mark.parametrize(
    "env, cpus, threads",
    [
        ({"OMP_NUM_THREADS": "6"}, 8, 0),  # our script's share (or torchrun's 1): torch reads it
        # A job that exports nothing (hydra-submitit-launcher): Slurm's CPUs for the task,
        # not every core it may run on (nodes without CPU binding let it run on all).
        ({"SLURM_CPUS_PER_TASK": "1"}, 2, 1),
        ({}, 3, 3),
    ],
)
def test_a_tasks_torch_threads_follow_the_cpus_it_was_given(env, cpus, threads) -> None:
    assert task_threads(env, cpus) == threads


def test_cpu_workers_are_forked_from_a_server_and_gpu_workers_spawned() -> None:
    """A process that has asked the CUDA driver anything cannot fork a CUDA worker:
    only runs that use no GPU take the fork server (node/local.py worker_context)."""
    from multiprocessing.context import ForkServerContext, SpawnContext

    from jeanzay_kit.node.local import worker_context

    assert isinstance(worker_context(cpu_only=True), ForkServerContext)
    assert isinstance(worker_context(cpu_only=False), SpawnContext)


def _torchrun(rank: int) -> dict[str, str]:
    return {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2",
            "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1"}  # fmt: skip


@pytest.mark.parametrize(
    ("version", "env", "said"),
    [
        ("2.14.1", {}, True),  # a local start: the process the user started
        ("2.14.1", _torchrun(0), True),
        ("2.14.1", _torchrun(1), False),  # once per start, not once per rank
        ("2.13.0+cpu", {}, False),
        ("2.9.0", _torchrun(0), False),
    ],
)
def test_a_torch_newer_than_the_range_is_one_line_once_per_start(
    version: str, env: dict[str, str], said: bool, monkeypatch, capsys
) -> None:
    from importlib import metadata
    from types import SimpleNamespace

    from jeanzay_kit.node import entry

    dist = SimpleNamespace(version=version, locate_file=lambda _: "/site")
    monkeypatch.setattr(metadata, "distribution", lambda _name: dist)
    entry._warn_once.cache_clear()
    entry.check_torch(env)
    entry.check_torch(env)  # a sweep's second point in the same process
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == (1 if said else 0), lines
    if said:
        assert f"warning: torch {version} is installed, outside the range" in lines[0]


def test_an_older_torch_is_still_refused(monkeypatch) -> None:
    from importlib import metadata
    from types import SimpleNamespace

    from jeanzay_kit.errors import JzkError
    from jeanzay_kit.node import entry

    dist = SimpleNamespace(version="2.8.0", locate_file=lambda _: "/site")
    monkeypatch.setattr(metadata, "distribution", lambda _name: dist)
    with pytest.raises(JzkError, match="needs torch >= 2.9"):
        entry.check_torch({})


# A signal sent to the launcher just as it starts its workers (the fork server, or each
# spawned worker), then what each worker was started with.
_SIGNAL_AS_WORKERS_START = """
import multiprocessing, os, signal, sys
from multiprocessing import forkserver, popen_spawn_posix

from jeanzay_kit.ending.preemption import StopRequest
from jeanzay_kit.node import local


def started_blocked() -> None:
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    sys.exit(0 if set(local.FORWARDED) <= blocked else 1)  # each of them, SIGTERM too


def warned_then(start):
    def starting(*args):
        os.kill(os.getpid(), signal.SIGUSR1)  # Slurm's time-limit warning, now
        return start(*args)
    return starting


if __name__ == "__main__":
    stop = StopRequest()
    context = multiprocessing.get_context(sys.argv[1])
    procs = [context.Process(target=started_blocked) for _ in range(2)]
    if sys.argv[1] == "forkserver":
        forkserver.ensure_running = warned_then(forkserver.ensure_running)
    else:
        popen_spawn_posix.Popen._launch = warned_then(popen_spawn_posix.Popen._launch)
    local._start(procs, context)
    for proc in procs:
        proc.join()
    print(stop.signum, [proc.exitcode for proc in procs])
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("method", ["forkserver", "spawn"])
def test_a_signal_while_the_launcher_starts_its_workers_is_kept(tmp_path: Path, method) -> None:
    """The launcher's own handler sees a signal that came while it started the workers
    (it was dropped: the launcher ignored them meanwhile, so that the workers inherit
    that), and the workers start with every stop signal blocked, one sent before they
    listen waits (multiprocessing's resource tracker, started by the first start,
    unblocks SIGINT and SIGTERM where it starts)."""
    import signal
    import subprocess
    import sys

    script = tmp_path / "start.py"
    script.write_text(_SIGNAL_AS_WORKERS_START)
    done = subprocess.run(
        [sys.executable, str(script), method], capture_output=True, text=True, timeout=100
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split(None, 1) == [str(int(signal.SIGUSR1)), "[0, 0]\n"]
