"""One exception family for everything a user can get wrong.

Every message names what was given, what the limit is and what to change, so the
user can fix the request without reading a traceback. The CLI prints `str(err)`
and exits with `err.exit_code`.
"""

from __future__ import annotations

from dataclasses import dataclass


class JzkError(Exception):
    """Base class of the errors jeanzay_kit raises on purpose."""

    exit_code = 2
    # False: every rank meets it alike and rank 0 reports it; True: only the rank that
    # saw it knows, and that rank reports it.
    rank_local = False


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a request: the key, its value, why, and how to fix it."""

    key: str
    value: object
    reason: str
    hint: str = ""

    def __str__(self) -> str:
        text = f"{self.key}={_show(self.value)} {self.reason}"
        if self.hint:
            text += f". HINT: {self.hint}"
        return text


def _show(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, str):
        return value if value and value.strip() == value and " " not in value else repr(value)
    return str(value)


class SpecError(JzkError):
    """The requested job cannot run as asked; raised before anything is submitted."""

    exit_code = 2

    def __init__(self, problems: list[Problem] | Problem):
        self.problems = [problems] if isinstance(problems, Problem) else list(problems)
        super().__init__(self._render())

    def _render(self) -> str:
        if len(self.problems) == 1:
            return str(self.problems[0])
        lines = [f"{len(self.problems)} problems with this request:"]
        lines += [f"  - {p}" for p in self.problems]
        return "\n".join(lines)


class MissingExtra(JzkError):
    """A command needs a package of an optional extra that this Python lacks (extras.py)."""


class HostlistError(JzkError, ValueError):
    """A Slurm hostlist expression that cannot be parsed."""


class RankEnvError(JzkError):
    """Launcher variables (SLURM_*, torchrun) that contradict each other."""


# ---- configuration and rendering ----------------------------------------------------------


class ConfigError(JzkError):
    """The overrides or the config tree could not be composed (config/compose.py)."""


class TimeFormatError(JzkError, ValueError):
    """Why a value is not a Slurm time; the caller names the key and the value."""


class RenderError(JzkError, ValueError):
    """A value that cannot be written into a script safely (slurm/sbatch.py)."""


# ---- Slurm and launching --------------------------------------------------------------------


class SlurmCommandError(JzkError):
    """A Slurm command (sbatch, squeue, scontrol...) failed; the message is Slurm's."""


class LaunchError(JzkError):
    """A sweep that cannot be submitted as asked; nothing was submitted."""


class RunsFailed(JzkError):
    """hydra.launcher.wait=true and some runs did not complete."""

    exit_code = 1


class DistSetupError(JzkError):
    """The job's tasks do not match the requested layout, or no device fits."""


class DoctorError(JzkError):
    """`jzk doctor` found a rank that does not answer or a wrong all-reduce result."""

    exit_code = 1


# ---- checkpoints ------------------------------------------------------------------------------


class ManifestError(JzkError, ValueError):
    """A manifest.json that cannot be read (ckpt/layout.py)."""


class RunDirError(JzkError):
    """The run directory cannot be created or written (read-only, permissions, full)."""


class RunDirBusy(RunDirError):
    """Another live process writes this run directory (lease.py): refused before
    anything is loaded or written."""


class NonFiniteLoss(JzkError):
    """A NaN or infinite loss with train.nonfinite=stop: every rank stops at that step."""


class CheckpointWriteError(JzkError):
    """A save could not be written (full disk or quota, I/O error); every rank raises it
    for the same step, the partial folder is gone and the previous checkpoint is kept."""


class ResumeError(JzkError):
    """A checkpoint that this run cannot resume from."""


class CheckpointNotFound(JzkError):
    """`jzk checkpoints` found nothing to show."""

    exit_code = 1


class ContractError(JzkError):
    """Your model, data or loss does not meet a contract of jeanzay_kit/contracts.py: found by
    `jzk check` or the check at the start of a run, said once, never retried."""


class CompileError(JzkError):
    """torch.compile could not compile the model (train.compile): every rank meets it
    alike, said once with the way out, never retried."""


def is_loader_death(err: BaseException) -> bool:
    """torch's words for a dead loader worker: raised by next() on the iterator, or by
    the SIGCHLD handler it installs, wherever the training process is at that moment (a
    checkpoint save included)."""
    return isinstance(err, RuntimeError) and "DataLoader worker (pid" in str(err)


class PeerFailed(JzkError):
    """This rank stops because another rank failed; that rank says why (runtime/run.py
    says this one only stopped)."""

    exit_code = 1


# What a collective raises on a rank whose peer died (gloo, NCCL, the TCP store): the
# follow-on of another rank's failure, not a failure of its own.
_PEER_GONE = (
    "Connection closed by peer",
    "Connection reset by peer",
    "remote worker crashing",
    "Broken pipe",
    "NCCL communicator was aborted",
    "Socket Timeout",
)


def is_peer_failure(err: BaseException) -> bool:
    if isinstance(err, PeerFailed):
        return True
    text = f"{type(err).__name__}: {err}"
    return any(marker in text for marker in _PEER_GONE)


class LoaderWorkerDied(JzkError):
    """A DataLoader worker process of one rank died (killed, out of memory): a failure of
    that rank, reported by it and retried within the restart budget."""

    exit_code = 1
    rank_local = True  # only the rank that saw it knows: it reports it, not rank 0
