"""A script task that is a Hydra app (`@hydra.main`): one output directory inside its run
directory, the same at every start. Pure: the script's source and its arguments in, the
arguments to add and the words of the hint out (node/script_task.py reads the file).

Run by hand, Hydra makes a new `outputs/<date>/<time>/` at every start, so an app that
saves its checkpoint in its output directory (`HydraConfig.get().runtime.output_dir`,
or `os.getcwd()` with `hydra.job.chdir=True`) never finds it after a requeue. A script
task that is a Hydra app therefore gets `hydra.run.dir=<run_dir>/cwd` (its working
directory, node/script_cwd.py, so a relative path means the same with or without
`hydra.job.chdir`), unless its job.args set hydra.run.dir themselves. The app's Hydra
record lands in `<run_dir>/cwd/.hydra/`, never in the toolkit's `<run_dir>/.hydra/`:
a hydra.run.dir of the user's that is the run directory itself gets
`hydra.output_subdir=cwd/.hydra` added (unless they set it too).

What is a Hydra app: a script whose source calls `hydra.main` (`@hydra.main(...)`,
`from hydra import main`), read with `ast` (a comment or a string naming it does not
count). An app that reaches Hydra another way is not recognised: job.args can say
`hydra.run.dir=${job.run_dir}/cwd` themselves. docs/slurm.md "Coming from
hydra-submitit-launcher".
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Sequence

from jeanzay_kit.rundir import run_layout as layout
from jeanzay_kit.slurm.sbatch import hydra_override

RUN_DIR_KEY = "hydra.run.dir"
OUTPUT_SUBDIR_KEY = "hydra.output_subdir"
# Where the app's own Hydra record goes when its output directory is the run directory.
APP_RECORD = f"{layout.SCRIPT_CWD}/{layout.HYDRA}"


def is_hydra_app(source: str) -> bool:
    """Whether a script's source calls `hydra.main` (as a decorator or not). A source
    that does not parse is not recognised (Python refuses it at start anyway)."""
    if "hydra" not in source:  # most scripts: no parse at all
        return False
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return False
    modules = {"hydra"}  # names bound to the hydra module
    mains: set[str] = set()  # names bound to hydra.main
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules |= {a.asname or a.name for a in node.names if a.name == "hydra"}
        elif isinstance(node, ast.ImportFrom) and node.module == "hydra" and node.level == 0:
            mains |= {a.asname or a.name for a in node.names if a.name == "main"}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id in mains:
            return True
        if (
            isinstance(func, ast.Attribute)
            and func.attr == "main"
            and isinstance(func.value, ast.Name)
            and func.value.id in modules
        ):
            return True
    return False


def _override(key: str, value: str) -> str:
    """key=value, quoted for Hydra's grammar only where the value needs it."""
    if re.fullmatch(r"[\w/.\-]+", value):
        return f"{key}={value}"
    return hydra_override(key, value)


def given_value(args: Sequence[str], key: str) -> str | None:
    """The value job.args give a Hydra key (`key=v`, `+key=v`, `++key=v`), else None."""
    found = None
    for arg in args:
        name, sep, value = arg.partition("=")
        if sep and name.lstrip("+") == key:
            found = value
    return found


def app_args(args: Sequence[str], output_dir: str, is_run_dir: Callable[[str], bool]) -> list[str]:
    """What a Hydra app's command gets after job.args: `hydra.run.dir=<output_dir>` (the
    script's working directory in its run directory), unless job.args set it; then, if
    theirs is the run directory itself (`is_run_dir`), `hydra.output_subdir` so that
    Hydra's record of the app does not replace the toolkit's `.hydra/`."""
    if "-m" in args or "--multirun" in args:
        return []  # a multirun of the app's own: Hydra's sweep.dir, the user's choice
    theirs = given_value(args, RUN_DIR_KEY)
    if theirs is None:
        return [_override(RUN_DIR_KEY, output_dir)]
    if given_value(args, OUTPUT_SUBDIR_KEY) is None and is_run_dir(theirs):
        return [_override(OUTPUT_SUBDIR_KEY, APP_RECORD)]
    return []


def start_line(entry: str, args: Sequence[str], output_dir: str) -> str:
    """The one line a Hydra app's start says (rank 0), so the rule never acts unseen."""
    theirs = given_value(args, RUN_DIR_KEY)
    if theirs is not None:
        return (
            f"jzk: {entry} is a Hydra app: its output directory is {theirs} "
            f"({RUN_DIR_KEY} in job.args)"
        )
    return (
        f"jzk: {entry} is a Hydra app: its output directory is {output_dir} at every start "
        f"({RUN_DIR_KEY}; give {RUN_DIR_KEY}=... in job.args to choose another)"
    )


def is_hydra_record(parts: Sequence[str], job_name: str) -> bool:
    """A file Hydra itself writes at every start of the app in its output directory
    (`cwd/.hydra/*.yaml`, `cwd/<job name>.log`): not the app's progress, so it neither
    makes an attempt resume nor counts as the app having saved (script/script_files.py)."""
    if len(parts) < 2 or parts[0] != layout.SCRIPT_CWD:
        return False
    return parts[1] == layout.HYDRA or (len(parts) == 2 and parts[1] == f"{job_name}.log")


def job_name(entry: str) -> str:
    """Hydra's default hydra.job.name for the entry: the script's (or module's) stem."""
    last = entry.split()[-1] if entry.split() else entry
    name = last.replace("\\", "/").rsplit("/", 1)[-1]
    if name.endswith(".py"):
        return name[: -len(".py")]
    return name.rsplit(".", 1)[-1]


def stop_hint(output_dir: str, args: Sequence[str]) -> str:
    """The HINT of a stop after which a Hydra app would start from the beginning."""
    theirs = given_value(args, RUN_DIR_KEY)
    where = (
        f"your {RUN_DIR_KEY}={theirs} in job.args (make it ${{job.run_dir}}/cwd, or leave it "
        f"out: the toolkit then sets it to {output_dir})"
        if theirs is not None
        else f"{output_dir}, the same at every start ({RUN_DIR_KEY})"
    )
    return (
        "HINT: save the checkpoint in the app's Hydra output directory "
        "(HydraConfig.get().runtime.output_dir, or os.getcwd() with hydra.job.chdir=True), "
        f"which is {where}, and load it from there when it exists"
    )
