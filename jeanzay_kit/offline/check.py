"""The network check before the queue: `jzk check` on a profile whose compute nodes have
no internet, and `jzk submit` there (nothing is submitted while an access is found)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from jeanzay_kit.config.spec import JobSpec
from jeanzay_kit.errors import JzkError
from jeanzay_kit.offline import network_rules as rules
from jeanzay_kit.offline.probe import probe, what_to_run

# The toolkit's check ends by itself; this only bounds a constructor that hangs.
CHECK_BUDGET_S = 900.0


def network_check(
    spec: JobSpec,
    overrides: Sequence[str],
    config_dir: str | None,
    allow: bool,
    budget_s: float,
) -> int:
    """Run the run's start without network; print every access; refuse (JzkError) when
    one is found unless allowed. Returns the child's exit code."""
    what = what_to_run(spec, overrides, config_dir)
    script = spec.job.runs_script
    found = probe(what, True, budget_s if script else CHECK_BUDGET_S, os.environ, Path.cwd())
    tried = f"the script `{spec.job.entry}`" if script else "the constructors and a first step"
    print(f"\nnetwork: {tried} tried here without network ({found.how})")
    if found.timed_out:
        print(f"  stopped after {budget_s:g} s (--budget): what ran until then was tried")
    print("\n".join(rules.report_lines(found.accesses, offline=True)))
    if found.accesses and not allow:
        raise JzkError(rules.refusal(found.accesses, spec.cluster.name))
    return 0 if found.timed_out else found.returncode
