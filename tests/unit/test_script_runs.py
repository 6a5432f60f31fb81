"""A script task's run (issue 32): the arguments as users type them, the run's identity,
the resume arguments, the notes at a stop and before the queue. Pure rules, Hydra's own
override parser, and the run-directory files on a real folder."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser

from jeanzay_kit.config.command_line import (
    args_override,
    quote_argument_lists,
    split_script_args,
    with_script_args,
)
from jeanzay_kit.config.compose import compose_config
from jeanzay_kit.config.identity import identity_args, run_hash
from jeanzay_kit.config.spec import build_job_spec
from jeanzay_kit.errors import JzkError
from jeanzay_kit.rundir.run_directory import RunDir
from jeanzay_kit.script.script_files import (
    check_resume,
    claim_run_dir,
    record_attempt,
    script_writes,
)
from jeanzay_kit.script.script_rules import (
    ResumeTarget,
    ScriptCommand,
    requeue_note,
    rerun_note,
    resume_refusal,
    resume_warning,
)

# Arguments a script may take, each of which must reach it byte for byte.
AWKWARD_ARGUMENTS = [
    "--dataset=shakespeare_char",
    "--lr=3e-4",
    "two words",
    "it's",
    'say "hi"',
    "$HOME",
    "a$b$",
    "c,d",
    "[x]",
    "{y: 1}",
    "back\\slash",
    "tail\\",
    "x\\'y",
    "=",
    "",
    "--flag",
    "ünïcode",
]


@pytest.mark.parametrize("argument", AWKWARD_ARGUMENTS)
def test_an_argument_after_the_separator_survives_hydras_parser(argument: str) -> None:
    override = args_override(["--first", argument])
    parsed = OverridesParser.create().parse_override(override)
    assert parsed.key_or_group == "job.args" and parsed.value() == ["--first", argument]


def test_the_arguments_after_the_separator_become_job_args() -> None:
    before, after = split_script_args(["cluster=local", "--", "config/x.py", "--", "--lr=1"])
    assert before == ["cluster=local"] and after == ["config/x.py", "--", "--lr=1"]
    assert split_script_args(["train.steps=3"]) == (["train.steps=3"], None)
    cfg = compose_config(with_script_args(before, after))
    assert cfg["job"]["args"] == ["config/x.py", "--", "--lr=1"]
    with pytest.raises(JzkError, match="both set the script's arguments"):
        with_script_args(["job.args=[a]"], ["b"])


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("job.args=[--dataset=x,--device=cpu]", ["--dataset=x", "--device=cpu"]),
        ("job.args=[--steps,40]", ["--steps", "40"]),
        ('job.args=["a,b",--x=1]', ["a,b", "--x=1"]),
        ("job.resume_args=[--init_from=resume]", None),
        ("job.args=[]", []),
    ],
)
def test_an_argument_list_as_users_type_it(override: str, expected: list[str] | None) -> None:
    """`job.args='[--dataset=x,--device=cpu]'` failed in Hydra's parser (issue 32)."""
    cfg = compose_config(quote_argument_lists([override]))
    if expected is None:
        assert cfg["job"]["resume_args"] == ["--init_from=resume"]
    else:
        assert [str(a) for a in cfg["job"]["args"]] == expected


def test_a_sweep_of_argument_lists_is_left_to_hydra() -> None:
    assert quote_argument_lists(["job.args=[a],[b]"]) == ["job.args=[a],[b]"]


@pytest.mark.parametrize(
    ("args", "may_change", "identity"),
    [
        (["--lr=1", "--log_level=info"], ["--log_level"], ["--lr=1"]),
        (["--lr", "1", "--log_level", "debug", "x.py"], ["--log_level"], ["--lr", "1", "x.py"]),
        (["--verbose", "--lr=1"], ["--verbose"], ["--lr=1"]),  # a flag without a value
        (["--lr=1"], [], ["--lr=1"]),
    ],
)
def test_options_that_may_change_are_not_the_runs_identity(
    args: list[str], may_change: list[str], identity: list[str]
) -> None:
    assert identity_args(args, may_change) == identity


def _run_dir(*overrides: str) -> str:
    return build_job_spec(compose_config(list(overrides))).checkpoint.run_dir


def test_a_script_run_is_named_by_its_command() -> None:
    """Two runs differing only in job.args shared a run directory (issue 32)."""
    one = _run_dir("job.entry=train.py", "job.args=[--learning_rate=0.01]")
    two = _run_dir("job.entry=train.py", "job.args=[--learning_rate=0.02]")
    other_entry = _run_dir("job.entry=train2.py", "job.args=[--learning_rate=0.01]")
    assert len({one, two, other_entry}) == 3
    # What does not change the computation keeps the run directory: resume arguments,
    # declared options, the loop's keys (a script does not run the loop), the cluster.
    same = [
        _run_dir("job.entry=train.py", "job.args=[--learning_rate=0.01]", *more)
        for more in (
            ("job.resume_args=[--init_from=resume]",),
            ("job.args_may_change=[--log_level]", "job.args=[--learning_rate=0.01,--log_level=5]"),
            ("train.steps=7", "model.hidden=3"),
            ("resources.gpus_per_node=1",),
        )
    ]
    assert set(same) == {one}
    # `${job.run_dir}` in the arguments is hashed as written: no cycle, and it resolves.
    spec = build_job_spec(
        compose_config(["job.entry=train.py", "job.args=['--out_dir=${job.run_dir}']"])
    )
    assert spec.job.args == (f"--out_dir={spec.checkpoint.run_dir}",)


def test_the_toolkits_loop_hashes_its_config_as_before() -> None:
    cfg = compose_config(["train.steps=5"])
    from jeanzay_kit.config.identity import resume_hash

    assert run_hash(cfg) == resume_hash(cfg)


def test_the_loops_keys_are_neither_checked_nor_refused_for_a_script() -> None:
    refused = ("train.global_batch_size=30", "resources.gpus_per_node=4")
    with pytest.raises(JzkError, match="global_batch_size"):
        build_job_spec(compose_config(list(refused)))
    spec = build_job_spec(compose_config(["job.entry=train.py", *refused]))
    (note,) = [n for n in spec.notes if "toolkit's training loop" in n]
    assert note.startswith("train.global_batch_size: keys of the toolkit's training loop")
    quiet = build_job_spec(compose_config(["job.entry=train.py"]))
    assert not any("toolkit's training loop" in n for n in quiet.notes)


def test_a_run_directory_belongs_to_one_command(tmp_path: Path) -> None:
    run = tmp_path / "run"
    first = ScriptCommand("train.py", ("--lr=1", "--log=a"), may_change=("--log",))
    claim_run_dir(RunDir(run), first)
    claim_run_dir(
        RunDir(run), ScriptCommand("train.py", ("--lr=1", "--log=b"), may_change=("--log",))
    )
    claim_run_dir(
        RunDir(run), ScriptCommand("train.py", ("--lr=1",), ("--init_from=resume",), ("--log",))
    )
    with pytest.raises(JzkError) as info:
        claim_run_dir(
            RunDir(run), ScriptCommand("train.py", ("--lr=2",), may_change=("--log",)), False
        )
    assert "belongs to another command (job.args: '--lr=1' -> '--lr=2')" in str(info.value)
    assert "job.args_may_change" in str(info.value)
    with pytest.raises(JzkError, match=r"job.entry: 'train.py' -> 'other.py'"):
        claim_run_dir(RunDir(run), ScriptCommand("other.py", ("--lr=1", "--log=a")))
    # An option declared later is left out on both sides (the record keeps every argument).
    claim_run_dir(
        RunDir(run),
        ScriptCommand("train.py", ("--lr=1", "--log=z", "--seconds=3"), (), ("--log", "--seconds")),
    )
    with pytest.raises(JzkError, match="'--log=a' removed"):
        claim_run_dir(RunDir(run), ScriptCommand("train.py", ("--lr=1",)))


def test_resume_arguments_follow_what_an_earlier_attempt_left(tmp_path: Path) -> None:
    command = ScriptCommand("train.py", ("--out_dir=x",), ("--init_from=resume",))
    run = tmp_path / "run"
    run.mkdir()
    # The toolkit's own files are no reason to resume.
    toolkit = ("command.json", "provenance", "outcome.json", "train.log", ".jzk-requeue")
    for name in (*toolkit, "job.sbatch", "manifest.jsonl", ".manifest.jsonl.tmp"):
        (run / name).write_text("")
    start = time.time()
    assert script_writes(RunDir(run), start) == (False, False)
    assert command.argv_tail(script_writes(RunDir(run), start)[0]) == ["--out_dir=x"]
    ckpt = run / "out" / "ckpt.pt"
    ckpt.parent.mkdir()
    ckpt.write_text("state")
    assert script_writes(RunDir(run), start) == (False, True)  # written during this attempt
    os.utime(ckpt, (start - 60, start - 60))  # ... or by an earlier one
    assert script_writes(RunDir(run), start) == (True, False)
    assert command.argv_tail(True) == ["--out_dir=x", "--init_from=resume"]


def test_a_stop_says_what_the_next_attempt_does() -> None:
    nothing = requeue_note(False, (), "/runs/r")
    assert "wrote nothing under its run directory /runs/r" in nothing
    assert "the requeued job will start the script from the beginning" in nothing
    assert "--out_dir=${job.run_dir}" in nothing and "job.resume_args" in nothing
    assert "--init_from=resume" in requeue_note(True, ("--init_from=resume",), "/runs/r")


@pytest.mark.parametrize(
    ("args", "resume_args", "text", "warned"),
    [
        (["config/x.py"], [], "print(1)", True),
        (["--out_dir=outputs/jzk-1"], [], "print(1)", False),  # the run dir, resolved
        (["config/x.py"], ["--init_from=resume"], "print(1)", False),
        (["config/x.py"], [], "os.environ['JZK_RUN_DIR']", False),
    ],
)
def test_a_script_that_would_restart_from_zero_is_warned_before_the_queue(
    args: list[str], resume_args: list[str], text: str, warned: bool
) -> None:
    assert (resume_warning(args, resume_args, text, "outputs/jzk-1") is not None) is warned


@pytest.mark.parametrize(
    ("target", "why"),
    [
        (ResumeTarget("out/last.pth.tar", "/r/cwd/out/last.pth.tar", True, 200.0), None),
        (ResumeTarget("out/last.pth.tar", None, False, None), "has not written it"),
        (ResumeTarget("old/last.pth.tar", "/proj/old/last.pth.tar", False, 50.0), "outside"),
        (ResumeTarget("out/last.pth.tar", "/r/cwd/out/last.pth.tar", True, 50.0), "older"),
    ],
)
def test_a_resume_reads_only_the_runs_own_files(target: ResumeTarget, why: str | None) -> None:
    refused = resume_refusal([target], "/r", run_start=100.0)
    if why is None:
        assert refused is None
    else:
        assert refused is not None and why in refused and target.value in refused
        assert "job.args" in refused and "\n" not in refused


def test_a_resume_path_leading_into_the_project_is_refused(tmp_path: Path) -> None:
    """Issue 65: job.resume_args naming an earlier plain run's file of the project (here
    a link in the working directory, as a snapshot's or a project's) is refused before
    the script starts; the run's own file, written since its first start, is not."""
    run_dir, project = tmp_path / "run", tmp_path / "proj"
    (project / "old").mkdir(parents=True)
    (project / "old" / "last.pth.tar").write_text("another experiment's")
    cwd = run_dir / "cwd"
    (cwd / "output" / "tiny").mkdir(parents=True)
    (cwd / "old").symlink_to(project / "old")
    record_attempt(RunDir(run_dir), time.time() - 60, None)
    (cwd / "output" / "tiny" / "last.pth.tar").write_text("the run's own")
    check_resume(RunDir(run_dir), ["--resume", "output/tiny/last.pth.tar"])
    with pytest.raises(JzkError, match="leads outside the run"):
        check_resume(RunDir(run_dir), ["--resume", "old/last.pth.tar"])
    with pytest.raises(JzkError, match="has not written it"):
        check_resume(RunDir(run_dir), ["--resume=output/other/last.pth.tar"])
    check_resume(RunDir(run_dir), ["--init_from=resume"])  # a flag's value, no path


def test_a_complete_run_met_again_says_what_the_command_does() -> None:
    plain = rerun_note("outputs/jzk-1", [], "done: the command exited 0")
    assert "ran to its end (done: the command exited 0)" in plain
    assert "overwrites" in plain and "job.run_dir=outputs/jzk-1-2" in plain
    resumed = rerun_note("outputs/jzk-1", ["--resume", "out/last.pth.tar"], "exit 0")
    assert "--resume out/last.pth.tar (job.resume_args)" in resumed
