"""Experiment trackers that follow the run: W&B and MLflow (metrics.wandb, metrics.mlflow).

Rank 0 logs to them what it writes to metrics.jsonl (runtime/metrics.py calls `log`). One
tracker run per run directory, whatever the stops, requeues and resumes: the tracker's run
id and the last step it received are kept in <run_dir>/trackers.json, so a resumed attempt
continues the same tracker run and sends each step once. A step between the checkpoint
and the last one sent is recomputed by the resumed attempt (exact resume: the same
values) and not sent again; records kept from an attempt the tracker did not see (the
tracker turned on at a resume) are sent first, so its history starts at step 1.

A tracker never stops training: an error (a missing package, a store that cannot be
written, W&B's service gone) is reported once on stderr and that tracker is turned off
for the attempt. Neither package is imported unless its tracker is on.

W&B: offline by default (Jean Zay's compute nodes have no internet); its files are in
<run_dir>/wandb and the `wandb sync` command that uploads every attempt as one run is
printed at the end of each attempt. MLflow: a file store in <run_dir>/mlruns by default
(metrics.mlflow_uri for a server or a database).
"""

from __future__ import annotations

import json
import math
import os
import secrets
import string
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from jeanzay_kit.durable_io import write_durably
from jeanzay_kit.rundir.progress import record_step
from jeanzay_kit.rundir.run_directory import RunDir

INSTALL_HINT = "pip install 'jeanzay_kit[trackers]'"


@dataclass(frozen=True)
class TrackerOptions:
    """What the trackers need from metrics.* and job.name (config/sections.MetricsSettings)."""

    wandb: bool = False
    wandb_project: str = "jzk"
    wandb_entity: str | None = None
    wandb_mode: str = "offline"
    mlflow: bool = False
    mlflow_uri: str | None = None
    mlflow_experiment: str = "jzk"

    @property
    def any(self) -> bool:
        return self.wandb or self.mlflow


def options_from_spec(spec: Any) -> TrackerOptions:
    """The trackers of a validated JobSpec; project and experiment default to job.name."""
    met, name = spec.metrics, spec.job.name
    return TrackerOptions(
        wandb=met.wandb,
        wandb_project=met.wandb_project or name,
        wandb_entity=met.wandb_entity,
        wandb_mode=met.wandb_mode,
        mlflow=met.mlflow,
        mlflow_uri=met.mlflow_uri,
        mlflow_experiment=met.mlflow_experiment or name,
    )


# ---- pure rules ------------------------------------------------------------------------


def flat_params(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested config as dotted keys of scalars ("optim.lr": 0.001); lists as text."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flat_params(value, f"{name}."))
        elif value is None or isinstance(value, (bool, int, float, str)):
            flat[name] = value
        else:
            flat[name] = (
                json.dumps(value, default=str) if isinstance(value, (list, tuple)) else str(value)
            )
    return flat


def scalars(record: Mapping[str, Any]) -> dict[str, float]:
    """A metrics.jsonl record's finite numbers, but its step (the tracker's own axis)."""
    out = {}
    for key, value in record.items():
        if key == "step" or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if math.isfinite(value):
            out[key] = float(value)
    return out


def new_run_id() -> str:
    """8 characters of [a-z0-9], W&B's own id shape."""
    alphabet = string.ascii_lowercase + string.digits
    return "".join(secrets.choice(alphabet) for _ in range(8))


def sync_command(run_dir: RunDir, run_id: str, project: str, entity: str | None) -> list[str]:
    """What uploads every attempt of a W&B offline run as one run (wandb >= 0.19 syncs the
    folders of one id in order of start time)."""
    entity_args = ["--entity", entity] if entity else []
    folders = sorted(str(p) for p in run_dir.wandb.glob(f"offline-run-*-{run_id}"))
    return ["wandb", "sync", "--id", run_id, "--project", project, *entity_args, *folders]


# ---- the trackers (edge: the packages, the run directory) ------------------------------


class Tracker(Protocol):
    def log(self, values: dict[str, float], step: int) -> None: ...

    def close(self) -> None: ...


class WandbTracker:
    def __init__(self, opts: TrackerOptions, run_dir: RunDir, run_id: str, params: dict[str, Any]):
        import wandb

        self.run_dir, self.run_id, self.opts = run_dir, run_id, opts
        self.run = wandb.init(
            project=opts.wandb_project,
            entity=opts.wandb_entity,
            id=run_id,
            resume="allow",
            mode="online" if opts.wandb_mode == "online" else "offline",
            dir=str(run_dir),
            name=run_dir.root.name,
            config=params,
            settings=wandb.Settings(silent=True, console="off"),
        )

    def log(self, values: dict[str, float], step: int) -> None:
        self.run.log(values, step=step)

    def close(self) -> None:
        self.run.finish()
        if self.opts.wandb_mode == "offline":
            command = sync_command(
                self.run_dir, self.run_id, self.opts.wandb_project, self.opts.wandb_entity
            )
            print(
                f"jzk: W&B run {self.run_id} (offline); upload it from a login node: "
                + " ".join(command),
                file=sys.stderr,
                flush=True,
            )


class MlflowTracker:
    def __init__(self, opts: TrackerOptions, run_dir: RunDir, run_id: str, params: dict[str, Any]):
        uri = opts.mlflow_uri or run_dir.mlflow.resolve().as_uri()
        if uri.startswith("file:"):
            # MLflow 3 keeps its file store in maintenance mode behind this switch; it is
            # the store that needs no server and no database on a shared filesystem.
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        from mlflow.entities import Metric, Param
        from mlflow.tracking import MlflowClient

        self._metric = Metric
        self.client = MlflowClient(tracking_uri=uri)
        if run_id:
            self.run_id = run_id
            self.client.update_run(run_id, status="RUNNING")
        else:
            experiment = self.client.get_experiment_by_name(opts.mlflow_experiment)
            experiment_id = (
                experiment.experiment_id
                if experiment
                else self.client.create_experiment(opts.mlflow_experiment)
            )
            run = self.client.create_run(experiment_id, run_name=run_dir.root.name)
            self.run_id = run.info.run_id
            items = [Param(k, str(v)[:6000]) for k, v in params.items()]
            for start in range(0, len(items), 100):  # MLflow takes 100 params a batch
                self.client.log_batch(self.run_id, params=items[start : start + 100])
        # Params are written once; the job of each attempt is a tag (a resubmission
        # resumes the run under a new job id).
        self.client.set_tag(self.run_id, "jzk.job_id", str(params.get("jzk.job_id", "")))

    def log(self, values: dict[str, float], step: int) -> None:
        import time

        now = int(time.time() * 1000)
        metrics = [self._metric(k, v, now, step) for k, v in values.items()]
        self.client.log_batch(self.run_id, metrics=metrics)

    def close(self) -> None:
        self.client.set_terminated(self.run_id, status="FINISHED")


class Trackers:
    """The run's trackers on rank 0: opened with the metrics writer, fed its records."""

    def __init__(
        self,
        run_dir: RunDir,
        opts: TrackerOptions,
        params: Mapping[str, Any],
        kept: list[dict[str, Any]],
    ):
        """params: the run's config and identity (run_dir, job id) as flat keys; kept: the
        metrics.jsonl records the resumed attempt keeps (up to its checkpoint)."""
        self.run_dir = run_dir
        self.path = run_dir.trackers
        self.state: dict[str, dict[str, Any]] = _read_state(self.path)
        self.open: dict[str, Tracker] = {}
        wanted = [("wandb", opts.wandb), ("mlflow", opts.mlflow)]
        for name, on in wanted:
            if on:
                self._start(name, opts, dict(params))
        for record in kept:
            self.log(record)

    def _start(self, name: str, opts: TrackerOptions, params: dict[str, Any]) -> None:
        entry = self.state.setdefault(name, {"id": "", "step": 0})
        try:
            if name == "wandb":
                entry["id"] = entry["id"] or new_run_id()
                self._save()  # the id is kept before the run exists: a crash keeps it too
                self.open[name] = WandbTracker(opts, self.run_dir, entry["id"], params)
            else:
                tracker = MlflowTracker(opts, self.run_dir, entry["id"], params)
                entry["id"] = tracker.run_id
                self._save()
                self.open[name] = tracker
        except ImportError:
            _warn(
                f"metrics.{name}=true but {name} is not installed: {INSTALL_HINT} "
                f"(or metrics.{name}=false); training goes on without it"
            )
        except Exception as err:  # noqa: BLE001  # a tracker never stops training
            _warn(
                f"metrics.{name}: could not start ({type(err).__name__}: {err}); "
                "training goes on without it"
            )

    def log(self, record: Mapping[str, Any]) -> None:
        """One metrics.jsonl record, to every tracker that has not received its step."""
        values = scalars(record)
        step = record_step(record)  # an older run's float steps too, replayed on a resume
        if not values or step is None:
            return
        sent = False
        for name, tracker in list(self.open.items()):
            entry = self.state[name]
            if step <= entry["step"]:
                continue
            try:
                tracker.log(values, step)
            except Exception as err:  # noqa: BLE001
                _warn(
                    f"metrics.{name}: logging failed ({type(err).__name__}: {err}); "
                    "training goes on without it"
                )
                del self.open[name]
                continue
            entry["step"] = step
            sent = True
        if sent:
            self._save()

    def close(self) -> None:
        for name, tracker in self.open.items():
            try:
                tracker.close()
            except Exception as err:  # noqa: BLE001
                _warn(f"metrics.{name}: closing failed ({type(err).__name__}: {err})")
        self.open = {}

    def _save(self) -> None:
        write_durably(self.path, (json.dumps(self.state, indent=1) + "\n").encode())


def _read_state(path: Path) -> dict[str, dict[str, Any]]:
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return (
        {
            k: {"id": str(v.get("id") or ""), "step": int(v.get("step") or 0)}
            for k, v in state.items()
            if isinstance(v, dict)
        }
        if isinstance(state, dict)
        else {}
    )


def _warn(message: str) -> None:
    print(f"jzk: {message}", file=sys.stderr, flush=True)
