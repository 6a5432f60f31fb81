"""The one module that runs Slurm commands. Commands are argument lists, never shell strings.

`CommandRunner` is a seam: tests of the logic around a command pass a runner with the same
`run` method instead of patching subprocess; the real Slurm tests use the real one.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence

from jeanzay_kit.errors import SlurmCommandError
from jeanzay_kit.slurm_syntax.queries import SACCT_FIELDS, SACCT_USAGE_FIELDS, SQUEUE_FORMAT


class CommandRunner:
    def run(
        self, argv: Sequence[str], timeout: float = 60.0, cwd: str | None = None
    ) -> subprocess.CompletedProcess:
        return subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout, check=False, cwd=cwd
        )


def _checked(
    argv: Sequence[str], runner: CommandRunner | None = None, cwd: str | None = None
) -> subprocess.CompletedProcess:
    """Run a Slurm command; a failure becomes one SlurmCommandError with Slurm's words."""
    try:
        result = (runner or CommandRunner()).run(argv, cwd=cwd)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise SlurmCommandError(
            f"`{' '.join(argv)}` could not run: {err}. HINT: is Slurm's client installed and "
            "SLURM_CONF set (scripts/slurm-local env STATE_DIR)?"
        ) from err
    if result.returncode != 0:
        raise SlurmCommandError(
            f"`{' '.join(argv)}` failed (exit {result.returncode}): "
            f"{(result.stderr or result.stdout).strip()}"
        )
    return result


def requeue(job_id: str, runner: CommandRunner | None = None) -> None:
    """Ask Slurm to put the job (array task id form "A_a" accepted) back in the queue."""
    _checked(["scontrol", "requeue", job_id], runner)


def exclude_nodes(
    job_id: str, nodes: Sequence[str], runner: CommandRunner | None = None, tries: int = 3
) -> None:
    """Leave `nodes` out of the job's next start: `scontrol update JobId=.. ExcNodeList=..`
    on the job just requeued (pending: on the local cluster the first call is taken; a
    refusal is tried again, half a second apart, `tries` times)."""
    import time

    argv = ["scontrol", "update", f"JobId={job_id}", f"ExcNodeList={','.join(nodes)}"]
    for attempt in range(tries):
        try:
            _checked(argv, runner)
            return
        except SlurmCommandError:
            if attempt == tries - 1:
                raise
            time.sleep(0.5)


def request_requeue(
    job_id: str, request_file: str | None, runner: CommandRunner | None = None
) -> None:
    """Requeue the job: with `scontrol requeue`, or, inside a container (which has no
    scontrol), by writing its id to request_file ($JZK_REQUEUE_FILE), which the batch
    shell reads after the step and requeues from outside (slurm/container.py). The file
    is written aside and renamed: several tasks may ask, the shell reads one whole id."""
    if request_file is None:
        requeue(job_id, runner)
        return
    import os
    from pathlib import Path

    target = Path(request_file)
    aside = target.with_name(f"{target.name}.{os.getpid()}")
    try:
        aside.write_text(job_id + "\n")
        os.replace(aside, target)
    except OSError as err:
        raise SlurmCommandError(f"could not write the requeue request {target}: {err}") from err


def scancel(job_ids: Sequence[str], runner: CommandRunner | None = None) -> None:
    """End the jobs (a requeued job keeps its id; an array task is A_i)."""
    _checked(["scancel", *job_ids], runner)


def job_end_time(job_id: str, runner: CommandRunner | None = None) -> float | None:
    """When the job's allocation ends (epoch seconds), from squeue's %e; None if unknown."""
    from datetime import datetime

    text = _checked(["squeue", "-h", "-j", job_id, "-o", "%e"], runner).stdout.strip()
    try:
        return datetime.fromisoformat(text.splitlines()[0]).timestamp()  # Slurm's local time
    except (ValueError, IndexError):
        return None  # "Unknown", "NONE", or the job already gone


def sbatch(
    script: str,
    cwd: str,
    runner: CommandRunner | None = None,
    hold: bool = False,
    after: str | None = None,
) -> str:
    """Submit a script from `cwd` (the job's working directory); return the job id.
    hold: the job waits in the queue until `scontrol release <id>`; after: a job id
    it starts behind (`--dependency=afterany:<id>`, over the script's own line)."""
    argv = ["sbatch", "--parsable", *(["--hold"] if hold else [])]
    if after:
        argv.append(f"--dependency=afterany:{after}")
    argv.append(script)
    result = _checked(argv, runner, cwd)
    # --parsable prints "<id>" or "<id>;<cluster>".
    return result.stdout.strip().split(";")[0]


def wait_until_gone(
    job_id: str, timeout_s: float, poll_s: float = 2.0, runner: CommandRunner | None = None
) -> None:
    """Block until squeue no longer shows the job pending, running or completing."""
    import time

    deadline = time.monotonic() + timeout_s
    while True:
        states = _checked(["squeue", "-h", "-j", job_id, "-o", "%T"], runner).stdout.split()
        if not any(s in LIVE_STATES for s in states):
            return
        if time.monotonic() > deadline:
            raise SlurmCommandError(
                f"job {job_id} is still {states[0]} after {timeout_s:g} s. HINT: `squeue -j "
                f"{job_id}` says why; `scancel {job_id}` to drop it"
            )
        time.sleep(poll_s)


LIVE_STATES = ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "SUSPENDED")


def job_alive(job_id: str, runner: CommandRunner | None = None) -> bool:
    """Whether the job (or array task "A_a") is still pending, running or requeued; a job
    Slurm has forgotten (`Invalid job id`) is not."""
    try:
        states = job_states(job_id, runner)
    except SlurmCommandError as err:
        if "Invalid job id" in str(err):
            return False
        raise
    return any(s in LIVE_STATES for s in states)


def job_states(job_id: str, runner: CommandRunner | None = None) -> list[str]:
    """squeue's states of the job (or array task "A_a"): RUNNING, COMPLETING... Empty: a
    job squeue no longer shows."""
    return _checked(["squeue", "-h", "-j", job_id, "-o", "%T"], runner).stdout.split()


def squeue_text(runner: CommandRunner | None = None) -> str:
    """This user's queued, running and recently finished jobs, one row per array task."""
    return _checked(["squeue", "--me", "-h", "-r", "-o", SQUEUE_FORMAT], runner).stdout


def squeue_pending_text(job_ids: Sequence[str], runner: CommandRunner | None = None) -> str:
    """The pending ones of these jobs: reason, Slurm's start estimate, when the scheduler
    last looked at them, dependency (slurm/pending.py PENDING_FORMAT)."""
    from jeanzay_kit.slurm.pending import PENDING_FORMAT

    argv = ["squeue", "-h", "-r", "-t", "PD", "-j", ",".join(job_ids), "-O", PENDING_FORMAT]
    return _checked(argv, runner).stdout


def sacct_starts_text(job_ids: Sequence[str], runner: CommandRunner | None = None) -> str:
    """`JobID|Start` of these jobs (their newest start; Unknown before the first)."""
    argv = ["sacct", "-X", "-n", "-P", "-j", ",".join(job_ids), "-o", "JobID,Start"]
    return _checked(argv, runner).stdout


def sacct_account_text(account: str | None, since: str, runner: CommandRunner | None = None) -> str:
    """Every attempt since `since` of the account's jobs, all its users (or this user's
    jobs without an account): `JobID|ElapsedRaw|AllocTRES|End` (launch/allocation_rules.py)."""
    who = ["--allusers", "-A", account] if account else []
    argv = ["sacct", "-X", "-n", "-P", "--duplicates", *who, "-S", since, "-E", "now"]
    return _checked([*argv, "-o", "JobID,ElapsedRaw,AllocTRES,End"], runner).stdout


def sprio_text(job_ids: Sequence[str], runner: CommandRunner | None = None) -> str:
    """The parts of these pending jobs' priority (priority/multifactor sites); empty
    where the site's priority plugin has none (sprio then refuses)."""
    argv = ["sprio", "-h", "-j", ",".join(job_ids), "-o", "%i|%Y|%A|%F|%J|%P|%Q"]
    try:
        return _checked(argv, runner).stdout
    except SlurmCommandError:
        return ""


def sacct_text(job_ids: Sequence[str], runner: CommandRunner | None = None) -> str:
    argv = ["sacct", "-X", "-n", "-P", "-j", ",".join(job_ids), "-o", SACCT_FIELDS]
    return _checked(argv, runner).stdout


def sacct_usage_text(job_ids: Sequence[str], runner: CommandRunner | None = None) -> str:
    """Every attempt of the jobs (requeues included), one row each: states and usage in
    one call however many jobs (launch/status.py parse_usage)."""
    argv = ["sacct", "-X", "-n", "-P", "--duplicates", "-j", ",".join(job_ids)]
    return _checked([*argv, "-o", SACCT_USAGE_FIELDS], runner).stdout


def sbatch_test_only(
    script: str, cwd: str, runner: CommandRunner | None = None
) -> subprocess.CompletedProcess:
    """`sbatch --test-only SCRIPT`: Slurm checks the request and estimates its start,
    submitting nothing. Its answer is on stderr, also when it refuses (exit 1)."""
    argv = ["sbatch", "--test-only", script]
    try:
        return (runner or CommandRunner()).run(argv, cwd=cwd)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise SlurmCommandError(
            f"`{' '.join(argv)}` could not run: {err}. HINT: is Slurm's client installed and "
            "SLURM_CONF set?"
        ) from err


def show_text(argv: Sequence[str], runner: CommandRunner | None = None) -> str:
    """The output of a read-only Slurm command (scontrol show ..., sacctmgr show ...)."""
    return _checked(argv, runner).stdout


def signal_job(job_id: str, name: str, runner: CommandRunner | None = None) -> None:
    """Send signal `name` (USR1, ...) to every task of the job's running steps, as Slurm's
    `--signal` does before a time limit."""
    _checked(["scancel", f"--signal={name}", job_id], runner)


def run_on_node(
    job_id: str, host: str, argv: Sequence[str], runner: CommandRunner | None = None
) -> str:
    """Run `argv` on one node of a running job, as a step beside the job's own
    (`srun --overlap`); its output."""
    step = ["srun", f"--jobid={job_id}", "--overlap", "-N1", "-n1", "-w", host, *argv]
    return _checked(step, runner).stdout


def job_exit_code(job_id: str, runner: CommandRunner | None = None) -> int | None:
    """A finished job's exit code from sacct (0 when it completed); None while the
    accounting does not have its end yet."""
    argv = ["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "State,ExitCode"]
    rows = _checked(argv, runner).stdout.strip().splitlines()
    if not rows or rows[-1].startswith(("RUNNING", "PENDING", "REQUEUED", "COMPLETING")):
        return None
    state, code = rows[-1].split("|")[:2]
    return 0 if state == "COMPLETED" else int(code.split(":")[0] or 1) or 1
