"""What a job asks of Slurm, decided once for both submit paths. Pure.

`sbatch_flags(spec)` lists the sbatch options of a validated JobSpec: the rendered script
(slurm/sbatch.py) writes them as `#SBATCH` lines, the jeanzay launcher
(launch/arrays.py) hands them to submitit. A test renders both and checks that they ask
for the same thing (tests/unit/test_launch.py). The options only one path needs (log
files, --chdir, --array of a rendered script; submitit's own files) stay with that path.
"""

from __future__ import annotations

from dataclasses import dataclass

from jeanzay_kit.config.spec import JobSpec


@dataclass(frozen=True)
class SbatchFlag:
    name: str  # sbatch's long option without dashes, e.g. "cpus-per-task"
    value: str | None  # None: a switch such as --requeue
    key: str  # the config key that sets it, for error messages


def sbatch_flags(spec: JobSpec) -> list[SbatchFlag]:
    """sbatch's options for `spec`, in the order the rendered script writes them."""
    flags = [SbatchFlag("job-name", spec.job.name, "job.name")]
    if spec.resources.account:
        flags.append(SbatchFlag("account", spec.resources.account, "cluster.account"))
    if spec.cluster.is_slurm and spec.resources.partition.select == "partition":
        flags.append(SbatchFlag("partition", spec.resources.partition.name, "resources.partition"))
    if spec.resources.constraint:
        flags.append(SbatchFlag("constraint", spec.resources.constraint, "resources.constraint"))
    if spec.resources.qos:
        flags.append(SbatchFlag("qos", spec.resources.qos, "resources.qos"))
    flags.append(SbatchFlag("nodes", str(spec.resources.nodes), "resources.nodes"))
    flags.append(
        SbatchFlag("ntasks-per-node", str(spec.resources.ntasks_per_node), "parallel.launcher")
    )
    gpu_flag = _gpu_flag(spec)
    if gpu_flag is not None:
        flags.append(gpu_flag)
    flags.append(
        SbatchFlag("cpus-per-task", str(spec.resources.cpus_per_task), "resources.cpus_per_task")
    )
    if spec.resources.mem:
        flags.append(SbatchFlag("mem", spec.resources.mem, "resources.mem"))
    if spec.cluster.hint:
        flags.append(SbatchFlag("hint", spec.cluster.hint, "cluster.hint"))
    flags.append(SbatchFlag("time", spec.resources.time, "resources.time"))
    if spec.resources.time_min:
        flags.append(SbatchFlag("time-min", spec.resources.time_min, "resources.time_min"))
    if spec.job.dependency:
        flags.append(SbatchFlag("dependency", spec.job.dependency, "job.dependency"))
    for arg in spec.job.sbatch_args:  # validated: long options the toolkit does not own
        name, sep, value = arg[2:].partition("=")
        flags.append(SbatchFlag(name, value if sep else None, "job.sbatch_args"))
    # No "B:" prefix: the signal goes to every task of every step (the training
    # processes), not to the batch shell; the ranks save at the next step boundary.
    flags.append(
        SbatchFlag(
            "signal",
            f"{spec.preemption.signal}@{spec.preemption.lead_seconds}",
            "preemption.signal",
        )
    )
    flags.append(
        SbatchFlag(
            "requeue" if spec.preemption.requeue else "no-requeue", None, "preemption.requeue"
        )
    )
    return flags


def _gpu_flag(spec: JobSpec) -> SbatchFlag | None:
    """--gres=gpu:N or --gpus-per-node=N; none on a partition without GPUs (prepost,
    cpu_p1), whose tasks are CPU processes."""
    gpn, key = str(spec.resources.gpus_per_node), "resources.gpus_per_node"
    if spec.resources.partition.cpu_only:
        return None
    if spec.cluster.gpu_request == "gpus":
        return SbatchFlag("gpus-per-node", gpn, key)
    return SbatchFlag("gres", f"gpu:{gpn}", key)
