"""`jzk`: validate a request, render or submit its sbatch script, show job states, list
cluster profiles, inspect checkpoints.

An edge module: it reads files and argv, prints, and exits. Errors a user can cause
are printed as one clear message (no traceback) with exit code 2.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from jeanzay_kit import report
from jeanzay_kit.config.compose import DEFAULT_CONFIG_DIR, compose_config
from jeanzay_kit.config.spec import JobSpec, build_job_spec
from jeanzay_kit.errors import JzkError, RenderError
from jeanzay_kit.slurm.sbatch import render_sbatch
from jeanzay_kit.slurm_syntax.timefmt import format_time

if TYPE_CHECKING:  # the doctor imports torch.multiprocessing: only when it runs
    from jeanzay_kit.doctor.launch import DoctorOptions

OVERRIDES_HELP = (
    "Hydra overrides, e.g. cluster=jeanzay_h100 cluster.account=abc@h100 "
    "resources.nodes=2 resources.gpus_per_node=4 resources.time=10:00:00"
)


def _add_config_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config-dir",
        default=None,
        help=f"the config tree to compose (default: {DEFAULT_CONFIG_DIR})",
    )
    parser.add_argument("overrides", nargs="*", metavar="OVERRIDE", help=OVERRIDES_HELP)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jzk",
        description="jeanzay_kit: validate a training job against a cluster profile, "
        "render its sbatch script, list the profiles.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

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
    _add_config_args(validate)

    render = sub.add_parser(
        "render",
        help="print the sbatch script of a request (or write it with -o DIR)",
        description="Validate the request, then print a standalone sbatch script for it. "
        "With -o DIR, write DIR/<job.name>.sbatch instead.",
    )
    render.add_argument("-o", "--output-dir", default=None, help="write DIR/<job.name>.sbatch")
    render.add_argument("--array", default=None, help='make a job array, e.g. "0-9%%4"')
    _add_config_args(render)

    submit = sub.add_parser(
        "submit",
        help="render the sbatch script of a request and submit it with sbatch",
        description="Validate the request, write its sbatch script to <job.run_dir>/job.sbatch, "
        "submit it with sbatch from the current directory (the job's working directory) and "
        "record the job in <job.run_dir>/manifest.jsonl. Submitting the same request again "
        "resumes from the run directory's newest complete checkpoint.",
    )
    submit.add_argument(
        "--test-only",
        action="store_true",
        help="run `sbatch --test-only` instead: Slurm's expected start or its refusal, "
        "nothing submitted or written",
    )
    _add_config_args(submit)

    status = sub.add_parser(
        "status",
        help="a table of the runs of a sweep or run directory: state, progress, heartbeats",
        description="Read DIR/manifest.jsonl (a sweep directory from `python train.py -m`, or "
        "a run directory from `jzk submit`; a local run directory has none and shows as "
        "`local`) and show each run's Slurm state (squeue, then sacct for jobs squeue no "
        "longer shows; without either, UNKNOWN), its step, last loss and ETA "
        "(metrics.jsonl), the age of its stalest heartbeat (a stuck rank shows here), its "
        "restarts and newest complete checkpoint. Without DIR: every manifest under "
        "multirun/ and outputs/ of the current directory.",
    )
    status.add_argument("dir", nargs="?", default=None, metavar="SWEEP_OR_RUN_DIR")

    doctor = sub.add_parser(
        "doctor",
        help="check a job's ranks: rank table, a timed all-reduce, bandwidth per rank",
        description="Start the world of the config (resources.nodes x "
        "resources.gpus_per_node) and, on every rank: check in with the master, print a "
        "table (host, rank, local rank, visible devices, CPU affinity, master address and "
        "port), run one small all-reduce that names the rank that does not answer within "
        "--timeout, and an all-reduce bus bandwidth per rank, flagging a rank under 0.7x "
        "the median. Locally (cluster=local) the ranks are processes here; with --submit "
        "the rendered script runs them as a Slurm job step. Exit 0: every rank answered.",
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
    _add_config_args(doctor)

    report_cmd = sub.add_parser(
        "report",
        help="PNG plots and a summary table of a run or a sweep",
        description="Read the metrics.jsonl of a run directory, of every run of a sweep "
        "(DIR/manifest.jsonl, or numbered run directories of a local Hydra sweep) and write "
        "loss.png (train and eval loss against step), throughput.png, step_time.png and "
        "summary.csv to OUT (default DIR/report); print the summary table, best eval loss "
        "first. A sweep's legend shows each run's overrides.",
    )
    report_cmd.add_argument("dir", metavar="RUN_OR_SWEEP_DIR")
    report_cmd.add_argument(
        "-o", "--out", default=None, metavar="DIR", help="where to write (default DIR/report)"
    )

    cluster = sub.add_parser(
        "cluster",
        help="write a cluster profile from a live Slurm cluster",
        description="Cluster profiles from the live cluster.",
    )
    cluster_sub = cluster.add_subparsers(dest="cluster_command", required=True, metavar="ACTION")
    discover = cluster_sub.add_parser(
        "discover",
        help="write a profile from scontrol and sacctmgr (docs/sites.md)",
        description="Ask the cluster this machine submits to (scontrol show config|partition|"
        "node, sacctmgr show qos|assoc) and write a profile in the schema of conf/cluster/, "
        "each value commented with the command it came from. Then `jzk validate "
        "cluster=NAME` works at once: profiles in $JZK_CONFIG_HOME/cluster (default "
        "~/.config/jeanzay_kit/cluster) are found like the package's own.",
    )
    discover.add_argument("--name", default=None, help="profile name (default: ClusterName)")
    discover.add_argument(
        "-o",
        "--output",
        default=None,
        metavar="PATH",
        help="where to write it (default: <user config>/cluster/<name>.yaml; - for stdout)",
    )
    discover.add_argument("--force", action="store_true", help="overwrite an existing file")

    clusters = sub.add_parser(
        "clusters",
        help="list the cluster profiles with their partitions and limits",
        description="List the cluster profiles of the config tree (conf/cluster/*.yaml).",
    )
    clusters.add_argument("--config-dir", default=None, help="the config tree to read")

    ckpt = sub.add_parser(
        "ckpt",
        help="list, verify or digest the checkpoints of a run directory",
        description="Inspect <RUN_DIR>/checkpoints without starting a job.",
    )
    ckpt_sub = ckpt.add_subparsers(dest="ckpt_command", required=True, metavar="ACTION")
    c_list = ckpt_sub.add_parser(
        "list",
        help="steps, sizes, complete or not",
        description="List the checkpoints: step, size, complete or not.",
    )
    c_list.add_argument("run_dir", metavar="RUN_DIR")
    c_verify = ckpt_sub.add_parser(
        "verify",
        help="check every checksum; exit 1 on damage",
        description="Check every file of every complete checkpoint against its manifest. "
        "Exit 1 if any is damaged.",
    )
    c_verify.add_argument("run_dir", metavar="RUN_DIR")
    c_digest = ckpt_sub.add_parser(
        "digest",
        help="one hex digest of the full model parameters",
        description="Print one sha256 of the full model parameters of a checkpoint (the "
        "newest intact one, or --step N): the same whatever the sharding or parallel mode.",
    )
    c_digest.add_argument("run_dir", metavar="RUN_DIR")
    c_digest.add_argument("--step", type=int, default=None)
    return parser


def describe_spec(spec: JobSpec) -> str:
    """The resolved request as a two-column table."""
    lay = spec.layout
    part = spec.resources.partition
    select = (
        f"selected with -C {spec.resources.constraint}"
        if part.select == "constraint"
        else f"constraint {spec.resources.constraint}"
        if spec.resources.constraint
        else ""
    )
    launch = (
        "local worker processes"
        if not spec.cluster.is_slurm
        else "torchrun, one task per node"
        if lay.launcher == "torchrun"
        else "one process driving every GPU"
        if lay.mode == "dataparallel"
        else "srun, one task per GPU"
    )
    qos = spec.resources.qos or "(site default)"
    if spec.cluster.qos and "resources.qos" in spec.auto_keys:
        qos += f"  (auto: shortest QoS that fits {spec.resources.time})"
    rows = [
        ("cluster", f"{spec.cluster.name}  ({spec.cluster.description})"),
        ("account", spec.resources.account or "-"),
        ("partition", f"{part.name}  {select}".rstrip() if spec.cluster.is_slurm else "-"),
        ("qos", qos if spec.cluster.is_slurm else "-"),
        ("nodes", str(spec.resources.nodes)),
        ("gpus per node", f"{spec.resources.gpus_per_node}  ({spec.resources.total_gpus} in all)"),
        ("tasks per node", f"{spec.resources.ntasks_per_node}  ({launch})"),
        (
            "cpus per task",
            f"{spec.resources.cpus_per_task}  (OMP_NUM_THREADS={spec.omp_num_threads})",
        ),
        (
            "time",
            spec.resources.time
            if spec.cluster.is_slurm
            else format_time(spec.resources.time_minutes),
        ),
        (
            "parallel",
            f"{lay.mode}: world size {lay.world_size} = {lay.dp_size} data-parallel "
            f"x {lay.pp_size} pipeline"
            + (
                f", {lay.microbatches} micro-batches, {lay.schedule}"
                if lay.pipeline_enabled
                else ""
            ),
        ),
        (
            "batch",
            f"global {spec.train.global_batch_size} = {lay.dp_size} replica(s) x micro "
            f"{spec.train.micro_batch_size} x {spec.train.grad_accum_steps} accumulation step(s)",
        ),
        (
            "precision",
            spec.train.precision
            + ("  (decided by the hardware at run time)" if spec.train.precision == "auto" else ""),
        ),
        (
            "preemption",
            f"SIG{spec.preemption.signal} {spec.preemption.lead_seconds} s before the time limit, "
            + ("requeue" if spec.preemption.requeue else "no requeue"),
        ),
        ("job name", spec.job.name),
        ("run dir", spec.checkpoint.run_dir),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def _build_spec(args: argparse.Namespace) -> JobSpec:
    cfg = compose_config(args.overrides, args.config_dir)
    local_gpus = None
    if cfg["cluster"].get("scheduler") == "local" and cfg["resources"].get(
        "gpus_per_node", "auto"
    ) in (None, "auto"):
        # Only here is torch imported: the worker count of a local run follows the GPUs.
        from jeanzay_kit.run import local_gpu_count

        local_gpus = local_gpu_count()
    return build_job_spec(cfg, local_gpus=local_gpus)


def _cmd_validate(args: argparse.Namespace) -> int:
    spec = _build_spec(args)
    print(describe_spec(spec))
    print("\nOK: the request fits the profile.")
    if args.slurm:
        return _ask_slurm(spec, args.overrides)
    return 0


def _ask_slurm(spec: JobSpec, overrides: Sequence[str]) -> int:
    """`sbatch --test-only` on the rendered script: what Slurm itself says of the request."""
    import tempfile

    from jeanzay_kit.slurm.commands import sbatch_test_only
    from jeanzay_kit.slurm.test_only import read_test_only

    if not spec.cluster.is_slurm:
        raise JzkError(
            f"cluster={spec.cluster.name} is not a Slurm cluster: there is no Slurm to ask. "
            "HINT: pick a Slurm profile (`jzk clusters`)"
        )
    workdir = _workdir(spec)
    try:
        script = render_sbatch(spec, rendered_by=overrides, workdir=str(workdir))
    except RenderError as err:
        raise JzkError(str(err)) from err
    with tempfile.TemporaryDirectory(prefix="jzk-test-only-") as tmp:
        path = Path(tmp) / f"{spec.job.name}.sbatch"
        path.write_text(script)
        result = sbatch_test_only(str(path), cwd=tmp)
    answer = read_test_only(result.returncode, result.stderr or result.stdout)
    if answer.accepted:
        print(f"\nSlurm accepts it (sbatch --test-only): {answer.message}")
        return 0
    hint = f". HINT: change {answer.hint}" if answer.hint else ""
    raise JzkError(f"Slurm refuses this request (sbatch --test-only): {answer.message}{hint}")


def _workdir(spec: JobSpec) -> Path:
    """Where the job runs: job.workdir, or the directory jzk runs in."""
    return Path(spec.job.workdir) if spec.job.workdir else Path.cwd()


def _render(
    spec: JobSpec,
    overrides: Sequence[str],
    array: str | None = None,
    command: Sequence[str] | None = None,
    rerender: str = "jzk render",
) -> str:
    """The script, with the log folder created: Slurm opens the logs before the script
    runs and fails the job (JobLaunchFailure, no log at all) when their folder is missing.
    command and rerender: another entry point than job.entry (`jzk doctor --submit`)."""
    workdir = _workdir(spec)
    try:
        script = render_sbatch(
            spec,
            command,
            array=array,
            rendered_by=overrides,
            workdir=str(workdir),
            rerender=rerender,
        )
    except RenderError as err:
        raise JzkError(str(err)) from err
    if workdir.is_dir():
        (workdir / spec.job.log_dir).mkdir(parents=True, exist_ok=True)
    else:  # rendered here for another machine (job.workdir is a path over there)
        print(
            f"note: job.workdir={workdir} does not exist here: create "
            f"{workdir / spec.job.log_dir} where the job runs before you sbatch it",
            file=sys.stderr,
        )
    return script


def _cmd_render(args: argparse.Namespace) -> int:
    spec = _build_spec(args)
    script = _render(spec, args.overrides, args.array)
    if args.output_dir is None:
        sys.stdout.write(script)
        return 0
    out_dir = Path(args.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{spec.job.name}.sbatch"
    path.write_text(script)
    print(f"wrote {path}\nsubmit it from any directory with: sbatch {path}", file=sys.stderr)
    return 0


def _cmd_submit(args: argparse.Namespace) -> int:
    from jeanzay_kit.ckpt.store import check_resume_early
    from jeanzay_kit.ckpt.writable import check_writable
    from jeanzay_kit.launch.manifest import append_manifest
    from jeanzay_kit.slurm.commands import sbatch

    spec = _build_spec(args)
    if not spec.cluster.is_slurm:
        raise JzkError(
            f"cluster={spec.cluster.name} is not a Slurm cluster: nothing to submit. HINT: pick "
            "a Slurm profile (`jzk clusters`), or run `python train.py` to train here"
        )
    if args.test_only:
        return _ask_slurm(spec, args.overrides)
    script = _render(spec, args.overrides)
    workdir = _workdir(spec)
    run_dir = workdir / spec.checkpoint.run_dir
    # A changed config meeting another experiment's checkpoints: refused now, not after
    # the job has waited in the queue.
    check_resume_early(
        run_dir,
        spec.config,
        spec.layout.checkpoint_world(),
        spec.checkpoint.resume,
        spec.checkpoint.allow_config_change,
    )
    # Refused here, not by the job after its wait in the queue.
    check_writable(run_dir)
    path = run_dir / "job.sbatch"
    path.write_text(script)
    job_id = sbatch(str(path.resolve()), cwd=str(workdir))
    log = workdir / spec.job.log_dir / f"{spec.job.name}-{job_id}.out"
    append_manifest(
        run_dir,
        {
            "job_id": job_id,
            "overrides": list(args.overrides),
            "run_dir": str(run_dir.resolve()),
            "script": str(path.resolve()),
            "log": str(log.resolve()),
            "cluster": spec.cluster.name,
            "submitted_at": datetime.datetime.now(datetime.timezone.utc).isoformat(
                timespec="seconds"
            ),
        },
    )
    res = spec.resources
    print(f"submitted job {job_id} ({res.nodes} node(s) x {res.gpus_per_node} GPU(s), {res.time})")
    print(f"  script  {path}\n  log     {log}\n  run dir {run_dir}")
    print(f"  status: jzk status {run_dir}")
    return 0


def _newest_complete_step(run_dir: str) -> int | None:
    from jeanzay_kit.ckpt.store import CheckpointStore

    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return None
    steps = [e.step for e in CheckpointStore(root).entries() if e.has_manifest]
    return max(steps) if steps else None


def _cmd_status(args: argparse.Namespace) -> int:
    from jeanzay_kit.errors import SlurmCommandError
    from jeanzay_kit.launch.run_files import run_progress
    from jeanzay_kit.slurm import status
    from jeanzay_kit.slurm.commands import sacct_text, squeue_text

    records = _status_records(args.dir)
    for rec in records:
        run_dir = Path(rec.get("run_dir", ""))
        rec["checkpoint"] = _newest_complete_step(str(run_dir))
        rec.update(vars(run_progress(run_dir)))
    ids = list(dict.fromkeys(str(r["job_id"]) for r in records if r["job_id"] != "local"))
    notes, states = [], {}
    if ids:
        try:
            states = status.parse_squeue(squeue_text())
        except SlurmCommandError as err:
            notes.append(f"(squeue: {err})")
        gone = status.missing(ids, states)
        if gone:
            try:
                states = {**status.parse_sacct(sacct_text(gone)), **states}
            except SlurmCommandError as err:
                notes.append(f"(sacct: {err})")
    for rec in records:
        if rec["job_id"] == "local":
            states["local"] = status.JobState("local", _local_state(rec), "-", "this machine")
    print(status.status_table(records, states))
    shown = list(dict.fromkeys(str(r["job_id"]) for r in records))
    print("\n" + status.summary(states[i].state if i in states else "UNKNOWN" for i in shown))
    for note in notes:
        print(note, file=sys.stderr)
    return 0


def _status_records(directory: str | None) -> list[dict]:
    """Manifest records (submitted runs and sweeps), or one record for a local run."""
    from jeanzay_kit.launch.manifest import MANIFEST, read_manifest

    if directory is not None:
        root = Path(directory)
        if (root / MANIFEST).is_file():
            return [dict(r) for r in read_manifest(root / MANIFEST)]
        if (root / "metrics.jsonl").is_file() or (root / "heartbeat").is_dir():
            return [{"job_id": "local", "run_dir": str(root), "overrides": []}]
        raise JzkError(
            f"no {MANIFEST} and no metrics.jsonl in {directory}. HINT: give a sweep directory "
            "(multirun/<job.name>) or a run directory (outputs/<job.name>-<hash>)"
        )
    paths = sorted(Path("multirun").glob(f"*/{MANIFEST}")) + sorted(
        Path("outputs").glob(f"*/{MANIFEST}")
    )
    if not paths:
        raise JzkError(
            f"no {MANIFEST} under multirun/ or outputs/ here. HINT: pass the sweep or run directory"
        )
    return [dict(r) for p in paths for r in read_manifest(p)]


def _local_state(rec: dict) -> str:
    """A local run has no scheduler: its files say whether it finished or still beats."""
    if (Path(rec["run_dir"]) / "model_final.sha256").exists():
        return "COMPLETED"
    age = rec.get("oldest_beat_s")
    return "RUNNING" if age is not None and age < 60 else "STOPPED"


# A doctor job is short and never requeued; a longer resources.time given on the
# command line still wins (overrides come after these).
DOCTOR_DEFAULTS = ("resources.time=00:10:00", "preemption.requeue=false")


def _cmd_doctor(args: argparse.Namespace) -> int:
    from jeanzay_kit.doctor.launch import DoctorOptions, doctor_local

    options = DoctorOptions(timeout_s=args.timeout, size_mb=args.size_mb)
    if not args.submit:
        spec = _build_spec(args)
        if spec.cluster.is_slurm:
            raise JzkError(
                f"cluster={spec.cluster.name} is a Slurm profile. HINT: `jzk doctor --submit "
                f"cluster={spec.cluster.name} ...` runs it as a job (add --wait to see its "
                "table), or inside an allocation: srun python -m jeanzay_kit.doctor "
                f"cluster={spec.cluster.name} ..."
            )
        return doctor_local(spec, options)
    args.overrides = [*DOCTOR_DEFAULTS, *args.overrides]
    spec = _build_spec(args)
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
    workdir = _workdir(spec)
    command = ["-m", "jeanzay_kit.doctor", f"--timeout={options.timeout_s:g}"]
    command.append(f"--size-mb={options.size_mb:g}")
    rendered_by = [o for o in args.overrides if o not in DOCTOR_DEFAULTS]
    script = _render(spec, rendered_by, command=command, rerender="jzk doctor --submit")
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


def _cmd_report(args: argparse.Namespace) -> int:
    import csv

    from jeanzay_kit.analysis.collect import find_runs
    from jeanzay_kit.analysis.plots import write_plots
    from jeanzay_kit.analysis.summary import format_table, run_series, summary_rows, table_cells

    directory = Path(args.dir)
    if not directory.is_dir():
        raise JzkError(f"{args.dir} is not a directory. HINT: give a run or sweep directory")
    runs = [run_series(str(f.run_dir), f.overrides, f.records) for f in find_runs(directory)]
    out = Path(args.out) if args.out else directory / "report"
    written = write_plots(runs, out)
    rows = summary_rows(runs)
    with (out / "summary.csv").open("w", newline="") as handle:
        csv.writer(handle).writerows(table_cells(rows))
    print(format_table(rows))
    empty = [r.name for r in runs if not r.loss]
    if empty:
        print(f"\nno metrics yet: {', '.join(empty)}")
    print("\nwrote " + ", ".join(str(p) for p in [*written, out / "summary.csv"]))
    return 0


def _cmd_cluster(args: argparse.Namespace) -> int:
    import getpass

    from jeanzay_kit.config.compose import user_config_dir
    from jeanzay_kit.errors import SlurmCommandError
    from jeanzay_kit.slurm import discover as d
    from jeanzay_kit.slurm.commands import show_text

    config = show_text(["scontrol", "show", "config"])
    partitions = show_text(["scontrol", "show", "partition", "-o"])
    nodes = show_text(["scontrol", "show", "node", "-o"])
    user = getpass.getuser()
    try:
        qos = show_text(
            ["sacctmgr", "-n", "-P", "show", "qos", "format=Name,MaxWall,MaxTRESPerJob"]
        )
        assoc = show_text(
            [
                "sacctmgr",
                "-n",
                "-P",
                "show",
                "assoc",
                f"user={user}",
                "format=Account,Partition,QOS",
            ]
        )
        accounting = d.Accounting(qos, assoc)
    except SlurmCommandError as err:
        accounting = d.Accounting(None, None, missing=str(err).split(": ", 1)[-1][:200])
    try:
        found = d.discover_profile(config, partitions, nodes, accounting, name=args.name)
    except ValueError as err:
        raise JzkError(f"cannot write a profile: {err}") from err
    for note in found.notes:
        print(f"note: {note}", file=sys.stderr)
    if args.output == "-":
        sys.stdout.write(found.yaml)
        return 0
    path = (
        Path(args.output)
        if args.output
        else user_config_dir(os.environ) / "cluster" / f"{found.name}.yaml"
    )
    if path.exists() and not args.force:
        raise JzkError(f"{path} exists. HINT: add --force to overwrite it, or -o another path")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(found.yaml)
    print(f"wrote {path}")
    print(f"check it, then: jzk validate cluster={found.name}   (jzk clusters lists it)")
    return 0


def _profile_names(config_dir: str | None) -> list[str]:
    """Profiles of the package's conf/cluster, then the user's own (Hydra searches both)."""
    from jeanzay_kit.config.compose import user_config_dir

    dirs = [
        Path(config_dir or DEFAULT_CONFIG_DIR) / "cluster",
        user_config_dir(os.environ) / "cluster",
    ]
    return list(dict.fromkeys(p.stem for d in dirs for p in sorted(d.glob("*.yaml"))))


def _cmd_clusters(args: argparse.Namespace) -> int:
    from jeanzay_kit.config.clusters import profile_from_dict

    names = _profile_names(args.config_dir)
    if not names:
        raise JzkError(f"no cluster profiles in {args.config_dir or DEFAULT_CONFIG_DIR}")
    for name in names:
        cfg = compose_config([f"cluster={name}"], args.config_dir)
        prof = profile_from_dict(cfg["cluster"])
        account = (
            f"required, <project>{prof.account_suffix or ''}"
            if prof.account_required
            else "optional"
        )
        print(f"{prof.name}: {prof.description}")
        print(
            f"  scheduler {prof.scheduler}, device {prof.device}, bf16 "
            f"{'yes' if prof.bf16 else 'no'}, account {account}"
        )
        if prof.modules:
            print(f"  modules: {' '.join(prof.modules)}")
        for part in prof.partitions.values():
            gpus = part.gpus_per_node if part.gpus_per_node is not None else "any"
            cpus = part.cpus_per_node if part.cpus_per_node is not None else "any"
            limit = format_time(part.max_minutes) if part.max_minutes else "none"
            how = f"-C {part.default_constraint}" if part.select == "constraint" else "--partition"
            extra = f", constraints {'|'.join(part.constraints)}" if part.constraints else ""
            default = " (default)" if part.name == prof.default_partition else ""
            pre = ", preemptible" if part.preemptible else ""
            print(
                f"  partition {part.name}{default}: {gpus} GPUs, {cpus} CPUs per node, "
                f"max {limit}, via {how}{extra}{pre}"
            )
        for q in prof.qos_by_time():
            gpus = f", max {q.max_gpus_per_job} GPUs/job" if q.max_gpus_per_job else ""
            default = " (default)" if q.name == prof.default_qos else ""
            print(f"  qos {q.name}{default}: max {format_time(q.max_minutes)}{gpus}")
        print()
    return 0


def _cmd_ckpt(args: argparse.Namespace) -> int:
    from jeanzay_kit.ckpt import inspection

    if args.ckpt_command == "list":
        rows = inspection.list_checkpoints(args.run_dir)
        if not rows:
            print("no checkpoints")
        for row in rows:
            size = f"{row['bytes'] / 1e6:10.1f} MB" if row["bytes"] is not None else " " * 13
            state = "complete" if row["complete"] else "INCOMPLETE (not loadable)"
            print(f"{row['name']:>16}  {size}  {state}")
        return 0
    if args.ckpt_command == "verify":
        report = inspection.verify(args.run_dir)
        damaged = 0
        for name, problems in sorted(report.items(), key=lambda kv: kv[0]):
            if problems:
                damaged += 1
                print(f"{name}: DAMAGED: " + "; ".join(problems))
            else:
                print(f"{name}: ok")
        if not report:
            print("no complete checkpoints")
        return 1 if damaged else 0
    step, value = inspection.digest(args.run_dir, args.step)
    print(value)
    print(f"step-{step}", file=sys.stderr)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler = {
        "validate": _cmd_validate,
        "render": _cmd_render,
        "submit": _cmd_submit,
        "status": _cmd_status,
        "report": _cmd_report,
        "doctor": _cmd_doctor,
        "cluster": _cmd_cluster,
        "clusters": _cmd_clusters,
        "ckpt": _cmd_ckpt,
    }
    try:
        return handler[args.command](args)
    except JzkError as err:
        report.error(f"jzk {args.command}", err)
        return err.exit_code
    except BrokenPipeError:  # `jzk render | head`
        return 0


if __name__ == "__main__":
    sys.exit(main())
