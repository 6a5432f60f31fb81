"""What `job.entry` names: the toolkit's own loop, or the user's command (a script task).
Pure. The config decides it (validation, the run's identity); the task side
(distributed/script_env.py, node/script_task.py) runs what it decided.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping

TOOLKIT_ENTRY = "-m jeanzay_kit.train_app"
ENTRY_KINDS = ("auto", "toolkit", "script")


def runs_script(entry: str, kind: str) -> bool:
    """True when job.entry is the user's own command rather than the toolkit's loop.
    kind (job.entry_kind): `toolkit` for a Hydra application of yours that calls the
    toolkit, `script` for a command that happens to look like the toolkit's."""
    if kind == "script":
        return True
    if kind == "toolkit":
        return False
    return shlex.split(entry) != shlex.split(TOOLKIT_ENTRY)


def script_entry(config: Mapping[str, object]) -> str | None:
    """job.entry of a frozen config when it is the user's own command (None: the
    toolkit's loop): what a failed task names (node/task.py)."""
    job = config.get("job")
    if not isinstance(job, Mapping):
        return None
    entry, kind = job.get("entry"), str(job.get("entry_kind", "auto"))
    return str(entry) if entry and runs_script(str(entry), kind) else None
