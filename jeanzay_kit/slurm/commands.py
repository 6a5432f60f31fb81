"""The one module that runs Slurm commands. Commands are argument lists, never shell strings.

`CommandRunner` is a seam: tests of the logic around a command pass a runner with the same
`run` method instead of patching subprocess; the real Slurm tests use the real one.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence

from jeanzay_kit.errors import JzkError


class SlurmCommandError(JzkError):
    pass


class CommandRunner:
    def run(self, argv: Sequence[str], timeout: float = 60.0) -> subprocess.CompletedProcess:
        return subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout, check=False
        )


def requeue(job_id: str, runner: CommandRunner | None = None) -> None:
    """Ask Slurm to put the job (array task id form "A_a" accepted) back in the queue."""
    runner = runner or CommandRunner()
    argv = ["scontrol", "requeue", job_id]
    try:
        result = runner.run(argv)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise SlurmCommandError(f"`{' '.join(argv)}` could not run: {err}") from err
    if result.returncode != 0:
        raise SlurmCommandError(
            f"`{' '.join(argv)}` failed (exit {result.returncode}): "
            f"{(result.stderr or result.stdout).strip()}"
        )
