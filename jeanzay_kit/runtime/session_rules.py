"""What a session (runtime/session.py) decides from plain values. Pure: no torch, no os.environ.

A session is the toolkit's runtime for a loop the user wrote: these rules say where it
writes, how its global batch splits over the ranks, what its checkpoints record for the
resume check, and whether the user's extra state can be saved and loaded back with
`torch.load(weights_only=True)`.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Mapping

from jeanzay_kit.errors import JzkError

# Where a session writes when nothing says otherwise (a plain `python script.py`).
DEFAULT_RUN_DIR = "outputs/session"
# What torch.load(weights_only=True) reads back, besides tensors.
_PLAIN = (str, int, float, bool, type(None))


def whole_step(step: object) -> int:
    """s.log's step as metrics.jsonl keeps it: the number of optimizer steps done, given
    as an int, numpy's or a one-number tensor's integer, or a whole float (100.0). The
    trackers, `jzk report` and the rehearsal read steps as whole numbers."""
    if not isinstance(step, bool):  # True is no number of steps
        try:
            return operator.index(step)  # type: ignore[arg-type]
        except TypeError:
            pass
    try:  # a text is not a number of steps, whatever it reads
        text = isinstance(step, str | bytes | bool)
        value = math.nan if text else float(step)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        value = math.nan
    if value.is_integer():
        return int(value)
    raise JzkError(
        f"s.log(step={step!r}): the step is the number of optimizer steps done, a whole "
        "number. HINT: pass your loop's step counter, e.g. s.log(step + 1, loss=loss)"
    )


def run_dir_for(given: str | None, env: Mapping[str, str], hydra_dir: str | None = None) -> str:
    """session(run_dir=...) first; then JZK_RUN_DIR, the run directory a script task or a
    Hydra app's point on the jeanzay launcher gets (the same on every requeue); then the
    output directory of the Hydra app calling the session (each point of a sweep its own,
    fixed at submission under hydra-submitit-launcher); then DEFAULT_RUN_DIR."""
    if given:
        return given
    return env.get("JZK_RUN_DIR") or hydra_dir or DEFAULT_RUN_DIR


def split_global_batch(batch_size: int, global_batch_size: int | None, world_size: int) -> int:
    """The gradient-accumulation steps of each rank: global_batch_size samples per step,
    batch_size per micro-batch on each of world_size ranks. Without global_batch_size one
    micro-batch per rank and step (so the global batch follows the world size)."""
    if batch_size <= 0:
        raise JzkError(f"s.sampler(batch_size={batch_size}): it must be a positive integer")
    if global_batch_size is None:
        return 1
    per_round = batch_size * world_size
    if global_batch_size <= 0 or global_batch_size % per_round:
        raise JzkError(
            f"s.sampler(global_batch_size={global_batch_size}) is not a multiple of "
            f"batch_size {batch_size} x world size {world_size} = {per_round}. HINT: pick "
            f"a global batch divisible by {per_round} (each rank then runs "
            "global_batch_size / (batch_size x world size) micro-batches a step), or a "
            "smaller batch_size"
        )
    return global_batch_size // per_round


def checkpoint_world(mode: str, world_size: int) -> dict[str, object]:
    """What a session's checkpoint records of its layout (ckpt/layout.py world_change):
    data parallel only, so another number of ranks may resume it."""
    return {
        "mode": mode,
        "world_size": world_size,
        "pp_size": 1,
        "dp_size": world_size,
        "stages_per_rank": 1,
    }


def resume_config(
    data: Mapping[str, object] | None, user: Mapping[str, object] | None
) -> dict[str, object]:
    """The config a session's checkpoint hashes: the data order (dataset size, global
    batch, seed) when s.sampler is used, and what the user passed as `config=` (their
    hyper-parameters). A resume with another of these is refused, naming the key."""
    return {"session": dict(data or {}), "user": dict(user or {})}


def extra_problems(
    value: object, where: str, is_tensor: Callable[[object], bool] = lambda _v: False
) -> list[str]:
    """Why `value` (the saved form of s.checkpointer's extra) could not be loaded back with
    weights_only=True: one line per offending entry, naming it and its type."""
    if isinstance(value, _PLAIN) or is_tensor(value):
        return []
    if isinstance(value, Mapping):
        out = []
        for key, item in value.items():
            if not isinstance(key, (str, int)):
                out.append(f"{where} has a key of type {type(key).__name__}")
                continue
            out.extend(extra_problems(item, f"{where}[{key!r}]", is_tensor))
        return out
    if isinstance(value, (list, tuple)):
        out = []
        for i, item in enumerate(value):
            out.extend(extra_problems(item, f"{where}[{i}]", is_tensor))
        return out
    return [f"{where} is a {type(value).__module__}.{type(value).__qualname__}"]


def extra_message(problems: list[str]) -> str:
    return (
        "s.checkpointer(extra=...) holds what a checkpoint cannot load back safely "
        f"(torch.load with weights_only=True): {'; '.join(problems[:5])}. HINT: give objects "
        "with state_dict()/load_state_dict() (an LR scheduler, a GradScaler, a torchmetrics "
        "metric) or plain values (numbers, strings, lists, dicts, tensors)"
    )
