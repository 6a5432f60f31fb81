"""A run directory as one object: its properties are its files and folders, its methods
read its small records. The two sides of a job agree on it alone (as submitit's
`JobPaths` is the one contract between its submitting and its running side): the
login-node side (`jzk status`, `jzk report`, `jzk logs`) reads a run through a `RunDir`,
never through the task side's modules.

The names come from run_layout.py (declared once, with who writes and who reads each);
this module joins them to a folder and parses what is there. Reads only: the writers stay
with the code that owns each record's moment (the lease holder, the launcher, rank 0),
and call the paths here. Every reader tolerates a file being written or missing (a run
that has not got that far): an absent record is an empty answer, never an error.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from jeanzay_kit.durable_io import read_json_lines
from jeanzay_kit.rundir import run_layout as layout
from jeanzay_kit.rundir.beats import SCRIPT_BEAT_PREFIX, Beat, ScriptBeat

_Record = TypeVar("_Record")


@dataclass(frozen=True)
class RunDir:
    root: Path
    # The final model's name, also Session.save_model's documented default.
    final_model_name: ClassVar[str] = layout.MODEL_FINAL

    @classmethod
    def of(cls, path: str | Path) -> RunDir:
        return cls(Path(path))

    def __str__(self) -> str:
        """The folder's path, as a message or a command line names it."""
        return str(self.root)

    def sibling(self, name: str) -> RunDir:
        """The run directory `name` beside this one (a rehearsal's reference run)."""
        return type(self)(self.root.parent / name)

    def siblings(self, pattern: str) -> list[RunDir]:
        """The folders beside this one whose names match the glob `pattern` (the other
        runs of a script's job.name), this one left out."""
        return [type(self)(p) for p in self.root.parent.glob(pattern) if p != self.root]

    @property
    def above(self) -> RunDir:
        """The folder holding this one: a sweep's, for one of its points."""
        return type(self)(self.root.parent)

    def inside(self) -> list[RunDir]:
        """The folders inside this one (a sweep's points), none if it is no folder."""
        folders = self.root.iterdir() if self.root.is_dir() else ()
        return [type(self)(p) for p in folders if p.is_dir()]

    # ---- its files and folders (run_layout.ENTRIES says who writes and reads each) -----
    @property
    def checkpoints(self) -> Path:
        return self.root / layout.CHECKPOINTS

    @property
    def metrics(self) -> Path:
        return self.root / layout.METRICS

    @property
    def heartbeats(self) -> Path:
        return self.root / layout.HEARTBEAT

    @property
    def result(self) -> Path:
        return self.root / layout.RESULT

    @property
    def outcome(self) -> Path:
        return self.root / layout.OUTCOME

    @property
    def provenance(self) -> Path:
        return self.root / layout.PROVENANCE

    @property
    def lease(self) -> Path:
        return self.root / layout.LEASE

    @property
    def restarts(self) -> Path:
        return self.root / layout.RESTARTS

    @property
    def endings(self) -> Path:
        return self.root / layout.ENDINGS

    @property
    def train_log(self) -> Path:
        return self.root / layout.TRAIN_LOG

    @property
    def trackers(self) -> Path:
        return self.root / layout.TRACKERS

    @property
    def hydra(self) -> Path:
        return self.root / layout.HYDRA

    @property
    def command(self) -> Path:
        return self.root / layout.COMMAND

    @property
    def attempts(self) -> Path:
        return self.root / layout.ATTEMPTS

    @property
    def manifest(self) -> Path:
        return self.root / layout.MANIFEST

    @property
    def nccl_timeouts(self) -> Path:
        return self.root / layout.NCCL_TIMEOUT

    @property
    def model_final(self) -> Path:
        return self.root / self.final_model_name

    @property
    def model_digest(self) -> Path:
        return self.root / layout.MODEL_DIGEST

    @property
    def tensorboard(self) -> Path:
        return self.root / layout.TENSORBOARD

    @property
    def wandb(self) -> Path:
        return self.root / layout.WANDB

    @property
    def mlflow(self) -> Path:
        return self.root / layout.MLFLOW

    @property
    def stop_note(self) -> Path:
        return self.root / layout.STOP_NOTE

    @property
    def requeue_mark(self) -> Path:
        return self.root / layout.REQUEUE_MARK

    @property
    def script_port(self) -> Path:
        return self.root / layout.SCRIPT_PORT

    @property
    def fault_nan(self) -> Path:
        return self.root / layout.FAULT_NAN

    @property
    def script_cwd(self) -> Path:
        return self.root / layout.SCRIPT_CWD

    @property
    def job_script(self) -> Path:
        return self.root / layout.JOB_SCRIPT

    def hang_dir(self, tag: int) -> Path:
        """hang-<tag>/: the stacks of one hang (tag: the stalled step, or a script
        attempt's start), the same name on every rank and task that sees it."""
        return self.root / f"{layout.HANG_PREFIX}{tag}"

    def script_beat(self, rank: int) -> Path:
        """heartbeat/task-<rank>.json: what a script task's wrapper saw of its command,
        beside a session's own rank-<N>.json."""
        return self.heartbeats / f"{SCRIPT_BEAT_PREFIX}{rank}.json"

    def saved_model(self, name: str) -> tuple[Path, Path]:
        """A final model's file and its digest beside it (<name without .pt>.sha256):
        model_final.pt by default, another name where a loop gives one."""
        path = self.root / name
        return path, path.with_name(f"{path.stem}.sha256")

    @property
    def compile_cache(self) -> Path:
        return self.root / layout.COMPILE_CACHE

    @property
    def compile_artifacts(self) -> Path:
        return self.root / layout.COMPILE_ARTIFACTS

    @property
    def faults(self) -> Path:
        return self.root / layout.FAULTS

    @property
    def rehearsal(self) -> Path:
        return self.root / layout.REHEARSAL

    @property
    def kept(self) -> Path:
        return self.root / layout.KEPT

    @property
    def archived(self) -> Path:
        return self.root / layout.ARCHIVED

    @property
    def starts(self) -> Path:
        return self.root / layout.STARTS

    @property
    def micro_batch(self) -> Path:
        return self.root / layout.MICRO_BATCH

    # ---- its records, read -----------------------------------------------------------
    def metric_records(self) -> list[dict[str, Any]]:
        """metrics.jsonl, oldest first; a line being written is skipped."""
        return read_json_lines(self.metrics)

    def ending_records(self) -> list[dict[str, Any]]:
        """How each attempt ended, oldest first (endings.jsonl)."""
        return read_json_lines(self.endings)

    def attempt_records(self) -> list[dict[str, Any]]:
        """A script task's or a Hydra app point's starts, oldest first (attempts.jsonl)."""
        return read_json_lines(self.attempts)

    def start_records(self) -> list[dict[str, Any]]:
        """Each start's start-up in parts (starts.jsonl), oldest first."""
        return read_json_lines(self.starts)

    def restart_records(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """(restarts that count against the budget now, those of earlier finished runs)."""
        try:
            data = json.loads(self.restarts.read_text())
            return list(data.get("restarts", [])), list(data.get("history", []))
        except (OSError, ValueError, AttributeError):
            return [], []

    def restart_history(self) -> list[dict[str, Any]]:
        """Every restart the run directory has seen, finished runs' included, oldest first."""
        current, history = self.restart_records()
        return history + current

    def beats(self) -> list[Beat]:
        """Every rank's newest heartbeat."""
        return read_beats(self.heartbeats)

    def progressed_since(self, since: float) -> bool:
        """Did any rank of the attempt started at `since` complete a step? Beats written
        before `since` belong to an earlier attempt; a failure with no progress would only
        repeat, so it is not worth a restart (NVIDIA Resiliency Extension's rule)."""
        return any(
            b.wall_time >= since and b.start_step is not None and b.step > b.start_step
            for b in self.beats()
        )

    def script_beats(self) -> list[ScriptBeat]:
        """Every script task's newest beat (node/script_watch.py writes them)."""
        return _read_records(self.heartbeats, f"{SCRIPT_BEAT_PREFIX}*.json", ScriptBeat.from_json)

    def script_files(
        self, skip: Callable[[tuple[str, ...]], bool] | None = None
    ) -> list[tuple[Path, float]]:
        """Every file a script wrote under the run directory, with its mtime: not the
        toolkit's own (run_layout.written_by_script), not a link (a script's working
        directory links the project's files, node/script_cwd.py), nor what `skip` says
        of a path's parts under the run directory (a Hydra app's own records)."""
        try:
            tops = [p for p in self.root.iterdir() if layout.written_by_script(p.name)]
        except OSError:
            return []
        found = []
        for top in tops:
            for path in (top, *top.rglob("*")) if top.is_dir() else (top,):
                try:
                    if skip is not None and skip(path.relative_to(self.root).parts):
                        continue
                    if path.is_file() and not path.is_symlink():
                        found.append((path, path.stat().st_mtime))
                except OSError:  # removed while we looked (the script rotates its files)
                    continue
        return found

    def newest_script_write(self) -> float | None:
        """When the script last wrote a file in its run directory (None: never)."""
        return max((mtime for _, mtime in self.script_files()), default=None)

    def newest_script_checkpoint(self) -> tuple[Path, float] | None:
        """The script's newest file that looks like a checkpoint, and its mtime (the newest
        written, whatever its name: `last.pth.tar` beside `checkpoint-4.pth.tar`)."""
        found = [
            (p, t)
            for p, t in self.script_files()
            if looks_like_checkpoint(p.relative_to(self.root).as_posix())
        ]
        return max(found, key=lambda item: item[1], default=None)

    def is_run_or_sweep(self) -> bool:
        return is_run_or_sweep(self.root)

    def looks_like_a_run(self) -> bool:
        """It holds what a started run writes (metrics, beats, an outcome, a lease):
        `jzk status` lists such a folder."""
        return any((self.root / name).exists() for name in layout.STATUS_MARKS)

    def is_script_run(self) -> bool:
        """A script task owns it (command.json), or a Hydra app's point records its
        starts (attempts.jsonl): its progress is read from those, not from beats."""
        return self.command.is_file() or self.attempts.is_file()

    def hydra_overrides(self) -> tuple[str, ...]:
        """The overrides Hydra recorded for the run (task overrides), or none."""
        path = self.hydra / "overrides.yaml"
        if not path.is_file():
            return ()
        from omegaconf import OmegaConf

        loaded = OmegaConf.to_container(OmegaConf.load(path))
        return tuple(str(o) for o in loaded) if isinstance(loaded, list) else ()

    def newest_start_job(self) -> str | None:
        """The Slurm job of the newest start (provenance/history.jsonl, written by every
        start on Slurm or here, whoever launched it): its array form where it is an
        array task; None for a start on this machine or no record."""
        starts = read_json_lines(self.provenance / "history.jsonl")
        if not starts:
            return None
        job = starts[-1].get("array_id") or starts[-1].get("job_id")
        return str(job) if job else None


def is_run_or_sweep(folder: Path) -> bool:
    """It holds a lease, a manifest, an outcome or metrics: what the toolkit wrote for a
    run or a sweep (a code snapshot, which asks of every folder of a project, leaves such
    a folder out)."""
    return any((folder / name).exists() for name in layout.RUN_DIR_MARKS)


def write_probe(folder: Path) -> Path:
    """The small file written to test that a folder takes writes: a run directory, a
    study's or a report's folder (ckpt/writable.py; the batch script writes it too)."""
    return folder / layout.WRITE_PROBE


def read_beats(folder: Path) -> list[Beat]:
    """The beats of a heartbeat folder (the watchdog reads its own run's); one being
    replaced or damaged is left out: the next look sees it."""
    return _read_records(folder, "rank-*.json", Beat.from_json)


def _read_records(folder: Path, pattern: str, parse: Callable[[Any], _Record]) -> list[_Record]:
    records = []
    for path in sorted(folder.glob(pattern)):
        try:
            records.append(parse(json.loads(path.read_text())))
        except (OSError, ValueError, KeyError, TypeError):
            continue  # being replaced, or damaged: the next look sees it
    return records


# File names that look like a checkpoint of a script's own (`jzk status` shows the newest),
# as users name them: `ckpt.pt`, timm's `last.pth.tar` and `checkpoint-3.pth.tar` (a
# suffix anywhere in the name), Lightning's `last.ckpt`, `checkpoint-last`, a file of a
# Hugging Face `checkpoint-500/` folder.
CHECKPOINT_SUFFIXES = (".pt", ".pth", ".ckpt", ".safetensors", ".bin", ".pkl", ".distcp")
CHECKPOINT_WORDS = ("checkpoint", "ckpt")


def looks_like_checkpoint(name: str) -> bool:
    """`name`: a file's name, or its path under the run directory (its folders count)."""
    lowered = name.lower()
    suffixes = {f".{part}" for part in lowered.rsplit("/", 1)[-1].split(".")[1:]}
    return bool(suffixes & set(CHECKPOINT_SUFFIXES)) or any(w in lowered for w in CHECKPOINT_WORDS)
