"""`jzk submit`: render the script of a request and sbatch it, recording the job."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from jeanzay_kit.cli.check import add_network_args
from jeanzay_kit.cli.common import (
    add_config_args,
    ask_slurm,
    build_spec,
    render,
    require_slurm,
    run_dir_of,
    workdir_of,
)
from jeanzay_kit.config.spec import JobSpec
from jeanzay_kit.errors import JzkError
from jeanzay_kit.rundir.run_directory import RunDir


def add(sub: argparse._SubParsersAction) -> None:
    submit = sub.add_parser(
        "submit",
        help="render the sbatch script of a request and submit it with sbatch",
        description="Validate the request, write its sbatch script to <job.run_dir>/job.sbatch, "
        "submit it with sbatch from the current directory (the job's working directory) and "
        "record the job in <job.run_dir>/manifest.jsonl. Submitting the same request again "
        "resumes from the run directory's newest complete checkpoint.",
    )
    submit.add_argument(
        "--hold",
        action="store_true",
        help="submit the job held: it waits until `scontrol release JOBID` (the code it "
        "runs is still the code of now: job.snapshot)",
    )
    submit.add_argument(
        "--test-only",
        action="store_true",
        help="run `sbatch --test-only` instead: Slurm's expected start or its refusal, "
        "nothing submitted or written",
    )
    submit.add_argument(
        "--chain",
        type=int,
        default=1,
        metavar="N",
        help="submit N jobs of the same run, each starting after the previous one has "
        "ended (afterany) and resuming it: a training longer than one job's time limit "
        "(the later ones end at once when the run is done)",
    )
    submit.add_argument(
        "--parsable",
        action="store_true",
        help="print only the job ids, one per line, first to last (as sbatch --parsable): "
        "for scripts that chain other jobs after this one",
    )
    submit.add_argument(
        "--json",
        action="store_true",
        help="after the usual lines, one JSON object: jobs, run_dir, script, log (laptop "
        "mode reads it)",
    )
    submit.add_argument(
        "--on",
        metavar="HOST",
        help="submit on that cluster from this laptop, over ssh: validated here, the code "
        "sent, submitted there (`jzk remote setup HOST` first; docs/remote.md)",
    )
    submit.add_argument(
        "--prefetch",
        action="store_true",
        help="first a prefetch job (jzk prefetch: the run's downloads, where the network "
        "is), the training job after it (afterok); docs/offline.md",
    )
    add_network_args(submit)
    add_config_args(submit)
    submit.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from jeanzay_kit.slurm.commands import sbatch

    spec = build_spec(args)
    here = "pick a Slurm profile (`jzk clusters`), or run `python train.py` to train here"
    require_slurm(spec, "nothing to submit", here)
    if getattr(args, "on", None):
        from jeanzay_kit.cli.remote import run_there

        return run_there(args, spec)
    if args.test_only:
        return ask_slurm(spec, args.overrides)
    if args.chain < 1:
        raise JzkError(f"--chain {args.chain}: give the number of jobs, 1 or more")
    if getattr(args, "prefetch", False):  # the training job waits on the downloads
        spec = _after_prefetch(args, spec)
    workdir, run_dir = workdir_of(spec), run_dir_of(spec)
    _check_storage(spec, workdir)  # before refuse_before_writing makes the run's folder
    refuse_before_writing(spec, run_dir, args.chain)
    _check_network(args, spec)
    if spec.job.runs_script:  # another run of the script, with other arguments: said
        from jeanzay_kit.script.entry import script_command
        from jeanzay_kit.script.script_files import earlier_run_line

        earlier = earlier_run_line(run_dir, spec.job.name, script_command(spec))
        if earlier:
            print(earlier, file=sys.stderr, flush=True)
    script = render(spec, args.overrides)
    path = run_dir.job_script
    path.write_text(script)
    jobs: list[str] = []
    for _ in range(args.chain):
        # The first may wait on job.dependency (the script's line); the others on it.
        previous = jobs[-1] if jobs else None
        job_id = sbatch(str(path.resolve()), cwd=str(workdir), hold=args.hold, after=previous)
        jobs.append(job_id)
        _record(run_dir, job_id, args.overrides, spec, path, previous)
    if args.parsable and not getattr(args, "json", False):
        print("\n".join(jobs))
        return 0
    res = spec.resources
    log = workdir / spec.job.log_dir / f"{spec.job.name}-{jobs[0]}.out"
    chained = f" and {len(jobs) - 1} chained after it ({', '.join(jobs[1:])})" if jobs[1:] else ""
    print(
        f"submitted job {jobs[0]} ({res.nodes} node(s) x {res.gpus_per_node} GPU(s), "
        f"{res.time}){chained}"
    )
    print(f"  script  {path}\n  log     {log}\n  run dir {run_dir}")
    print(f"  status: jzk status {run_dir}")
    if args.hold:
        print(f"  held: it starts after `scontrol release {jobs[0]}`")
    if getattr(args, "json", False):
        import json

        files = {"run_dir": run_dir.root, "script": path, "log": log}
        print(json.dumps({"jobs": jobs} | {k: str(v.resolve()) for k, v in files.items()}))
    return 0


def _check_network(args: argparse.Namespace, spec: JobSpec) -> None:
    """Nodes without internet: every access of the run found here, refused before the
    queue (offline/check.py); not after a prefetch, which fetched them."""
    if spec.cluster.compute_internet or getattr(args, "prefetch", False):
        return
    from jeanzay_kit.offline.check import network_check

    allow = getattr(args, "allow_network", False)
    network_check(spec, args.overrides, args.config_dir, allow, args.budget)


def _after_prefetch(args: argparse.Namespace, spec: JobSpec) -> JobSpec:
    """Submit the prefetch job (or run it here), then the request waiting on it."""
    from jeanzay_kit.offline.prefetch import prefetch

    job = prefetch(spec, args.overrides, args.config_dir)
    if job is None:
        return spec
    after = f"afterok:{job}"
    dependency = f"{spec.job.dependency},{after}" if spec.job.dependency else after
    args.overrides = [*args.overrides, f"job.dependency={dependency}"]
    return build_spec(args)


def _record(
    run_dir: RunDir,
    job_id: str,
    overrides: list[str],
    spec: JobSpec,
    script: Path,
    after: str | None,
) -> None:
    """One line of the run's manifest.jsonl per job (`jzk status` reads it)."""
    from jeanzay_kit.launch.manifest import append_manifest, job_record

    workdir = workdir_of(spec)
    log = workdir / spec.job.log_dir / f"{spec.job.name}-{job_id}.out"
    record = job_record(job_id, overrides, run_dir, (script, log), spec.cluster.name)
    after_it = {"after": after} if after else {}
    append_manifest(run_dir, {**record, **after_it, **_gpu_memory(spec, overrides)})


def _gpu_memory(spec: JobSpec, overrides: list[str]) -> dict[str, str]:
    """The plan's per-GPU estimate (launch/fit_check.py; the check just made answers from
    its cache), kept with the job: an out-of-memory end is said with it (jzk status)."""
    import os

    from jeanzay_kit.launch.fit_check import check

    def no_hint(more: object) -> JobSpec:
        raise JzkError("the plan fits: no hint is looked for")

    fit = check(spec, overrides, no_hint, os.environ)
    return {} if fit is None else {"gpu_memory": fit.figure()}


def _check_storage(spec: JobSpec, workdir: Path) -> None:
    """The files and bytes the job writes on each filesystem, against what is left there
    (launch/storage.py): refused before the queue, with a change that fits."""
    from jeanzay_kit.launch.storage import check_storage, request_of
    from jeanzay_kit.project.job_code import snapshot_footprint

    env = dict(os.environ)
    snapshot = snapshot_footprint(spec, workdir)
    check_storage(request_of(spec, workdir, env, snapshot=snapshot), spec, env)


def refuse_before_writing(spec: JobSpec, run_dir: RunDir, chain: int = 1) -> None:
    """Every refusal of a submission, before anything is written (the code's snapshot,
    the script): a refused or failed submission leaves the project as it was."""
    from jeanzay_kit.ckpt.kept import refuse_stale
    from jeanzay_kit.ckpt.store import check_resume_early
    from jeanzay_kit.ckpt.writable import check_writable
    from jeanzay_kit.launch.allocation import check_request, request_hours
    from jeanzay_kit.launch.run_owner import check_no_live_owner

    # The allocation first: its refusal leaves not even the run's folder (check_writable
    # makes it). Every job of the chain to its time limit.
    check_request(spec, request_hours(spec, jobs=chain))

    # A changed config meeting another experiment's checkpoints: refused now, not after
    # the job has waited in the queue. A script task's run directory is checked against
    # its command instead (cli/common.py check_script_run, in render); a session's own
    # checkpoints record the script's hyper-parameters, not this config.
    if not spec.job.runs_script:
        check_resume_early(
            run_dir,
            spec.config,
            spec.layout.checkpoint_world(),
            spec.checkpoint.resume,
            spec.checkpoint.allow_config_change,
        )
        refuse_stale(spec.checkpoint.dir, run_dir, os.environ)
    # Refused here, not by the job after its wait in the queue.
    check_writable(run_dir.root)
    # One writer per run directory: not a second job beside a live one (launch/run_owner.py).
    check_no_live_owner(run_dir, spec.job.dependency)
