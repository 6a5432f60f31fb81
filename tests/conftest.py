"""Shared fixtures: a throwaway slurm.conf so client commands answer without a cluster."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# The tests that run together on one pytest-xdist worker, first (pyproject.toml's
# `-n 2`): the Slurm tests share one local cluster (tests/slurm/conftest.py, started once;
# test_zz_cluster_restart last) and, with test_tuning, the venv of Hydra's Optuna sweeper
# (built once). They wait on Slurm's clock for about half their time (a requeued job waits
# out the credential lifetime, a lost node SlurmdTimeout, a preempted job GraceTime): the
# other worker trains meanwhile.
TOGETHER_FIRST = ("tests/slurm/", "tests/distributed/test_tuning.py")


def schedule_unit(nodeid: str) -> str:
    """What one worker runs as a whole: the tests above, else a module (its
    module-scoped fixtures, such as a reference run, are computed once)."""
    if nodeid.startswith(TOGETHER_FIRST):
        return "together-first"
    return nodeid.split("::")[0]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: schedule_unit(item.nodeid) != "together-first")  # stable


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """Units of schedule_unit, in collection order. Not xdist's `--dist loadgroup`:
    on pytest 9.2 its groups are silently ignored (it renames node ids, which pytest
    now derives from structured ids: pytest-dev/pytest-xdist#1386)."""
    from xdist.scheduler import LoadScopeScheduling

    class SuiteScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return schedule_unit(nodeid)

    config.option.loadscopereorder = False  # keep the order: the slow unit first
    return SuiteScheduling(config, log)


@pytest.fixture(scope="session")
def scontrol_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Environment for `scontrol show hostnames|hostlist`.

    Those two subcommands compute locally, but scontrol refuses to start without a
    configuration source, so point SLURM_CONF at a minimal slurm.conf.
    """
    if shutil.which("scontrol") is None:
        pytest.skip(
            "scontrol not found: install Debian's slurm-client (scripts/setup.sh does, as root)"
        )
    conf_dir = tmp_path_factory.mktemp("slurmconf")
    conf = conf_dir / "slurm.conf"
    conf.write_text(
        "ClusterName=jzk-test\nSlurmctldHost=localhost\n"
        "NodeName=n1 CPUs=1 State=UNKNOWN\nPartitionName=debug Nodes=n1 Default=YES\n"
    )
    env = dict(os.environ)
    env["SLURM_CONF"] = str(conf)
    return env


@pytest.fixture
def keep_signal_handlers():
    """A session (or a StopRequest) notes SIGUSR1/USR2/TERM, then ignores them once it
    ends: put pytest's handlers back after the test."""
    import signal

    sigs = (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM)
    saved = {sig: signal.getsignal(sig) for sig in sigs}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


# Hydra's Optuna sweeper pins optuna<3 (hydra-optuna-sweeper 1.3.0), while `jzk tune` needs
# Optuna's JournalStorage (3.1+): a user keeps it in an environment of its own. Here: a
# venv on top of the test environment (its packages through a .pth), with only the
# sweeper and its Optuna installed in it.
HYDRA_OPTUNA = "hydra-optuna-sweeper==1.3.0"


@pytest.fixture(scope="session")
def optuna_sweeper_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The interpreter of a venv where hydra/sweeper=optuna works with jeanzay_kit."""
    from tests.layered_venv import layered_venv

    return layered_venv(tmp_path_factory.mktemp("hydra-optuna") / "venv", [HYDRA_OPTUNA])
