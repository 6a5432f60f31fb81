"""The network check before the queue: `jzk check` on a profile whose compute nodes have
no internet, and `jzk submit` there (nothing is submitted while an access is found)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from jeanzay_kit.config.spec import JobSpec
from jeanzay_kit.errors import JzkError
from jeanzay_kit.offline import network_rules as rules
from jeanzay_kit.offline.prefetch import here_env
from jeanzay_kit.offline.probe import probe, what_to_run
from jeanzay_kit.slurm.offline_env import OFFLINE_SWITCHES

# The toolkit's check ends by itself; this only bounds a constructor that hangs.
CHECK_BUDGET_S = 900.0


def network_check(
    spec: JobSpec,
    overrides: Sequence[str],
    config_dir: str | None,
    allow: bool,
    budget_s: float,
) -> int:
    """Run the run's start without network, as the job runs (its caches, the libraries'
    offline switches); when that fails or reaches out, once more without the switches to
    name every access. Refuse (JzkError) past one unless allowed; else the exit code."""
    what = what_to_run(spec, overrides, config_dir)
    script = spec.job.runs_script
    budget = budget_s if script else CHECK_BUDGET_S
    cached = here_env(spec)
    tried = f"the script `{spec.job.entry}`" if script else "the constructors and a first step"
    print(f"network: {tried}, here without network, as on the nodes (caches, offline switches)")
    job = probe(what, True, budget, {**cached, **OFFLINE_SWITCHES}, Path.cwd())
    if (job.returncode == 0 or job.timed_out) and not job.accesses:
        print(f"\nnetwork: no access ({job.how}): the run's start needs no internet")
        return 0
    print("\nnetwork: it fails or reaches out; once more without the offline switches, to name")
    print("what it reaches:")
    found = probe(what, True, budget, cached, Path.cwd())
    accesses = found.accesses or job.accesses
    if found.timed_out:
        print(f"  stopped after {budget_s:g} s (--budget): what ran until then was tried")
    print("\n".join(rules.report_lines(accesses, offline=True)))
    if accesses and not allow:
        raise JzkError(rules.refusal(accesses, spec.cluster.name))
    return 0 if accesses else job.returncode
