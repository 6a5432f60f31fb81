"""What several commands share: the overrides argument, the spec, the job's working
directory, and rendering a script with its log folder."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from jeanzay_kit.config.spec import JobSpec
from jeanzay_kit.errors import JzkError, RenderError
from jeanzay_kit.launch.request import run_dir_of, spec_of, workdir_of
from jeanzay_kit.project.job_code import snapshot_code, unwritable_log_dir
from jeanzay_kit.slurm.sbatch import render_sbatch
from jeanzay_kit.slurm.test_only import TestOnlyAnswer

OVERRIDES_HELP = (
    "Hydra overrides, e.g. cluster=jeanzay_h100 cluster.account=abc@h100 "
    "resources.nodes=2 resources.gpus_per_node=4 resources.time=10:00:00"
)


def add_config_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config-dir",
        default=None,
        help="a whole config tree to compose instead of the shipped one (default: the "
        "package's configs, after ./conf and $JZK_CONFIG_HOME: docs/your-project.md)",
    )
    parser.add_argument("overrides", nargs="*", metavar="OVERRIDE", help=OVERRIDES_HELP)


def build_spec(args: argparse.Namespace) -> JobSpec:
    refuse_hydra_dirs(args.overrides)
    return spec_of(args.overrides, args.config_dir)


def require_slurm(
    spec: JobSpec, what: str, hint: str = "pick a Slurm profile (`jzk clusters`)"
) -> None:
    """A command that needs Slurm, on a profile that has none: one line saying so."""
    if not spec.cluster.is_slurm:
        raise JzkError(f"cluster={spec.cluster.name} is not a Slurm cluster: {what}. HINT: {hint}")


def ask_slurm(spec: JobSpec, overrides: Sequence[str]) -> int:
    """`sbatch --test-only` on the rendered script: what Slurm itself says of the request."""
    require_slurm(spec, "there is no Slurm to ask")
    answer = slurm_answer(spec, overrides)
    if answer.accepted:
        print(f"\nSlurm accepts it (sbatch --test-only): {answer.message}")
        return 0
    hint = f". HINT: change {answer.hint}" if answer.hint else ""
    raise JzkError(f"Slurm refuses this request (sbatch --test-only): {answer.message}{hint}")


def slurm_answer(spec: JobSpec, overrides: Sequence[str]) -> TestOnlyAnswer:
    """`sbatch --test-only` of the request's script (no snapshot, nothing submitted)."""
    import tempfile

    from jeanzay_kit.slurm.commands import sbatch_test_only
    from jeanzay_kit.slurm.test_only import read_test_only

    workdir = workdir_of(spec)
    try:
        script = render_sbatch(spec, rendered_by=overrides, workdir=str(workdir))
    except RenderError as err:
        raise JzkError(str(err)) from err
    with tempfile.TemporaryDirectory(prefix="jzk-test-only-") as tmp:
        path = Path(tmp) / f"{spec.job.name}.sbatch"
        path.write_text(script)
        result = sbatch_test_only(str(path), cwd=tmp)
    return read_test_only(result.returncode, result.stderr or result.stdout)


def render(
    spec: JobSpec,
    overrides: Sequence[str],
    array: str | None = None,
    command: Sequence[str] | None = None,
    rerender: str = "jzk render",
    tune: bool = False,
) -> str:
    """The script, with the log folder created: Slurm opens the logs before the script
    runs and fails the job (JobLaunchFailure, no log at all) when their folder is missing.
    command and rerender: another entry point than job.entry (`jzk doctor --submit`,
    which runs the toolkit's own module: no snapshot of the project's code)."""
    workdir = workdir_of(spec)
    if command is None and spec.job.runs_script and workdir.is_dir():
        from jeanzay_kit.script.entry import check_entry

        check_entry(spec.job.entry, workdir)  # before anything is written or submitted
        check_script_run(spec, workdir)
    code_dir = snapshot_code(spec, workdir) if command is None else None
    try:
        script = render_sbatch(
            spec,
            command,
            array=array,
            rendered_by=overrides,
            workdir=str(workdir),
            rerender=rerender,
            code_dir=code_dir,
            tune=tune,
        )
    except RenderError as err:
        raise JzkError(str(err)) from err
    if workdir.is_dir():
        try:
            (workdir / spec.job.log_dir).mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise unwritable_log_dir(spec, err) from err
    else:  # rendered here for another machine (job.workdir is a path over there)
        print(
            f"note: job.workdir={workdir} does not exist here: create "
            f"{workdir / spec.job.log_dir} where the job runs before you sbatch it",
            file=sys.stderr,
        )
    return script


def check_script_run(spec: JobSpec, workdir: Path) -> None:
    """Before the queue, for a script task: refuse a run directory that belongs to another
    command (script/script_files.py); warn when a requeue would start the script from
    the beginning (script/script_rules.py resume_warning), and what _warn_copies says."""
    if not spec.job.runs_script or not workdir.is_dir():
        return
    from jeanzay_kit.ending.endings import rerun_line
    from jeanzay_kit.script.entry import script_command
    from jeanzay_kit.script.script_files import claim_run_dir

    run_dir, command = run_dir_of(spec), script_command(spec)
    claim_run_dir(run_dir, command, write=False)
    if line := rerun_line(run_dir, command.resume_args):
        print(f"note: {line}", file=sys.stderr)
    _warn_copies(spec, workdir)
    if spec.cluster.is_slurm and spec.preemption.requeue:
        _warn_no_resume(spec, workdir)


def _warn_no_resume(spec: JobSpec, workdir: Path) -> None:
    from jeanzay_kit.script.reach import TOOLKIT, entry_file, names_any
    from jeanzay_kit.script.script_rules import resume_warning

    script = workdir / spec.job.entry
    try:
        text = script.read_text(errors="replace") if script.is_file() else None
    except OSError:
        text = None
    found = entry_file(spec.job.entry, workdir)
    session = found is not None and names_any(found, workdir, TOOLKIT) is True
    job = spec.job
    warning = resume_warning(job.args, job.resume_args, text, spec.checkpoint.run_dir, session)
    if warning:
        print(f"warning: {warning}", file=sys.stderr)


def _warn_copies(spec: JobSpec, workdir: Path) -> None:
    """A script started as several processes that starts no process group, and a
    checkpoint.dir that a script not using the toolkit never reads: said once each."""
    from jeanzay_kit.script.reach import TOOLKIT, entry_file, names_any, single_process_warning

    said = single_process_warning(spec.job.entry, workdir, spec.layout.world_size)
    if said:
        print(f"warning: {said}", file=sys.stderr)
    script = entry_file(spec.job.entry, workdir)
    if spec.checkpoint.dir and script and names_any(script, workdir, TOOLKIT) is False:
        print(
            f"warning: checkpoint.dir={spec.checkpoint.dir} is where the toolkit's loop and "
            f"its session save; job.entry={spec.job.entry} saves where it chooses itself "
            "(docs/storage.md)",
            file=sys.stderr,
        )


# Hydra's own output folders: a job's run directory is job.run_dir (the script passes it).
_HYDRA_DIRS = ("hydra.run.dir", "hydra.sweep.dir", "hydra.sweep.subdir")


def refuse_hydra_dirs(overrides: Sequence[str]) -> None:
    """`hydra.run.dir=X` on a job would be ignored silently: refuse it, naming job.run_dir."""
    for override in overrides:
        key, sep, value = override.lstrip("+~").partition("=")
        if sep and key in _HYDRA_DIRS:
            raise JzkError(
                f"{key}={value} does not apply to a submitted job: its run directory "
                f"(checkpoints, metrics) is job.run_dir. HINT: use job.run_dir={value}"
            )
