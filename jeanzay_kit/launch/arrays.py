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

from collections.abc import Sequence
from dataclasses import dataclass

from jeanzay_kit.config.spec import JobSpec
from jeanzay_kit.errors import LaunchError, RenderError
from jeanzay_kit.slurm.flags import sbatch_flags
from jeanzay_kit.slurm.sbatch import is_plain, setup_lines


@dataclass(frozen=True)
class SweepPoint:
    """One run of a sweep: its Hydra job number, overrides, run directory and spec."""

    num: int
    overrides: tuple[str, ...]
    run_dir: str
    spec: JobSpec


@dataclass(frozen=True)
class ArrayPlan:
    """One `sbatch --array` call: points with the same resource shape."""

    parameters: dict[str, object]
    python: str
    points: tuple[SweepPoint, ...]


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
    extra: dict[str, object] = {}
    # The same options as the rendered script (slurm/flags.py): submitit's named
    # parameters where it has one (it writes its own default otherwise), the rest as
    # additional parameters (signal, requeue, hint).
    for flag in sbatch_flags(spec):
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
    params["additional_parameters"] = extra
    return params


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
    groups: dict[str, tuple[dict[str, object], str, list[SweepPoint]]] = {}
    for point in points:
        params = submitit_parameters(point.spec, array_parallelism, code_dir)
        key = repr(sorted(params.items())) + "\0" + point.spec.job.python
        groups.setdefault(key, (params, point.spec.job.python, []))[2].append(point)
    plans = []
    for params, python, members in groups.values():
        for start in range(0, len(members), max_array_size):
            chunk = tuple(members[start : start + max_array_size])
            plans.append(ArrayPlan(parameters=params, python=python, points=chunk))
    return plans
