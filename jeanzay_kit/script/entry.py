"""A script task's entry as both sides see it: checked before a job is queued (it names
a file of the project or an importable module), whether it is a Hydra app, and the
command the run directory belongs to (script_rules.ScriptCommand)."""

from __future__ import annotations

import importlib.util
import shlex
import sys
from pathlib import Path

from jeanzay_kit.config.spec import JobSpec
from jeanzay_kit.distributed.script_env import entry_problem
from jeanzay_kit.errors import JzkError
from jeanzay_kit.script.script_rules import ScriptCommand


def check_entry(entry: str, base: Path) -> None:
    """JzkError naming job.entry when it is neither a file (relative to `base`) nor an
    importable module."""
    try:
        words = shlex.split(entry)
    except ValueError as err:  # an unclosed quote
        raise JzkError(f"job.entry={entry!r} cannot be read as a command: {err}") from None
    is_file = bool(words) and (base / words[0]).is_file()
    module_found = False
    if len(words) == 2 and words[0] == "-m":
        # The project's root is importable on the tasks (project/import_path.py).
        sys.path.insert(0, str(base))
        try:
            module_found = importlib.util.find_spec(words[1]) is not None
        except (ImportError, ValueError):
            module_found = False
        finally:
            sys.path.remove(str(base))
    problem = entry_problem(entry, is_file, module_found)
    if problem:
        raise JzkError(problem)


def hydra_job(command: ScriptCommand, project: Path) -> str | None:
    """Hydra's job name of the entry when it is a Hydra app (script/hydra_app_rules.py),
    else None: the script (or `-m` module) of the project, found as the rehearsal and
    the submit checks find it (script/reach.py entry_file), read once."""
    from jeanzay_kit.script.hydra_app_rules import is_hydra_app, job_name
    from jeanzay_kit.script.reach import entry_file

    path = entry_file(command.entry, project)
    try:
        source = "" if path is None else path.read_text(errors="replace")
    except OSError:
        return None
    return job_name(command.entry) if is_hydra_app(source) else None


def script_command(spec: JobSpec) -> ScriptCommand:
    """The job's script task as the run directory sees it."""
    job = spec.job
    return ScriptCommand(
        job.entry, job.args, job.resume_args, job.args_may_change, job.script_outputs
    )
