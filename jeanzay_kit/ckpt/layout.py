"""Checkpoint layout rules, as pure functions over names and plain values.

    <run_dir>/checkpoints/
        step-200/            a checkpoint: data files, then manifest.json written last
        step-300/
        .tmp-step-400/       being written (or left by a crash): never loaded
        .trash-step-100/     dropped by retention, being deleted: never loaded

A folder counts only when its manifest exists, parses, and every file it lists has the
size and checksum it records (ckpt/checksum.py). The newest such folder wins; retention
keeps the newest `keep_last` complete ones and never deletes the newest complete
checkpoint. There is no "latest" link to go stale: the newest complete folder is found
by listing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

# What a config computes lives with the config (config/identity.py); the checkpoint records
# its hash and explains a refusal with its differences.
from jeanzay_kit.config.identity import RESUME_IGNORES, config_differences
from jeanzay_kit.errors import ManifestError
from jeanzay_kit.values import as_node

MANIFEST = "manifest.json"
# Format 2 records "checksum": "<algorithm>:<hex>"; format 1 (still read) had "sha256".
FORMAT = 2
READABLE_FORMATS = (1, 2)
_STEP_DIR = re.compile(r"^step-(\d+)$")
TMP_PREFIX = ".tmp-step-"
# Retention renames a checkpoint to this (one atomic step: it stops counting at once),
# then deletes it in the background; a crash leaves it for remove_stale.
TRASH_PREFIX = ".trash-step-"


def step_dir_name(step: int) -> str:
    return f"step-{step}"


def tmp_dir_name(step: int) -> str:
    return f"{TMP_PREFIX}{step}"


def trash_dir_name(step: int) -> str:
    return f"{TRASH_PREFIX}{step}"


def parse_step_dir(name: str) -> int | None:
    match = _STEP_DIR.match(name)
    return int(match.group(1)) if match else None


@dataclass(frozen=True)
class FileRecord:
    size: int
    checksum: str  # "<algorithm>:<hex digest>", e.g. "xxh3_128:9f3c..."


@dataclass(frozen=True)
class Manifest:
    step: int
    files: Mapping[str, FileRecord]
    world: Mapping[str, object] = field(default_factory=dict)
    config_hash: str = ""
    code_version: str = ""
    sample_position: int = 0
    extra: Mapping[str, object] = field(default_factory=dict)

    def to_json(self) -> str:
        return (
            json.dumps(
                {
                    "format": FORMAT,
                    "step": self.step,
                    "sample_position": self.sample_position,
                    "world": dict(self.world),
                    "config_hash": self.config_hash,
                    "code_version": self.code_version,
                    "files": {
                        k: {"size": v.size, "checksum": v.checksum}
                        for k, v in sorted(self.files.items())
                    },
                    "extra": dict(self.extra),
                },
                indent=2,
                sort_keys=False,
            )
            + "\n"
        )

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files.values())


def parse_manifest(text: str) -> Manifest:
    try:
        data = json.loads(text)
        if data.get("format") not in READABLE_FORMATS:
            raise ManifestError(f"unknown manifest format {data.get('format')!r}")
        files = {
            str(k): FileRecord(
                int(v["size"]),
                str(v["checksum"]) if data["format"] >= 2 else f"sha256:{v['sha256']}",
            )
            for k, v in data["files"].items()
        }
        return Manifest(
            step=int(data["step"]),
            files=files,
            world=data.get("world", {}),
            config_hash=str(data.get("config_hash", "")),
            code_version=str(data.get("code_version", "")),
            sample_position=int(data.get("sample_position", 0)),
            extra=data.get("extra", {}),
        )
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        if isinstance(err, ManifestError):
            raise
        raise ManifestError(f"unreadable manifest: {err}") from err


def compare_files(manifest: Manifest, found: Mapping[str, FileRecord | None]) -> list[str]:
    """What is wrong with a checkpoint's files, given what is on disk (None: missing).

    `found` maps each manifest file to its measured record; sizes are compared first so a
    truncated file is reported as such.
    """
    problems = []
    for name, want in sorted(manifest.files.items()):
        got = found.get(name)
        if got is None:
            problems.append(f"{name}: missing")
        elif got.size != want.size:
            problems.append(f"{name}: {got.size} bytes, manifest says {want.size} (truncated?)")
        elif got.checksum != want.checksum:
            problems.append(f"{name}: checksum differs from the manifest (corrupted)")
    return problems


@dataclass(frozen=True)
class Entry:
    """One step folder as listed: complete (manifest present) or not."""

    step: int
    name: str
    has_manifest: bool


def newest_first(entries: Iterable[Entry]) -> list[Entry]:
    return sorted(entries, key=lambda e: e.step, reverse=True)


def to_delete(
    entries: Iterable[Entry], keep_last: int, good: Iterable[int], protect: Iterable[int] = ()
) -> list[Entry]:
    """Folders retention removes: complete ones beyond the newest `keep_last` good ones.

    `good` lists the steps known to be complete and intact. The newest good checkpoint is
    always kept, even with keep_last=0 or when newer folders are damaged, so there is
    always something to resume from. `protect`: steps kept besides (the best evaluated
    one, checkpoint.keep_best). Incomplete folders are left to `stale_incomplete`.
    """
    good_steps = sorted(set(good), reverse=True)
    keep = set(good_steps[: max(1, keep_last)]) | set(protect)
    newest_good = good_steps[0] if good_steps else None
    out = []
    for entry in newest_first(entries):
        if not entry.has_manifest or entry.step in keep:
            continue
        if newest_good is not None and entry.step > newest_good:
            continue  # newer than what we trust: leave it for a human to look at
        out.append(entry)
    return out


def best_step(evaluated: Mapping[int, Mapping[str, object]], key: str, mode: str) -> int | None:
    """The step whose evaluation holds the best `key` (min or max); the newest on a tie.
    `evaluated`: step -> the eval record its manifest holds."""
    scored = [
        (float(value), step)
        for step, record in evaluated.items()
        if isinstance(value := record.get(key), (int, float))
    ]
    if not scored:
        return None
    if mode == "max":
        return max(scored)[1]
    return min(scored, key=lambda vs: (vs[0], -vs[1]))[1]


def config_change_message(folder: str, old: Mapping[str, object], new: Mapping[str, object]) -> str:
    """Why a checkpoint cannot resume this config, and the ways out."""
    diffs = config_differences(old, new, RESUME_IGNORES)
    return (
        f"the config changed since {folder} was saved: "
        + "; ".join(diffs[:10])
        + ("; ..." if len(diffs) > 10 else "")
        + ". HINT: this run directory holds another experiment. Use another job.run_dir (the "
        "default, outputs/<job.name>-<config hash>, gives each config its own), "
        "resume=never to start over here, or checkpoint.allow_config_change=true to resume "
        "anyway"
    )


# What a checkpoint cannot follow: the keys that shape which rank holds which parameters
# beyond plain data parallelism. The data-parallel size may change: DCP reshards the model
# and optimizer, and the global batch (so the data order) does not depend on it.
_FIXED_WORLD = (
    ("mode", "parallel.mode"),
    ("pp_size", "parallel.pipeline_stages"),
    ("stages_per_rank", "parallel.stages_per_rank"),
)


def world_change(
    folder: str, saved: Mapping[str, object], now: Mapping[str, object]
) -> tuple[str | None, str | None]:
    """(refusal, note) for resuming a checkpoint saved with layout `saved` on `now`.

    refusal: a change the checkpoint cannot follow, naming the key. note: what changes
    when only the number of data-parallel ranks differs (None when nothing does)."""
    fixed = [(field_, key) for field_, key in _FIXED_WORLD if field_ not in saved]
    if fixed:
        return (
            f"{folder} does not record its {fixed[0][1]} (layout {dict(saved)}). HINT: "
            "resume it with the code version that wrote it, or resume=never to start over",
            None,
        )
    changed = [
        (key, saved[field_], now[field_])
        for field_, key in _FIXED_WORLD
        if saved[field_] != now[field_]
    ]
    if changed:
        key, old, _new = changed[0]
        listed = "; ".join(f"{k}: {a!r} -> {b!r}" for k, a, b in changed)
        return (
            f"{folder} cannot be resumed with this layout: {listed}. A checkpoint follows a "
            "change in the number of data-parallel ranks (resources.nodes, "
            "resources.gpus_per_node), not in how the model is split. HINT: set "
            f"{key}={old} again, or resume=never to start over",
            None,
        )
    if saved.get("world_size") == now["world_size"] and saved.get("dp_size") == now["dp_size"]:
        return None, None
    return None, (
        f"resuming {folder}, saved on {saved.get('world_size')} rank(s) "
        f"(data-parallel {saved.get('dp_size')}), on {now['world_size']} rank(s) "
        f"(data-parallel {now['dp_size']}): the model and optimizer are resharded, the "
        "global batch and the data order stay the same, gradient accumulation adapts"
    )


def shape_changes(old: Mapping[str, object], new: Mapping[str, object]) -> list[str]:
    """Changes of the model's shape between a checkpoint's config and this one, which no
    checkpoint can follow even with checkpoint.allow_config_change: the model's class
    (`model._target_`) and its whole-number settings (widths, depth, heads, vocabulary).
    Floats and flags (dropout, activation checkpointing) may change."""
    old_model, new_model = as_node(old.get("model")), as_node(new.get("model"))
    changes = []
    for line in config_differences(old_model, new_model, prefix="model."):
        key = line.split(":")[0]
        a, b = _lookup(old_model, key), _lookup(new_model, key)
        if key == "model._target_" or any(
            isinstance(v, int) and not isinstance(v, bool) for v in (a, b)
        ):
            changes.append(line)
    return changes


def _lookup(tree: object, dotted: str) -> object:
    for part in dotted.split(".")[1:]:
        if not isinstance(tree, Mapping):
            return None
        tree = tree.get(part)
    return tree


def parameter_mismatch(
    folder: str,
    saved: Mapping[str, tuple[int, ...]],
    current: Mapping[str, tuple[int, ...]],
    whole_model: bool = True,
) -> str | None:
    """The first parameter whose shape differs between a checkpoint and the model built
    now (the model's code changed, the config did not), as a refusal; None when they fit.

    saved and current map a parameter's name to its full shape (the model's entries of
    the checkpoint only). whole_model: this rank holds every parameter, so one the
    checkpoint has and the model lacks is a change too; a pipeline stage holds its own
    part only, and is compared on that part."""
    for name, shape in current.items():
        old = saved.get(name)
        if old is None:
            problem = f"the model has {name} {list(shape)}, which the checkpoint lacks"
        elif tuple(old) != tuple(shape):
            problem = f"{name} is {list(shape)} in the model, {list(old)} in the checkpoint"
        else:
            continue
        break
    else:
        extra = sorted(set(saved) - set(current)) if whole_model else []
        if not extra:
            return None
        problem = f"the checkpoint has {extra[0]} {list(saved[extra[0]])}, which the model lacks"
    return (
        f"cannot resume from {folder}: the model no longer matches it ({problem}); its code "
        "changed since the checkpoint was saved. HINT: start a fresh run with another "
        "job.name (a new run directory), or resume=never to start over here; or put the "
        "model's code back as it was (the run's provenance/ folder records the commit and "
        "the diff)"
    )
