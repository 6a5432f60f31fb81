"""The settings of the runtime every loop uses (runtime/session.py), declared once.

Their defaults are the schema's (config/schema.py): a session started by hand behaves as a
job with the shipped config does. Under `jzk train|submit job.entry=your_script.py` the
job's own values reach the script's session through one environment variable,
SETTINGS_ENV (JSON), that the script task sets (distributed/script_env.py); a keyword
argument the script gives `session(...)` still wins. Pure: no torch, no os.environ.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import TYPE_CHECKING, Any

from jeanzay_kit.config import schema
from jeanzay_kit.config.collector import Collector
from jeanzay_kit.config.data_rules import DIRECTIONS
from jeanzay_kit.config.run_rules import BACKENDS, SIGNALS
from jeanzay_kit.distributed.script_env import SETTINGS_ENV
from jeanzay_kit.errors import JzkError

if TYPE_CHECKING:  # config/spec.py is the heavier module; only its type is needed here
    from jeanzay_kit.config.spec import JobSpec

# What a session accepts for device (a job's comes from its cluster profile).
DEVICES = ("auto", "cpu", "cuda")

_PARALLEL = schema.ParallelConfig()
_CHECKPOINT = schema.CheckpointConfig()
_PREEMPTION = schema.PreemptionConfig()
_WATCHDOG = schema.WatchdogConfig()
_TUNE = schema.TuneConfig()


@dataclass(frozen=True)
class RuntimeSettings:
    """What the runtime needs besides the launcher's variables; the config key of each is
    in KEYS."""

    device: str = "auto"  # auto | cpu | cuda (a session has no cluster profile: auto)
    backend: str = _PARALLEL.backend
    timeout_minutes: float = float(_PARALLEL.timeout_minutes)
    keep_last: int = _CHECKPOINT.keep_last
    checkpoint_dir: str | None = _CHECKPOINT.dir  # the fast tier's folder (None: run dir)
    allow_config_change: bool = _CHECKPOINT.allow_config_change
    stall_seconds: float = _WATCHDOG.stall_seconds
    heartbeat_seconds: float = _WATCHDOG.heartbeat_seconds
    requeue: bool = _PREEMPTION.requeue
    requeue_signal: str = _PREEMPTION.signal
    term_wait_seconds: float = float(_PREEMPTION.term_wait_seconds)
    objective: str = _TUNE.objective  # the name result.json gives the run's value
    direction: str = _TUNE.direction


# Each setting's config key: what a job sets, and what an error names.
KEYS: dict[str, str] = {
    "device": "cluster.device",
    "backend": "parallel.backend",
    "timeout_minutes": "parallel.timeout_minutes",
    "keep_last": "checkpoint.keep_last",
    "checkpoint_dir": "checkpoint.dir",
    "allow_config_change": "checkpoint.allow_config_change",
    "stall_seconds": "watchdog.stall_seconds",
    "heartbeat_seconds": "watchdog.heartbeat_seconds",
    "requeue": "preemption.requeue",
    "requeue_signal": "preemption.signal",
    "term_wait_seconds": "preemption.term_wait_seconds",
    "objective": "tune.objective",
    "direction": "tune.direction",
}


def from_spec(spec: JobSpec) -> RuntimeSettings:
    """The settings of a validated JobSpec (config/spec.py)."""
    return RuntimeSettings(
        device=spec.cluster.device,
        backend=spec.comm.backend,
        timeout_minutes=float(spec.comm.timeout_minutes),
        keep_last=spec.checkpoint.keep_last,
        checkpoint_dir=spec.checkpoint.dir,
        allow_config_change=spec.checkpoint.allow_config_change,
        stall_seconds=float(spec.watchdog.stall_seconds),
        heartbeat_seconds=float(spec.watchdog.heartbeat_seconds),
        requeue=spec.preemption.requeue,
        requeue_signal=spec.preemption.signal,
        term_wait_seconds=float(spec.preemption.term_wait_seconds),
        objective=spec.tune.objective,
        direction=spec.tune.direction,
    )


def to_env(settings: RuntimeSettings) -> str:
    """SETTINGS_ENV's value."""
    return json.dumps(asdict(settings), sort_keys=True)


# A submitit job (hydra-submitit-launcher, submitit's own executor) is warned of its time
# limit by SUBMITIT_PREEMPT_SIGNAL, USR2 by default (submitit/core/job_environment.py),
# and is marked by SUBMITIT_EXECUTOR in its environment (submitit's sbatch script).
SUBMITIT_EXECUTOR_ENV = "SUBMITIT_EXECUTOR"
SUBMITIT_SIGNAL_ENV = "SUBMITIT_PREEMPT_SIGNAL"


def job_signal(env: Mapping[str, str]) -> str | None:
    """The time-limit signal of the job that runs a session started outside the toolkit:
    submitit's on a submitit Slurm job, so that its warning is a stop-and-requeue, not a
    stop that ends FAILED; None elsewhere (the schema's preemption.signal)."""
    if env.get(SUBMITIT_EXECUTOR_ENV) != "slurm":
        return None
    name = env.get(SUBMITIT_SIGNAL_ENV, "USR2").upper().removeprefix("SIG")
    return name if name in SIGNALS else None


def from_env(env: Mapping[str, str]) -> RuntimeSettings:
    """The job's settings a script task passed on; the defaults without one (with the
    time-limit signal of a submitit job: job_signal). A value the toolkit did not write
    (an older toolkit, a hand-made variable) is refused by name."""
    text = env.get(SETTINGS_ENV)
    if not text:
        signal = job_signal(env)
        return RuntimeSettings() if signal is None else RuntimeSettings(requeue_signal=signal)
    try:
        given = json.loads(text)
    except json.JSONDecodeError as err:
        raise JzkError(f"{SETTINGS_ENV} is not JSON ({err}). HINT: unset it") from None
    known = {f.name for f in fields(RuntimeSettings)}
    unknown = sorted(set(given) - known) if isinstance(given, dict) else ["(not an object)"]
    if unknown:
        raise JzkError(
            f"{SETTINGS_ENV} holds {', '.join(unknown)}, which a session does not know. "
            "HINT: unset it; the toolkit that started the job and this one differ"
        )
    return replace(RuntimeSettings(), **given)


def resolve(job: RuntimeSettings, given: Mapping[str, Any]) -> RuntimeSettings:
    """The job's settings with what the script gave session(...) (its non-None keyword
    arguments) on top. `Any`: a user's script's values, of any type until check() has
    refused a wrong one by its keyword (a user-code boundary)."""
    return replace(job, **{k: v for k, v in given.items() if v is not None})


def check(settings: RuntimeSettings) -> None:
    """Refuse what the job's own validation would refuse (config/run_rules.py), for the
    values a script gave session(...): every problem at once, each naming the keyword,
    its value and the fix (SpecError). The job's values arrive validated already."""
    c = Collector()
    c.choice("device", settings.device, DEVICES)
    c.choice("backend", settings.backend, BACKENDS)
    c.choice("requeue_signal", settings.requeue_signal, SIGNALS)
    c.positive_int("keep_last", settings.keep_last)
    c.number("timeout_minutes", settings.timeout_minutes, 0, low_open=True, example=10)
    c.number("stall_seconds", settings.stall_seconds, 0, example=300)
    c.number("heartbeat_seconds", settings.heartbeat_seconds, 0, low_open=True, example=2)
    c.number("term_wait_seconds", settings.term_wait_seconds, 0, example=300)
    c.flag("requeue", settings.requeue)
    c.flag("allow_config_change", settings.allow_config_change)
    c.choice("direction", settings.direction, DIRECTIONS)
    c.line("objective", settings.objective, "use e.g. objective='eval_accuracy'")
    c.raise_if_any()


def changed(settings: RuntimeSettings) -> str:
    """The settings that differ from the shipped defaults, as `key=value` words by config
    key ("" when none): what a session's first line shows."""
    default = RuntimeSettings()
    return " ".join(
        f"{KEYS[f.name]}={getattr(settings, f.name)}"
        for f in fields(RuntimeSettings)
        if getattr(settings, f.name) != getattr(default, f.name)
    )
