"""`jzk doctor`: check a job's ranks (rank table, timed all-reduce, bandwidth per rank)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from jeanzay_kit.cli.common import add_config_args, build_spec, render, workdir_of
from jeanzay_kit.config.spec import JobSpec
from jeanzay_kit.errors import JzkError

if TYPE_CHECKING:  # the doctor imports torch.multiprocessing: only when it runs
    from jeanzay_kit.doctor.launch import DoctorOptions


def add(sub: argparse._SubParsersAction) -> None:
    doctor = sub.add_parser(
        "doctor",
        help="check a job's ranks: rank table, a timed all-reduce, bandwidth per rank",
        description="Start the world of the config (resources.nodes x "
        "resources.gpus_per_node) and, on every rank: check in with the master, print a "
        "table (host, rank, local rank, visible devices, CPU affinity, master address and "
        "port), run one small all-reduce that names the rank that does not answer within "
        "--timeout, and an all-reduce bus bandwidth per rank, flagging a rank under 0.7x "
        "the median. Rank 0 first says torch's version against the range jeanzay_kit was "
        "tested with, and outside it how to go back. Locally (cluster=local) the ranks are "
        "processes here; with --submit the rendered script runs them as a Slurm job step. "
        "Exit 0: every rank answered.",
    )
    doctor.add_argument(
        "--submit", action="store_true", help="render and sbatch it on the Slurm profile"
    )
    doctor.add_argument(
        "--wait", action="store_true", help="with --submit: wait for the job, print its log"
    )
    doctor.add_argument(
        "--timeout", type=float, default=60.0, metavar="S", help="seconds a rank may be silent"
    )
    doctor.add_argument(
        "--size-mb", type=float, default=16.0, metavar="M", help="bandwidth test size (MiB)"
    )
    add_config_args(doctor)
    doctor.set_defaults(run=run)


DOCTOR_DEFAULTS = ("resources.time=00:10:00", "preemption.requeue=false")


def run(args: argparse.Namespace) -> int:
    from jeanzay_kit.doctor.launch import DoctorOptions, doctor_local

    options = DoctorOptions(timeout_s=args.timeout, size_mb=args.size_mb)
    if not args.submit:
        spec = build_spec(args)
        if spec.cluster.is_slurm:
            raise JzkError(
                f"cluster={spec.cluster.name} is a Slurm profile. HINT: `jzk doctor --submit "
                f"cluster={spec.cluster.name} ...` runs it as a job (add --wait to see its "
                "table), or inside an allocation: srun python -m jeanzay_kit.doctor "
                f"cluster={spec.cluster.name} ..."
            )
        return doctor_local(spec, options)
    args.overrides = [*DOCTOR_DEFAULTS, *args.overrides]
    spec = build_spec(args)
    if not spec.cluster.is_slurm:
        raise JzkError(
            f"cluster={spec.cluster.name} is not a Slurm cluster: nothing to submit. HINT: "
            "drop --submit to run the doctor here"
        )
    return _submit_doctor(spec, args, options)


def _submit_doctor(spec: JobSpec, args: argparse.Namespace, options: DoctorOptions) -> int:
    import dataclasses

    from jeanzay_kit.doctor.probe import HEALTHY
    from jeanzay_kit.slurm.commands import sbatch, wait_until_gone

    spec = dataclasses.replace(
        spec, job=dataclasses.replace(spec.job, name=f"{spec.job.name}-doctor")
    )
    workdir = workdir_of(spec)
    command = ["-m", "jeanzay_kit.doctor", f"--timeout={options.timeout_s:g}"]
    command.append(f"--size-mb={options.size_mb:g}")
    rendered_by = [o for o in args.overrides if o not in DOCTOR_DEFAULTS]
    script = render(spec, rendered_by, command=command, rerender="jzk doctor --submit")
    log_dir = workdir / spec.job.log_dir
    path = log_dir / f"{spec.job.name}.sbatch"
    path.write_text(script)
    job_id = sbatch(str(path.resolve()), cwd=str(workdir))
    out = log_dir / f"{spec.job.name}-{job_id}.out"
    print(f"submitted doctor job {job_id} ({path}); its table goes to {out}")
    if not args.wait:
        return 0
    wait_until_gone(job_id, timeout_s=spec.resources.time_minutes * 60 + 300)
    text = out.read_text() if out.exists() else ""
    err_path = out.with_suffix(".err")
    errors = err_path.read_text() if err_path.exists() else ""
    sys.stdout.write("\n" + text)
    if errors.strip():
        sys.stderr.write(errors)
    return 0 if HEALTHY in text else 1
