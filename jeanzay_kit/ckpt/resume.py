"""Which checkpoint a run resumes from, and whether it may.

`choose_checkpoint` (rank 0): resume=auto is the newest complete checkpoint of the run
directory (unfinished saves are removed first), resume=never is none, and a path must be
a complete, undamaged step-N folder. `check_compatible` (every rank): the checkpoint's
layout must split the model as this run does (the number of data-parallel ranks may
differ: ckpt/layout.py `world_change`), and its config hash must be this config's, unless
checkpoint.allow_config_change (then the differences are logged).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from jeanzay_kit.ckpt.layout import config_change_message, parse_step_dir, world_change
from jeanzay_kit.ckpt.store import CheckpointStore, ResumeError, check_shape
from jeanzay_kit.config.identity import RESUME_IGNORES, config_differences, resume_hash


def choose_checkpoint(
    store: CheckpointStore, resume: str, log: Callable[[str], None]
) -> str | None:
    if resume == "never":
        return None
    if resume == "auto":
        removed = store.remove_stale()
        if removed:
            log(f"removed unfinished saves: {', '.join(sorted(removed))}")
        step = store.newest_good(report=log)
        return str(store.step_dir(step)) if step is not None else None
    path = Path(resume)
    step = parse_step_dir(path.name)
    if step is None or not path.is_dir():
        raise ResumeError(
            f"resume={resume} is not a checkpoint folder (<run_dir>/checkpoints/step-N)"
        )
    problems = CheckpointStore(path.parent).problems(step)
    if problems:
        raise ResumeError(f"resume={resume} is damaged: " + "; ".join(problems))
    return str(path)


def check_compatible(
    folder: Path,
    world: Mapping[str, Any],
    config: Mapping[str, Any],
    allow_change: bool,
    log: Callable[[str], None],
) -> None:
    manifest = CheckpointStore(folder.parent).manifest(parse_step_dir(folder.name) or 0)
    refusal, note = world_change(str(folder), manifest.world, world)
    if refusal:
        raise ResumeError(refusal)
    if note:
        log(note)
    if manifest.config_hash == resume_hash(config):
        return
    old = json.loads((folder / "config.json").read_text())
    if not allow_change:
        raise ResumeError(config_change_message(str(folder), old, dict(config)))
    check_shape(str(folder), old, config)
    diffs = config_differences(old, dict(config), RESUME_IGNORES)
    log("resuming with a changed config: " + "; ".join(diffs[:10]))
