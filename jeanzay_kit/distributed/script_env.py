"""A script task: the user's own command on every task, with the environment a torchrun
script expects. Pure: values in, values out.

`job.entry` names what each task runs. The toolkit's own loop is `-m
jeanzay_kit.train_app` (the default), given the frozen config as Hydra's arguments. Any
other entry is the user's command (`path/to/script.py` or `-m package.module`): it gets
exactly `job.args`, never Hydra's arguments, and in its environment the variables of
torchrun's contract (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR,
MASTER_PORT, GROUP_RANK) plus JZK_RUN_DIR, the run directory, the same on every requeue,
and SETTINGS_ENV, the job's settings for a session the script opens.
`job.entry_kind` says it when the rule guesses wrong: `toolkit` for a Hydra application
of yours that calls the toolkit, `script` for a command that happens to be the module.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from jeanzay_kit import run_layout as layout
from jeanzay_kit.distributed.ranks import RankInfo

# The job's runtime settings (JSON) for a session the script opens: config/runtime_settings.py
# reads it. Named here, below both, so the writer and the reader agree.
SETTINGS_ENV = "JZK_SESSION_SETTINGS"

# Written in the run directory by a task whose command exited 3 ("requeue me",
# node/script_task.py); the batch script's restart step (node/restart_job.py --script)
# requeues the job and removes it.
REQUEUE_MARK = layout.REQUEUE_MARK
# Written in the run directory by the batch shell when Slurm signalled it alone
# (`--signal=B:USR1@120`, `scancel --batch`): the signal's name, for every task to read
# (node/signal_rules.py, runtime/preemption.py StopRequest.watch_note).
STOP_NOTE_FILE = layout.STOP_NOTE


def script_argv(python: str, entry: str, args: Sequence[str]) -> list[str]:
    """The command each task runs: the interpreter, the entry (a script path or `-m
    module`), then exactly job.args."""
    return [python, *shlex.split(entry), *args]


def script_env(info: RankInfo, run_dir: str, settings: str = "") -> dict[str, str]:
    """The variables a torchrun-style script reads (torch.distributed's env:// init), where
    its run directory is, and the job's runtime settings for a session it opens
    (settings: config/runtime_settings.py to_env; SETTINGS_ENV there names the variable)."""
    env = {
        "RANK": str(info.rank),
        "LOCAL_RANK": str(info.local_rank),
        "WORLD_SIZE": str(info.world_size),
        "LOCAL_WORLD_SIZE": str(info.local_world_size),
        "GROUP_RANK": str(info.node_rank),
        "GROUP_WORLD_SIZE": str(info.num_nodes),
        "MASTER_ADDR": info.master_addr,
        "MASTER_PORT": str(info.master_port),
        "JZK_RUN_DIR": run_dir,
    }
    if info.job_id:
        env["JZK_JOB_ID"] = info.requeue_id or info.job_id
    if settings:
        env[SETTINGS_ENV] = settings
    return env


def entry_problem(entry: str, is_file: bool, module_found: bool) -> str | None:
    """Why job.entry cannot run (None: it can), from what the caller saw on disk."""
    words = shlex.split(entry)
    if not words:
        return (
            "job.entry is empty. HINT: give a script (job.entry=train_ddp.py) or -m package.module"
        )
    if words[0] == "-m":
        if len(words) != 2:
            return (
                f"job.entry={entry!r} must be `-m package.module` alone. HINT: put the "
                "command's arguments in job.args='[--epochs,10]'"
            )
        if not module_found:
            return (
                f"job.entry={entry!r}: no module {words[1]} can be imported from the project "
                "(its root is on the path) or the environment. HINT: check the name, or "
                "install the package in the environment job.python runs"
            )
        return None
    if len(words) != 1:
        return (
            f"job.entry={entry!r} holds more than a script path. HINT: put the script's "
            "arguments in job.args='[--epochs,10]'"
        )
    if not is_file:
        return (
            f"job.entry={entry!r} is not a file (relative paths are relative to job.workdir, "
            "or to where you run the command). HINT: give the script's path"
        )
    return None
