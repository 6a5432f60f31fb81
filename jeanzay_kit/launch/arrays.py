"""A validated JobSpec -> submitit's Slurm parameters, and a sweep -> job arrays. Pure.

The Hydra launcher (hydra_plugins/jeanzay_launcher) composes one JobSpec per sweep point,
then asks this module how to submit them: one job array per resource shape (points that
differ only in training settings share an array), each array at most the cluster's
MaxArraySize long. Nothing here imports submitit or runs a command.

submitit writes its `#SBATCH` values with shlex quoting (single quotes), which sbatch
does not understand (it reads double quotes only, src/sbatch/opt.c); values that would
need quoting are refused here with a hint, instead of reaching Slurm misread.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from jeanzay_kit.config.spec import JobSpec
from jeanzay_kit.errors import LaunchError, RenderError
from jeanzay_kit.launch.app_rules import AppRequest
from jeanzay_kit.slurm.flags import sbatch_flags
from jeanzay_kit.slurm.sbatch import array_gate_lines, is_plain, setup_lines


@dataclass(frozen=True)
class SweepPoint:
    """One run of a sweep: its Hydra job number, overrides, run directory and spec."""

    num: int
    overrides: tuple[str, ...]
    run_dir: str
    spec: JobSpec
    # A Hydra app of yours (hydra/launcher=jeanzay in your @hydra.main): its launcher
    # keys, translated (launch/app_rules.py); None: the toolkit's trainer.
    app: AppRequest | None = None


@dataclass(frozen=True)
class ArrayPlan:
    """One `sbatch --array` call: points with the same resource shape."""

    parameters: dict[str, object]
    python: str
    points: tuple[SweepPoint, ...]
    # submitit's requeues after a time limit (an app's max_num_timeout; preemptions are
    # always requeued). The toolkit's trainer requeues itself: 0.
    max_num_timeout: int = 0


def _plain(key: str, value: object) -> str:
    text = str(value)
    if not is_plain(text):
        raise LaunchError(
            f"{key}={text!r} cannot go through submitit's #SBATCH quoting (sbatch would "
            "misread it). HINT: use letters, digits and _.:@%/+=,- only, or submit with "
            "`jzk submit`, which quotes any value the way sbatch reads it"
        )
    return text


def _setup(spec: JobSpec, code_dir: str | None) -> list[str]:
    # The same lines as the rendered script runs before srun, and the step's start: the
    # tasks of a script task decide alike whether they resume (node/script_task.py).
    try:
        return [*setup_lines(spec, code_dir), "export JZK_STEP_START=$(date +%s)"]
    except RenderError as err:
        raise LaunchError(str(err)) from err


# sbatch options that submitit.SlurmExecutor takes as named parameters (dashes -> _).
_NUMBERS = {"nodes", "ntasks-per-node", "cpus-per-task", "gpus-per-node"}
_NAMED = {"job-name", "partition", "account", "constraint", "qos", "mem", "gres"}


def submitit_parameters(
    spec: JobSpec, array_parallelism: int = 256, code_dir: str | None = None
) -> dict[str, object]:
    """Keyword arguments for submitit.SlurmExecutor.update_parameters; code_dir: the
    snapshot of the project's code the tasks import from."""
    if spec.layout.launcher != "srun":
        raise LaunchError(
            f"parallel.launcher={spec.layout.launcher!r}: the jeanzay launcher starts one "
            "task per GPU with srun. HINT: use parallel.launcher=srun, or `jzk submit` for "
            "torchrun"
        )
    if spec.job.container is not None:
        raise LaunchError(
            f"job.container.image={spec.job.container.image!r}: the jeanzay launcher runs "
            "submitit in each task, which requeues with scontrol, absent from an image. "
            "HINT: submit each run with `jzk submit` (or `jzk render --array`), whose "
            "script requeues from outside the container"
        )
    params: dict[str, object] = {
        "signal_delay_s": spec.preemption.lead_seconds,
        "array_parallelism": array_parallelism,
        "setup": _setup(spec, code_dir),
        # One failed task ends the step instead of leaving the others in a collective.
        "srun_args": ["--kill-on-bad-exit=1", *spec.job.srun_args],
    }
    named, extra = _flag_parameters(spec, skip=())
    params.update(named)
    params["additional_parameters"] = extra
    return params


def _flag_parameters(
    spec: JobSpec, skip: Sequence[str]
) -> tuple[dict[str, object], dict[str, object]]:
    """The same options as the rendered script (slurm/flags.py): submitit's named
    parameters where it has one (it writes its own default otherwise), the rest as
    additional parameters (signal, requeue, hint). skip: options left to submitit."""
    params: dict[str, object] = {}
    extra: dict[str, object] = {}
    for flag in sbatch_flags(spec):
        if flag.name in skip:
            continue
        if flag.name == "time":
            params["time"] = spec.resources.time_minutes  # submitit takes minutes
        elif flag.name in _NUMBERS:
            params[flag.name.replace("-", "_")] = int(flag.value or 0)
        elif flag.value is None:
            extra[flag.name] = True
        elif flag.name in _NAMED:
            params[flag.name.replace("-", "_")] = _plain(flag.key, flag.value)
        else:
            extra[flag.name] = _plain(flag.key, flag.value)
    return params, extra


def app_parameters(
    spec: JobSpec,
    extra: Mapping[str, object],
    array_parallelism: int = 256,
    code_dir: str | None = None,
) -> dict[str, object]:
    """submitit's parameters for a Hydra app of yours (launch/app_rules.py): the
    validated spec's request, submitit's own time-limit signal (SUBMITIT_PREEMPT_SIGNAL
    at signal_delay_s, the one signal each task gets: submitit's handler checkpoints and
    requeues), and the keys only the submission needs (`extra`: comment, exclude,
    setup, srun_args, additional_parameters, stderr_to_stdout)."""
    params: dict[str, object] = {
        "signal_delay_s": spec.preemption.lead_seconds,
        "array_parallelism": array_parallelism,
        "setup": [*_setup(spec, code_dir), *_strings(extra.get("setup"))],
        "srun_args": ["--kill-on-bad-exit=1", *_strings(extra.get("srun_args"))],
        "stderr_to_stdout": bool(extra.get("stderr_to_stdout", False)),
    }
    named, additional = _flag_parameters(spec, skip=("signal",))
    params.update(named)
    for key in ("comment", "exclude"):
        if key in extra:
            params[key] = _plain(f"hydra.launcher.{key}", extra[key])
    pairs = extra.get("additional_parameters", ())
    for name, value in pairs if isinstance(pairs, tuple) else ():
        where = f"hydra.launcher.additional_parameters.{name}"
        additional[name] = value if isinstance(value, bool) else _plain(where, value)
    params["additional_parameters"] = additional
    return params


def _strings(value: object) -> list[str]:
    return [str(v) for v in value] if isinstance(value, (list, tuple)) else []


def plan_arrays(
    points: Sequence[SweepPoint],
    max_array_size: int,
    array_parallelism: int = 256,
    code_dir: str | None = None,
) -> list[ArrayPlan]:
    """Group points by identical submission parameters, keep sweep order, chunk each
    group to `max_array_size` tasks (Slurm's MaxArraySize: indices 0..size-1)."""
    if max_array_size < 1:
        raise LaunchError(f"cluster.max_array_size={max_array_size} must be at least 1")
    groups: dict[str, tuple[dict[str, object], str, int, list[SweepPoint]]] = {}
    for point in points:
        if point.app is None:
            params = submitit_parameters(point.spec, array_parallelism, code_dir)
            timeouts = 0
        else:
            params = app_parameters(point.spec, point.app.extra_dict, array_parallelism, code_dir)
            timeouts = point.app.max_num_timeout
        gate = point.spec.watchdog.health_gate
        key = f"{sorted(params.items())!r}\0{point.spec.job.python}\0{timeouts}\0{gate}"
        groups.setdefault(key, (params, point.spec.job.python, timeouts, []))[3].append(point)
    plans = []
    for params, python, timeouts, members in groups.values():
        for start in range(0, len(members), max_array_size):
            chunk = tuple(members[start : start + max_array_size])
            plans.append(ArrayPlan(_gated(params, chunk), python, chunk, timeouts))
    return plans


def _gated(params: dict[str, object], chunk: Sequence[SweepPoint]) -> dict[str, object]:
    """The health gate (watchdog.health_gate) before each array task trains, as in a
    rendered script: a broken node is left out and the task requeued, no restart spent."""
    spec = chunk[0].spec
    if not spec.watchdog.health_gate:
        return params
    gate = array_gate_lines(spec, [p.run_dir for p in chunk])
    return {**params, "setup": [*_strings(params.get("setup")), *gate]}
