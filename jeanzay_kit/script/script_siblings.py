"""Another run of the same script beside a new one: `jzk train job.entry=train.py --
--epochs 14` after `-- --epochs 12` starts a new run directory (the arguments name the
run), while the old one holds the script's checkpoint. By design, but said: one line at
start names the old run directory and job.args_may_change. Edge (reads run directories).
"""

from __future__ import annotations

import glob
import json
import time
from collections.abc import Sequence
from pathlib import Path

from jeanzay_kit.rundir.progress import format_duration
from jeanzay_kit.rundir.run_directory import RunDir
from jeanzay_kit.script.script_files import newest_script_write
from jeanzay_kit.script.script_rules import ScriptCommand


def changed_options(old: Sequence[str], new: Sequence[str]) -> list[str]:
    """The options (`--epochs`) whose value differs between two argument lists, or
    that only one of them has (`--name=value` and `--name value` alike)."""
    a, b = _options(old), _options(new)
    return sorted(k for k in a.keys() | b.keys() if k not in a or k not in b or a[k] != b[k])


def _options(args: Sequence[str]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for i, arg in enumerate(args):
        if not arg.startswith("-") or arg == "--":
            continue
        name, sep, value = arg.partition("=")
        if sep:
            out[name] = value
        else:
            following = args[i + 1] if i + 1 < len(args) else None
            out[name] = following if following and not following.startswith("-") else None
    return out


def earlier_run_line(
    run_dir: RunDir, job_name: str, command: ScriptCommand, now: float | None = None
) -> str | None:
    """One line when `run_dir` is a new run of the script and another run directory of
    the same job.name and script (other arguments) holds the script's files; None
    otherwise (this run directory exists: it resumes)."""
    if run_dir.command.exists():
        return None
    now = time.time() if now is None else now
    entry = command.identity()["entry"]
    found: list[tuple[float, Path, list[str], str]] = []
    for other in run_dir.siblings(f"{glob.escape(job_name)}-*"):
        path = other.root
        if not path.is_dir():
            continue
        try:
            record = json.loads(other.command.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(record, dict) or record.get("entry") != entry:
            continue
        checkpoint = other.newest_script_checkpoint()
        written = checkpoint[1] if checkpoint else newest_script_write(other)
        if written is None:
            continue  # it left nothing to lose
        what = f"{checkpoint[0].relative_to(path)}, " if checkpoint else "files, "
        args = [str(a) for a in record.get("args") or []]
        found.append((written, path, args, what + f"written {format_duration(now - written)} ago"))
    if not found:
        return None
    _, where, args, what = max(found, key=lambda item: item[0])
    changed = changed_options(args, command.args)
    may_change = (
        f"job.args_may_change='[{','.join(changed)}]'" if changed else "job.args_may_change"
    )
    return (
        f"jzk: {where} holds a run of the same script with other arguments "
        f"({' '.join(args) or 'none'}) and its files ({what}); this command starts a new run "
        f"in {run_dir}. HINT: to go on in that run with these arguments instead: "
        f"job.run_dir={other} {may_change}"
    )
