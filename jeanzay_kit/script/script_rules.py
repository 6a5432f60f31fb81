"""What a script task's run directory means: which command it belongs to, whether an
attempt resumes, whether the script left anything to resume from. Pure: names and values
in, decisions out (node/script_task.py reads the files and runs the command).

A script that does not know the toolkit resumes through its own arguments: its
`job.resume_args` (`--init_from=resume`) are added to the command on every attempt after
one that left something of the script's in the run directory. The run directory belongs
to one command: `job.entry` and `job.args` (but for `job.args_may_change`, e.g. a log
level) are recorded in command.json at the first start, and another command meeting it is
refused naming the difference, as a changed config meeting a checkpoint is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from jeanzay_kit.config.identity import script_identity
from jeanzay_kit.config.schema import SCRIPT_OUTPUTS
from jeanzay_kit.values import items


@dataclass(frozen=True)
class ScriptCommand:
    """The command of a script task, split as the run directory sees it."""

    entry: str
    args: tuple[str, ...]
    resume_args: tuple[str, ...] = ()
    may_change: tuple[str, ...] = ()  # option names whose value is not the run's identity
    # job.script_outputs: where it writes in the project (node/script_cwd_rules.py); how
    # it runs, not which run it is.
    outputs: tuple[str, ...] = SCRIPT_OUTPUTS

    def identity(self) -> dict[str, object]:
        """What names the run: the entry and the arguments that are not may_change
        (config/identity.py script_identity, which also names the run directory)."""
        return script_identity(
            {"entry": self.entry, "args": self.args, "args_may_change": self.may_change}
        )

    def record(self) -> dict[str, object]:
        """What command.json keeps: the whole command, so that an option declared in
        job.args_may_change later is left out of the comparison on both sides."""
        return {"entry": self.identity()["entry"], "args": list(self.args)}

    def recorded_identity(self, record: Mapping[str, object]) -> dict[str, object]:
        """A command.json record seen with this command's job.args_may_change."""
        args = [str(a) for a in items(record.get("args"))]
        return script_identity(
            {"entry": record.get("entry", ""), "args": args, "args_may_change": self.may_change}
        )

    @classmethod
    def from_argv(
        cls,
        argv: Sequence[str],
        resume_args: Sequence[str] = (),
        may_change: Sequence[str] = (),
        outputs: Sequence[str] = SCRIPT_OUTPUTS,
    ) -> ScriptCommand:
        """From `python ENTRY ARGS...`, as the rendered script runs it (ENTRY: a script
        path or `-m module`)."""
        words = 3 if argv[1:2] == ["-m"] else 2
        return cls(
            " ".join(argv[1:words]),
            tuple(argv[words:]),
            tuple(resume_args),
            tuple(may_change),
            tuple(outputs),
        )

    def argv_tail(self, resuming: bool) -> list[str]:
        """The arguments of one attempt: job.args, then job.resume_args when resuming."""
        return [*self.args, *(self.resume_args if resuming else ())]


def command_differences(old: Mapping[str, object], new: Mapping[str, object]) -> list[str]:
    """How the identity recorded in a run directory differs from this command's."""
    out = []
    if old.get("entry") != new.get("entry"):
        out.append(f"job.entry: {old.get('entry')!r} -> {new.get('entry')!r}")
    a, b = items(old.get("args")), items(new.get("args"))
    if a != b and len(a) == len(b):
        changed = [f"{x!r} -> {y!r}" for x, y in zip(a, b, strict=True) if x != y]
        out.append(f"job.args: {', '.join(changed)}")
    elif a != b:
        gone = [x for x in a if x not in b]
        added = [x for x in b if x not in a]
        if gone or added:
            detail = ", ".join(
                [*(f"{x!r} removed" for x in gone), *(f"{x!r} added" for x in added)]
            )
        else:
            detail = "the same arguments in another order"
        out.append(f"job.args: {detail}")
    return out


def refusal(run_dir: str, differences: Sequence[str]) -> str:
    """The message for a command meeting a run directory of another command."""
    return (
        f"job.run_dir={run_dir} belongs to another command ({'; '.join(differences)}): "
        "its files are another experiment's. HINT: leave job.run_dir to its default "
        "(each command gets its own), give this one another job.run_dir, or, if the "
        "changed options do not change what is computed, name them in "
        "job.args_may_change='[--option]'"
    )


def requeue_note(
    wrote: bool,
    resume_args: Sequence[str],
    run_dir: str,
    requeued: bool = True,
    hydra_hint: str | None = None,
) -> str:
    """What a stop means for the next attempt, in one sentence a user acts on. `wrote`
    is observed (files the attempt wrote: script/script_files.py wrote_since); `requeued`:
    a Slurm job goes on by itself, a local run when its command is run again.
    hydra_hint: a Hydra app's fix (script/hydra_app_rules.py stop_hint), said instead of
    the script's `--out_dir`."""
    nxt = "the next attempt" if requeued else "the next run of this command"
    if wrote and resume_args:
        return (
            f"{nxt} runs the script again with {' '.join(resume_args)} "
            f"(job.resume_args) in {run_dir}"
        )
    if wrote:
        return f"{nxt} runs the script again in {run_dir}, where it wrote its files"
    start = "the requeued job" if requeued else "the next run of this command"
    if hydra_hint is not None:
        return (
            f"the Hydra app wrote nothing under its run directory {run_dir} (Hydra's own "
            f"records aside) nor where its arguments point during this attempt: {start} "
            f"will start it from the beginning. {hydra_hint}"
        )
    return (
        f"the script wrote nothing under its run directory {run_dir} nor where its "
        f"arguments point during this attempt: {start} will start the script from the "
        "beginning. HINT: make it save there (a relative path such as snapshot.pt lands "
        "in <run_dir>/cwd; or job.args='[\"--out_dir=${job.run_dir}\"]', or read "
        "$JZK_RUN_DIR) and resume from it (job.resume_args='[\"--init_from=resume\"]')"
    )


def resume_warning(
    args: Sequence[str],
    resume_args: Sequence[str],
    script_text: str | None,
    run_dir: str,
    uses_toolkit: bool = False,
) -> str | None:
    """Before the queue: a script that can be requeued but shows no way to resume (no
    resume arguments, no run directory in its arguments, no JZK_RUN_DIR in its source).
    uses_toolkit: it or a module of the user's it imports names the toolkit
    (script/reach.py): a loop on the session API resumes from the run directory's
    checkpoints by itself, wherever its Hydra output directory is."""
    if resume_args or uses_toolkit:
        return None
    if any("JZK_RUN_DIR" in a or "${job.run_dir}" in a or run_dir in a for a in args):
        return None
    if script_text is not None and "JZK_RUN_DIR" in script_text:
        return None
    from jeanzay_kit.script.hydra_app_rules import is_hydra_app, stop_hint

    if script_text is not None and is_hydra_app(script_text):
        # Its output directory is <run_dir>/cwd at every start: saving there resumes.
        if any(word in script_text for word in ("HydraConfig", "output_dir", "getcwd")):
            return None
        return (
            "job.entry is a Hydra app that shows no use of its output directory, and "
            "job.resume_args is empty: after a time limit or a preemption the requeued job "
            "will start it from the beginning unless it saves where it stands. "
            + stop_hint("<run_dir>/cwd", args)
        )
    return (
        "job.entry is a script that neither gets the run directory in its arguments nor "
        "reads $JZK_RUN_DIR, and job.resume_args is empty: after a time limit or a "
        "preemption the requeued job will start it from the beginning, unless it saves to "
        "a relative path and resumes from it by itself (it runs in <run_dir>/cwd). HINT: add "
        "'--out_dir=${job.run_dir}' (your script's option) to job.args and its resume flag "
        "to job.resume_args, e.g. job.resume_args='[--init_from=resume]'"
    )


@dataclass(frozen=True)
class ResumeTarget:
    """A path job.resume_args names, as the attempt would meet it in its working directory."""

    value: str  # as the user wrote it
    real: str | None  # where it leads (links followed); None: nothing there
    inside_run: bool  # under the run directory
    mtime: float | None  # when it was written


def resume_refusal(targets: Sequence[ResumeTarget], run_dir: str, run_start: float) -> str | None:
    """Before an attempt that resumes: the one line refusing it when a path of
    job.resume_args would read something other than the run's own files (nothing there,
    outside the run, older than the run's first start), else None."""
    for t in targets:
        if t.real is None:
            why = "this run has not written it (nothing there in its working directory)"
        elif not t.inside_run:
            why = f"it leads outside the run, to {t.real}"
        elif t.mtime is not None and t.mtime < run_start:
            why = "it is older than the run's first start: another run wrote it"
        else:
            continue
        return (
            f"job.resume_args names {t.value}, which is not this run's own checkpoint: {why}. "
            f"The script was not started. HINT: job.resume_args names what the run saves "
            f"itself (its output place, resolved in {run_dir}/cwd, e.g. --resume "
            "output/train/<experiment>/last.pth.tar); to start from another file, pass it "
            "in job.args (timm: --initial-checkpoint)"
        )
    return None


def rerun_note(run_dir: str, resume_args: Sequence[str], ended: str) -> str:
    """The one line said when a command meets its own run directory whose script already
    ran to its end (`ended`: that end's line): what this command will do, and how to
    start a new run instead."""
    if resume_args:
        does = (
            f"runs the script again there with {' '.join(resume_args)} (job.resume_args): "
            "it goes on from its own last checkpoint"
        )
    else:
        does = (
            "runs the script again in place, on the files it left there (a script that "
            "does not resume by itself starts over and overwrites them)"
        )
    return (
        f"{run_dir} holds this command's run, which ran to its end ({ended}): this command "
        f"{does}. HINT: to start a new run instead, give it another job.run_dir "
        f"(job.run_dir={run_dir}-2) or remove {run_dir}"
    )


def changed_options(old: Sequence[str], new: Sequence[str]) -> list[str]:
    """The options (`--epochs`) whose value differs between two argument lists, or
    that only one of them has (`--name=value` and `--name value` alike)."""
    a, b = _options(old), _options(new)
    return sorted(k for k in a.keys() | b.keys() if k not in a or k not in b or a[k] != b[k])


def _options(args: Sequence[str]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for i, arg in enumerate(args):
        if not arg.startswith("-") or arg == "--":
            continue
        name, sep, value = arg.partition("=")
        if sep:
            out[name] = value
        else:
            following = args[i + 1] if i + 1 < len(args) else None
            out[name] = following if following and not following.startswith("-") else None
    return out
