"""`jzk validate`: check a request against the cluster profile and show what it resolves to."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from jeanzay_kit.cli.common import (
    add_config_args,
    ask_slurm,
    build_spec,
    check_script_run,
    refuse_hydra_dirs,
    run_dir_of,
    workdir_of,
)
from jeanzay_kit.config.spec import JobSpec
from jeanzay_kit.errors import JzkError
from jeanzay_kit.slurm_syntax.timefmt import format_time
from jeanzay_kit.values import expand_vars


def add(sub: argparse._SubParsersAction) -> None:
    validate = sub.add_parser(
        "validate",
        help="check a request against the cluster profile and show what it resolves to",
        description="Compose the config with the overrides, check it against the cluster "
        "profile and print the resolved request, or the problems (exit code 2).",
    )
    validate.add_argument(
        "--slurm",
        action="store_true",
        help="also ask Slurm: run `sbatch --test-only` on the rendered script (submits nothing)",
    )
    validate.add_argument(
        "--sizes",
        action="store_true",
        help="also count the model's parameters (builds it on torch's meta device: no "
        "memory, a few seconds) for the bytes a checkpoint takes",
    )
    validate.add_argument(
        "-m",
        "--multirun",
        action="store_true",
        help="the overrides are a sweep (key=a,b, range(...)), as `python train.py -m`: "
        "check every point and state the sweep's GPU-hour ceiling",
    )
    add_config_args(validate)
    validate.set_defaults(run=run)


def describe_spec(spec: JobSpec) -> str:
    """The resolved request as a two-column table: for a script task (job.entry your own
    command) what the script gets, not the toolkit loop's settings it never reads."""
    how = _script_rows(spec) if spec.job.runs_script else _how_rows(spec)
    rows = _where_rows(spec) + how
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def _where_rows(spec: JobSpec) -> list[tuple[str, str]]:
    """Where the job runs and what it asks Slurm for."""
    lay, res, slurm = spec.layout, spec.resources, spec.cluster.is_slurm
    part = res.partition
    select = (
        f"selected with -C {res.constraint}"
        if part.select == "constraint"
        else f"constraint {res.constraint}"
        if res.constraint
        else ""
    )
    launch = (
        "local worker processes"
        if not slurm
        else "torchrun, one task per node"
        if lay.launcher == "torchrun"
        else "one process driving every GPU"
        if lay.mode == "dataparallel"
        else "srun, one CPU process per task"
        if part.cpu_only
        else "srun, one task per GPU"
    )
    qos = res.qos or "(site default)"
    if spec.cluster.qos and "resources.qos" in spec.auto_keys:
        qos += f"  (auto: shortest QoS that fits {res.time})"
    return [
        ("cluster", f"{spec.cluster.name}  ({spec.cluster.description})"),
        ("account", res.account or "-"),
        ("partition", f"{part.name}  {select}".rstrip() if slurm else "-"),
        ("qos", qos if slurm else "-"),
        ("nodes", str(res.nodes)),
        (
            ("gpus per node", f"{res.gpus_per_node}  ({res.total_gpus} in all)")
            if not part.cpu_only
            else ("gpus per node", f"none: partition {part.name} has no GPUs (CPU processes, gloo)")
        ),
        ("tasks per node", f"{res.ntasks_per_node}  ({launch})"),
        ("cpus per task", f"{res.cpus_per_task}  (OMP_NUM_THREADS={spec.omp_num_threads})"),
        ("time", res.time if slurm else format_time(res.time_minutes)),
        *(_interpreter_rows(spec) if slurm else []),
    ]


def _interpreter_rows(spec: JobSpec) -> list[tuple[str, str]]:
    """What each task runs its Python with: the modules first, then the interpreter."""
    modules = spec.loaded_modules
    loads = ("module purge; " if spec.cluster.module_purge else "") + (
        f"module load {' '.join(modules)}" if modules else ""
    )
    asked = "auto" if "job.python" in spec.auto_keys else spec.job.python
    why = (
        "job.python=auto: the profile's PyTorch module's"
        if asked == "auto" and spec.cluster.pytorch_module
        else "job.python=auto: the image's, first on its PATH"
        if asked == "auto" and spec.job.container
        else "job.python=auto: the one running jzk now"
        if asked == "auto"
        else "job.python"
    )
    return [
        ("modules", loads.strip().rstrip(";") or "- (none loaded)"),
        *_container_rows(spec),
        ("interpreter", f"{spec.job.python}  ({why})"),
    ]


def _container_rows(spec: JobSpec) -> list[tuple[str, str]]:
    box = spec.job.container
    if box is None:
        return []
    from jeanzay_kit.slurm.container import gpu_options

    binds = [*spec.cluster.container_binds, "the job's folders", *box.binds]
    return [
        ("container", " ".join([box.runtime, "exec", *gpu_options(spec), *box.options, box.image])),
        ("binds", ", ".join(binds) + "  (a default this node lacks is left out)"),
        ("requeue", "scontrol in the batch shell, outside the container"),
    ]


def container_warning(spec: JobSpec, env: Mapping[str, str]) -> str | None:
    """On a site whose images must be registered (Jean Zay: $SINGULARITY_ALLOWED_DIR,
    `idrcontmgr cp`): an image elsewhere does not start. Checked with this shell's
    variables, as the node expands them."""
    box, allowed = spec.job.container, spec.cluster.container_allowed_dir
    if box is None or allowed is None:
        return None
    image, folder = expand_vars(box.image, env), expand_vars(allowed, env)
    if "$" not in folder and Path(image).resolve().is_relative_to(Path(folder).resolve()):
        return None
    name = Path(image).name
    return (
        f"WARNING: job.container.image={box.image} is not under {allowed} "
        f"({folder if '$' not in folder else 'not set here'}): {spec.cluster.name} runs "
        "only images registered there. HINT: `idrcontmgr cp "
        f"{image}`, then job.container.image='{allowed}/{name}'"
    )


def interpreter_warning(spec: JobSpec) -> str | None:
    """A bare interpreter name after `module purge` with no PyTorch module: the node's
    PATH decides which Python runs, rarely the one the user installed into."""
    python = spec.job.python
    if not spec.cluster.is_slurm or "/" in python or spec.cluster.pytorch_module:
        return None
    if spec.job.container is not None:  # the image's python: purge does not reach it
        return None
    if not (spec.cluster.module_purge or spec.cluster.modules):
        return None
    return (
        f"WARNING: job.python={python} after `module purge` with no PyTorch module "
        "(cluster.pytorch_module=null): the tasks run whichever python comes first on "
        "the node's PATH then, not necessarily the environment you installed into. "
        "HINT: job.python=auto (the interpreter running jzk, an absolute path), an "
        "absolute path, or cluster.pytorch_module=pytorch-gpu/py3/<version>"
    )


def _how_rows(spec: JobSpec) -> list[tuple[str, str]]:
    """How it trains, stops and where it writes."""
    lay, tset = spec.layout, spec.train
    pipeline = f", {lay.microbatches} micro-batches, {lay.schedule}" if lay.pipeline_enabled else ""
    auto = "  (decided by the hardware at run time)" if tset.precision == "auto" else ""
    return [
        (
            "parallel",
            f"{lay.mode}: world size {lay.world_size} = {lay.dp_size} data-parallel "
            f"x {lay.pp_size} pipeline{pipeline}",
        ),
        (
            "batch",
            f"global {tset.global_batch_size} = {lay.dp_size} replica(s) x micro "
            f"{tset.micro_batch_size} x {tset.grad_accum_steps} accumulation step(s)"
            + (
                " (train.global_batch_size=auto: micro x replicas, at least 32; set a "
                "number to keep it on another number of GPUs)"
                if tset.global_batch_auto
                else ""
            ),
        ),
        ("precision", tset.precision + auto),
        (
            "preemption",
            f"SIG{spec.preemption.signal} {spec.preemption.lead_seconds} s before the time limit, "
            + ("requeue" if spec.preemption.requeue else "no requeue"),
        ),
        ("loader", _describe_loader(spec)),
        ("loss", _describe_loss(spec)),
        ("job name", spec.job.name),
        ("run dir", spec.checkpoint.run_dir),
    ]


def _script_rows(spec: JobSpec) -> list[tuple[str, str]]:
    """A script task: its command, its processes, what each one finds in its environment,
    and what a stop does to it (node/script_task.py, distributed/script_env.py)."""
    from jeanzay_kit.distributed.script_env import script_argv

    res, pre, job = spec.resources, spec.preemption, spec.job
    command = " ".join(script_argv(job.python, job.entry, job.args))
    per_node = res.ntasks_per_node if spec.layout.launcher == "srun" else res.gpus_per_node
    world = res.nodes * per_node
    unit = "CPU process" if res.partition.cpu_only else "one per GPU"
    resume = " ".join(job.resume_args) or "- (job.resume_args empty)"
    return [
        ("script", command),
        (
            "processes",
            f"{world} = {res.nodes} node(s) x {per_node} ({unit}, {spec.layout.launcher})",
        ),
        (
            "each gets",
            f"RANK, LOCAL_RANK, WORLD_SIZE={world}, LOCAL_WORLD_SIZE={per_node}, MASTER_ADDR, "
            "MASTER_PORT (torchrun's variables), JZK_RUN_DIR; it runs in <run dir>/cwd",
        ),
        (
            "on a stop",
            f"SIG{pre.signal} {pre.lead_seconds} s before the time limit reaches the script; "
            + (
                "exit 3 (or dying of it) requeues the job"
                if pre.requeue
                else "no requeue (preemption.requeue=false)"
            ),
        ),
        ("resumes with", resume),
        *_hydra_app_rows(spec),
        ("job name", job.name),
        ("run dir", spec.checkpoint.run_dir),
    ]


def _hydra_app_rows(spec: JobSpec) -> list[tuple[str, str]]:
    """A script that is a Hydra app: where its output directory is (script/hydra_app_rules.py)."""
    from pathlib import Path

    from jeanzay_kit.script.entry import hydra_job, script_command
    from jeanzay_kit.script.hydra_app_rules import RUN_DIR_KEY, given_value

    if hydra_job(script_command(spec), Path(spec.job.workdir or Path.cwd())) is None:
        return []
    theirs = given_value(spec.job.args, RUN_DIR_KEY)
    where = (
        f"{theirs} ({RUN_DIR_KEY} in job.args)"
        if theirs is not None
        else f"<run dir>/cwd at every start ({RUN_DIR_KEY} added after job.args)"
    )
    return [("hydra app", f"its output directory is {where}")]


def _describe_loader(spec: JobSpec) -> str:
    loader = spec.loader
    if loader.num_workers is None:
        workers = "auto (the CPUs of each process, minus one)"
    else:
        auto = "auto: " if "loader.num_workers" not in _explicit(spec) else ""
        cpus = f", {loader.cpus_per_process} CPU(s) each" if loader.cpus_per_process else ""
        workers = f"{auto}{loader.num_workers} per training process{cpus}"
    pin = {None: "auto (on CUDA)", True: "true", False: "false"}[loader.pin_memory]
    prefetch = loader.prefetch_factor or "one step's worth"
    collate = (loader.collate_fn or {}).get("_target_", "torch's default_collate")
    return f"workers {workers}; pin_memory {pin}; prefetch {prefetch}; collate {collate}"


def _explicit(spec: JobSpec) -> set[str]:
    return set() if "loader.num_workers" in spec.auto_keys else {"loader.num_workers"}


def _describe_loss(spec: JobSpec) -> str:
    loss = spec.loss
    if loss.form == "criterion" and loss.criterion:
        key = f", target loss.target_key={loss.target_key}" if loss.target_key else ""
        return f"criterion(output, target): {loss.criterion.get('_target_')}{key}"
    return {
        "output": "the loss the model returns (tensor, .loss or ['loss'])",
        "model": "model.loss(output, target)",
    }[loss.form]


def tracker_lines(spec: JobSpec, installed: Callable[[str], bool]) -> list[str]:
    """What the trackers record and where, and a warning for a package this Python lacks
    (the job's may differ: a container, another environment; the run says so again)."""
    met, lines = spec.metrics, []
    if met.wandb:
        project = met.wandb_project or spec.job.name
        where = (
            "<run_dir>/wandb, then the printed `wandb sync` on a login node"
            if met.wandb_mode == "offline"
            else "sent as it runs"
        )
        lines.append(f"tracker: W&B project {project}, {met.wandb_mode} ({where})")
    if met.mlflow:
        lines.append(f"tracker: MLflow {met.mlflow_uri or '<run_dir>/mlruns (file store)'}")
    for name, on in (("wandb", met.wandb), ("mlflow", met.mlflow)):
        if on and not installed(name) and spec.job.container is None:
            lines.append(
                f"WARNING: metrics.{name}=true but {name} is not installed here; the run "
                "goes on without it. HINT: pip install 'jeanzay_kit[trackers]'"
            )
    return lines


def _installed(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def _print_snapshot(spec: JobSpec, workdir: Path) -> tuple[int, int]:
    """What `jzk submit` would freeze of the project: files count against the inode
    quota of $WORK (identical code shares one snapshot). Returns (files, bytes)."""
    from jeanzay_kit.project.job_code import snapshot_plan

    planned = snapshot_plan(spec, workdir)
    if planned is None:
        return 0, 0
    plan, source = planned
    print(
        f"code snapshot: {plan.summary(f'{spec.job.log_dir}/code/<hash>/')}, of {source}'s "
        "files, once per distinct code"
    )
    return plan.frozen_part.files, plan.frozen_part.bytes


def _print_footprint(spec: JobSpec, snapshot: tuple[int, int], sizes: bool) -> None:
    """The files and bytes the job adds (launch/footprint.py), then the site's own quota
    report where its command exists (Jean Zay: idr_quota_user)."""
    import shutil
    import subprocess

    from jeanzay_kit.launch.footprint import Footprint, describe
    from jeanzay_kit.launch.storage import writer_threads_of

    footprint = Footprint(
        runs=1,
        ranks=spec.layout.world_size,
        keep_last=spec.checkpoint.keep_last,
        snapshot_files=snapshot[0],
        checkpoint_bytes=_newest_checkpoint_bytes(run_dir_of(spec).checkpoints),
        params=_count_params(spec) if sizes else None,
        optimizer_states=1 if spec.optim.name == "sgd" else 2,  # momentum; AdamW: 2
        writer_threads=writer_threads_of(spec),
    )
    for line in describe(footprint):
        print(line)
    _check_storage(spec, workdir_of(spec), snapshot, footprint.estimated_checkpoint_bytes)
    quota = shutil.which("idr_quota_user")
    if quota:
        done = subprocess.run([quota], capture_output=True, text=True, timeout=30)
        print(f"$ idr_quota_user\n{done.stdout.rstrip()}")


def _check_storage(
    spec: JobSpec,
    workdir: Path,
    snapshot: tuple[int, int],
    checkpoint_bytes: int | None,
    runs: int = 1,
) -> None:
    """Per filesystem, what the request writes and what is left (launch/storage.py);
    refused as `jzk submit` would refuse it."""
    from jeanzay_kit.launch.storage import check_storage, request_of, storage_lines

    env = dict(os.environ)
    request = request_of(spec, workdir, env, runs, snapshot, checkpoint_bytes)
    for line in storage_lines(request, spec, env):
        print(line)
    check_storage(request, spec, env)


def _newest_checkpoint_bytes(folder: Path) -> int | None:
    """The bytes of the newest complete checkpoint (manifest.json present), if any."""
    complete = [d for d in folder.glob("step-*") if (d / "manifest.json").is_file()]
    if not complete:
        return None
    newest = max(complete, key=lambda d: int(d.name.split("-")[1]))
    return sum(f.stat().st_size for f in newest.rglob("*") if f.is_file())


def _count_params(spec: JobSpec) -> int | None:
    """The model's parameters, built on the meta device (no memory is allocated)."""
    import torch
    from hydra.utils import instantiate

    try:
        with torch.device("meta"):
            model = instantiate(dict(spec.model))
        return sum(p.numel() for p in model.parameters())
    except Exception as err:  # noqa: BLE001  # a model that cannot be built on meta
        print(f"note: --sizes could not build the model on the meta device ({err})")
        return None


def _fit_line(spec: JobSpec, overrides: list[str], config_dir: str | None) -> str | None:
    """The plan's per-GPU estimate (spec_of checked it already: from the cache here)."""
    from jeanzay_kit.launch.fit_check import check
    from jeanzay_kit.launch.request import spec_of

    fit = check(spec, overrides, lambda more: spec_of(more, config_dir, fit=False), os.environ)
    return fit.line() if fit else None


def run_sweep(args: argparse.Namespace) -> int:
    """Each point checked (the first shown in full), then the ceiling: points x GPUs x time.

    Points are composed once per distinct group choice (launch/point_configs.py: the
    launcher's way), each checked as `jzk validate` checks one request, the fit check
    asked once a point (its answer kept on disk by the whole config: launch/fit_check.py)."""
    from jeanzay_kit.launch.allocation import charged_gpus
    from jeanzay_kit.launch.point_configs import sweep_compositions
    from jeanzay_kit.launch.sweep_points import ceiling_gpu_hours, sweep_points

    refuse_hydra_dirs(args.overrides)
    points = sweep_points(args.overrides)
    first, shapes, fits, bad = None, [], [], 0
    with sweep_compositions(args.config_dir):
        for number, point in enumerate(points):
            try:
                spec, fit = _checked_point(point, args.config_dir)
            except JzkError as err:  # every bad point said, as the launcher lists them
                print(f"point {number} of {len(points)}: {' '.join(point)}", file=sys.stderr)
                print(f"  {err}", file=sys.stderr)
                bad += 1
                continue
            first = first or spec
            shapes.append((charged_gpus(spec), spec.resources.time_minutes))
            if fit:
                fits.append(f"point {number}: {fit.split(maxsplit=2)[2]}")
    if bad:
        raise JzkError(
            f"{bad} of {len(points)} sweep point(s) fail the checks above: nothing of the sweep "
            "is valid until each is fixed"
        )
    assert first is not None  # a sweep has one point at least
    print(describe_spec(first))
    for line in fits:
        print(line)
    ceiling = ceiling_gpu_hours(shapes)
    print(f"\nsweep           {len(points)} point(s), each checked; the first is shown above")
    print(
        f"ceiling         {ceiling:,.1f} GPU hours if every point runs to its time limit "
        "(points x GPUs x resources.time; requeues add to it)"
    )
    _allocation(first, ceiling)
    from jeanzay_kit.project.job_code import snapshot_footprint

    workdir = workdir_of(first)
    _check_storage(first, workdir, snapshot_footprint(first, workdir), None, len(points))
    print("\nOK: every point fits the profile.")
    return 0


def _allocation(spec: JobSpec, hours: float) -> None:
    """What the request takes of the allocation left (cluster.allocation), refused past it
    as `jzk submit` would refuse it; nothing without a declared allocation."""
    from jeanzay_kit.launch.allocation import check_request

    if spec.cluster.allocation_hours is not None:
        check_request(spec, hours)


def _checked_point(point: list[str], config_dir: str | None) -> tuple[JobSpec, str | None]:
    """The point's request as spec_of checks it, and its fit line (the fit check once,
    where spec_of and _fit_line would each ask it)."""
    from jeanzay_kit.launch.request import spec_of

    spec = spec_of(point, config_dir, fit=False)
    return spec, _fit_line(spec, point, config_dir)


def run(args: argparse.Namespace) -> int:
    if args.multirun:
        return run_sweep(args)
    spec = build_spec(args)
    if getattr(args, "on", None):  # laptop mode: checked here, then there (--slurm)
        print(describe_spec(spec))
        from jeanzay_kit.cli.remote import run_there

        return run_there(args, spec)
    print(describe_spec(spec))
    for note in spec.notes:
        print(f"note: {note}")
    for warning in (interpreter_warning(spec), container_warning(spec, os.environ)):
        if warning:
            print(warning)
    for line in tracker_lines(spec, _installed):
        print(line)
    workdir = workdir_of(spec)
    check_script_run(spec, workdir)
    snapshot = _print_snapshot(spec, workdir)
    if not spec.job.runs_script:
        _print_footprint(spec, snapshot, args.sizes)
    else:  # a script's run: counted as submit counts it (snapshot, logs, saves at most)
        _check_storage(spec, workdir, snapshot, None)
    fit = _fit_line(spec, args.overrides, args.config_dir)
    if fit:
        print(fit)
    _allocation(spec, spec.resources.total_gpus * spec.resources.time_minutes / 60)
    print("\nOK: the request fits the profile.")
    if args.slurm:
        return ask_slurm(spec, args.overrides)
    return 0
