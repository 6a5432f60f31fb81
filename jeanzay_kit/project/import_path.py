"""Make the user's code importable (`_target_: mypkg.model.Net`) in every process.

An edge module: it changes sys.path. The entry points call `put_project_on_path` once,
with the environment they read, before Hydra composes anything:

* a job whose code was snapshotted at submission exports JZK_CODE_DIR (the snapshot):
  it goes first, so an edit made in the project while the job waits in the queue, or
  between a preemption and the requeue, changes nothing;
* otherwise the project's root, the directory the command runs in (a job's
  job.workdir), goes first: `jzk train` is a console script, whose sys.path[0] is the
  environment's bin/ folder, not the project.

Local workers and DataLoader workers are spawned with the parent's sys.path
(multiprocessing's spawn preparation data), so they import the same code.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

CODE_DIR_VAR = "JZK_CODE_DIR"


def project_code_dir(env: Mapping[str, str], cwd: Path) -> Path:
    """Where the user's code is imported from: the snapshot, else the project root."""
    snapshot = env.get(CODE_DIR_VAR)
    if snapshot:
        path = Path(snapshot)
        return path if path.is_absolute() else cwd / path
    return cwd


def put_project_on_path(env: Mapping[str, str], cwd: Path) -> Path:
    """Put the project's code first on sys.path (once); returns the folder used."""
    folder = str(project_code_dir(env, cwd))
    if sys.path[:1] != [folder]:
        # Also when it is further down (python -m puts cwd first): it must win over a
        # snapshot's stale twin and over an installed package of the same name.
        while folder in sys.path:
            sys.path.remove(folder)
        sys.path.insert(0, folder)
    return Path(folder)
