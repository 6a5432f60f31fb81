"""Every command the docs show runs as written (issue 69 point 7): the README's and
docs/*.md's shell blocks are tested like code.

The convention: each ```bash / ```console block has, on the line just before its fence
(same indentation), a marker saying where it runs:

    <!-- runs: local -->                 runs here: this test runs it
    <!-- runs: local, exit 2 -->         ... and ends with status 2 (below)
    <!-- runs: local, timeout 120 -->    ... in at most 120 s (default 60)
    <!-- runs: local, prints "exit 3" --> ... and its output holds that text
    <!-- runs: slurm -->                 needs a Slurm cluster: the local test cluster
                                         (scripts/slurm-local) or a site; not run here
    <!-- runs: no (WHY) -->              cannot run here as written: Jean Zay, SSH, an
                                         install, a placeholder, too slow (WHY says which)

test_every_shell_block_is_marked fails naming file:line for a block without one.
test_every_jzk_command_and_flag_the_docs_show_exists reads every block, whatever its
marker: each `jzk ...` names a command and flags of tests/golden/surface.txt.
test_local_blocks_run runs each page's `local` blocks in order, in a fresh copy of the
repository (one per page: what a new user has after `git clone` and scripts/setup.sh), as
a user who ran `source .venv/bin/activate`: the venv's bin/ first on PATH, `.venv`
linked to it, HOME a folder of the test's. Each block starts in the copy's root in a
shell of its own: a page's blocks share the folder, not the shell, so a block that needs
another folder `cd`s there itself (the pages say so at their top). A bash block runs
under `bash -e -o pipefail` and must end with the marker's status (0 unless `exit N`).
A console block's `$ ` lines are commands, each run in a shell of its own, in the folder
the one before it ended in (`$ cd myproj` holds for the rest of the block); the lines
after one are its sample output: each must appear in what it printed, spaces collapsed,
`...`/`…` standing for any text (a line of only `...` is skipped). A command that shows
output ends with the marker's status, one that shows none (`$ cd`, `$ cp`) with 0.
A timeout is per bash block or console command.
Slurm- and no-marked blocks do not run here (tests/slurm/ covers the Slurm paths).
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^(\s*)```(bash|console|sh|shell)\s*$")
MARKER = re.compile(r"^\s*<!-- runs: (local|slurm|no)(.*?) -->\s*$")
ELISION = re.compile(r"\.\.\.|…")
DEFAULT_TIMEOUT = 60


@dataclass
class Block:
    page: Path
    line: int  # the fence's line, 1-based
    kind: str  # bash or console
    text: str  # dedented
    where: str | None  # local, slurm, no; None: no marker
    options: str

    @property
    def at(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"

    @property
    def exit_code(self) -> int:
        found = re.search(r"\bexit (\d+)", re.sub(r'"[^"]*"', "", self.options))
        return int(found.group(1)) if found else 0

    @property
    def prints(self) -> list[str]:
        """The quoted texts after `prints`: what a bash block's output must hold."""
        _, _, said = self.options.partition("prints ")
        return re.findall(r'"([^"]+)"', said)

    @property
    def timeout(self) -> int:
        found = re.search(r"\btimeout (\d+)", re.sub(r'"[^"]*"', "", self.options))
        return int(found.group(1)) if found else DEFAULT_TIMEOUT


def blocks(page: Path) -> list[Block]:
    lines = page.read_text().splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if not fence:
            if lines[i].lstrip().startswith("```"):  # another language: skip its body
                i += 1
                while i < len(lines) and not lines[i].lstrip().startswith("```"):
                    i += 1
            i += 1
            continue
        indent = len(fence.group(1))
        end = i + 1
        while not lines[end].lstrip().startswith("```"):
            end += 1
        body = "\n".join(line[indent:] for line in lines[i + 1 : end])
        marker = MARKER.match(lines[i - 1]) if i else None
        out.append(
            Block(
                page,
                i + 1,
                fence.group(2),
                body,
                marker.group(1) if marker else None,
                marker.group(2).strip() if marker else "",
            )
        )
        i = end + 1
    return out


ALL = [block for page in PAGES for block in blocks(page)]


def test_every_shell_block_is_marked() -> None:
    assert len(ALL) > 80  # the pages were read
    unmarked = [b.at for b in ALL if b.where is None]
    assert not unmarked, (
        "shell blocks without a `<!-- runs: local|slurm|no (why) -->` line just before "
        f"their fence (tests/docs/test_doc_blocks.py): {unmarked}"
    )
    unexplained = [b.at for b in ALL if b.where == "no" and not re.fullmatch(r"\(.+\)", b.options)]
    assert not unexplained, f"`runs: no` without its reason in parentheses: {unexplained}"


SKIPPED = {".git", ".venv", "outputs", "multirun", "logs", "__pycache__", ".pytest_cache"}


SURFACE = REPO / "tests" / "golden" / "surface.txt"  # every command and flag of jzk
JZK = re.compile(r"(?:^|[\s(]|bin/)jzk(?=\s|$)")
SHELL_ENDS = {"|", "||", "&&", ";", "&", ")", ">", "2>&1"}


def _surface() -> dict[str, set[str]]:
    """{command: its flags} from the golden surface (`cmd   jzk ckpt list`, `flag  jzk
    validate -m, --multirun = false`)."""
    lines = SURFACE.read_text().splitlines()
    out: dict[str, set[str]] = {line[6:].strip(): set() for line in lines if line[:4] == "cmd "}
    for line in lines:
        if line[:5] != "flag ":
            continue
        words = line[6:].split(" = ")[0].split()
        command = max(
            (" ".join(words[:n]) for n in range(1, len(words) + 1)),
            key=lambda c: len(c) if c in out else -1,
        )
        out[command] |= {w.rstrip(",") for w in words if w.startswith("-")}
    return out


def _command_lines(block: Block) -> list[str]:
    """The lines a shell reads: continuations joined; a console block's `$ ` lines."""
    text = block.text.replace("\\\n", " ")
    if block.kind == "console":
        return [line[2:] for line in text.splitlines() if line.startswith("$ ")]
    return text.splitlines()


def test_every_jzk_command_and_flag_the_docs_show_exists() -> None:
    """Static, so it holds for the blocks that cannot run here too: each `jzk ...` a
    block shows names a command of the CLI and only that command's flags (`jzk train`'s
    arguments are Hydra's; words after ` -- ` are the script's)."""
    surface = _surface()
    wrong = []
    for block in ALL:
        for line in _command_lines(block):
            for found in JZK.finditer(line):
                try:
                    words = shlex.split(line[found.end() :], comments=True)
                except ValueError:  # an unbalanced quote of a fragment: not checked
                    continue
                command, i = "jzk", 0
                while i < len(words) and f"{command} {words[i]}" in surface:
                    command, i = f"{command} {words[i]}", i + 1
                has_subcommands = any(c.startswith(command + " ") for c in surface)
                if has_subcommands and i < len(words) and re.fullmatch(r"[a-z]+", words[i]):
                    wrong.append(f"{block.at}: {command} {words[i]} is no command")
                if command == "jzk train":
                    continue
                for word in words[i:]:
                    if word == "--" or word in SHELL_ENDS:
                        break
                    flag = word.split("=")[0]
                    if re.match(r"--?[a-zA-Z]", flag) and flag not in surface[command] | {
                        "-h",
                        "--help",
                    }:
                        wrong.append(f"{block.at}: {command} has no {flag}")
    assert not wrong, wrong


def _tracked_files() -> list[str]:
    """What a clone holds: git's tracked files and the untracked ones it does not ignore;
    without git (an unpacked archive), every file outside build and run folders."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        listed = [
            str(path.relative_to(REPO))
            for path in REPO.rglob("*")
            if not SKIPPED & set(path.relative_to(REPO).parts)
        ]
    return [name for name in listed if (REPO / name).is_file()]


def _project(tmp: Path) -> tuple[Path, dict[str, str]]:
    """A fresh clone's worth of files, its .venv the one running this test, and the
    environment of a shell where it is activated."""
    root = tmp / "clone"
    for name in _tracked_files():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, root / name)
    venv = Path(sys.prefix)
    (root / ".venv").symlink_to(venv)
    home = tmp / "home"
    home.mkdir()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SLURM_", "JZK_", "PYTEST_", "TORCHELASTIC_"))
        and k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    }
    env |= {
        "HOME": str(home),
        "VIRTUAL_ENV": str(venv),
        "PATH": f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        # The copy's package, whichever checkout the venv's editable install points at.
        "PYTHONPATH": str(root),
        "COLUMNS": "200",
    }
    return root, env


def _commands(block: Block) -> list[tuple[str, list[str]]]:
    """(script, sample lines) to run: a bash block is one script; a console block one per
    `$ ` line (with its `\\` continuations), followed by the lines it shows."""
    if block.kind != "console":
        return [(block.text, [])]
    out: list[tuple[str, list[str]]] = []
    continued = False
    for line in block.text.splitlines():
        if line.startswith("$ ") or continued:
            command = line[2:] if line.startswith("$ ") and not continued else line
            if continued:
                out[-1] = (out[-1][0] + "\n" + command, out[-1][1])
            else:
                out.append((command, []))
            continued = line.endswith("\\")
        elif out:
            out[-1][1].append(line)
    return out


def _squeeze(text: str) -> str:
    return " ".join(text.split())


def _missing(samples: list[str], output: str) -> list[str]:
    printed = [_squeeze(line) for line in output.splitlines()]
    missing = []
    for sample in samples:
        parts = [_squeeze(p) for p in ELISION.split(sample)]
        parts = [p for p in parts if p]
        if not parts:
            continue
        pattern = re.compile(".*".join(re.escape(p) for p in parts))
        if not any(pattern.search(line) for line in printed):
            missing.append(sample)
    return missing


LOCAL_PAGES = sorted({b.page for b in ALL if b.where == "local"}, key=PAGES.index)


def _run(block: Block, script: str, cwd: Path, env: dict[str, str]) -> tuple[int, str, Path]:
    """(exit status, what it printed, the folder it ended in). The shell leads a process
    group of its own, ended with what it left running (a `&` of the block, or all of it
    at the timeout)."""
    where = Path(env["HOME"]) / ".doc-block-cwd"
    where.unlink(missing_ok=True)
    traced = f"trap 'pwd > \"{where}\"' EXIT\n{script}"
    shell = subprocess.Popen(
        ["bash", "-e", "-o", "pipefail", "-c", traced],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = shell.communicate(timeout=block.timeout)
    except subprocess.TimeoutExpired:
        os.killpg(shell.pid, signal.SIGKILL)
        output, _ = shell.communicate()
        pytest.fail(
            f"{block.at}: still running after {block.timeout} s:\n{script}\n"
            f"--- output ---\n{output[-3000:]}"
        )
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(shell.pid, signal.SIGKILL)
    ended = Path(where.read_text().strip()) if where.exists() else cwd
    return shell.returncode, output, ended


@pytest.mark.timeout(600)  # the blocks' own timeouts come first (a page: 30 s or so)
@pytest.mark.parametrize("page", LOCAL_PAGES, ids=lambda p: p.name)
def test_local_blocks_run(page: Path, tmp_path: Path) -> None:
    root, env = _project(tmp_path)
    for block in (b for b in blocks(page) if b.where == "local"):
        cwd = root  # every block starts in the clone's root
        for script, samples in _commands(block):
            began = time.monotonic()
            status, output, cwd = _run(block, script, cwd, env)
            # A console command that shows output ends with the marker's status; one that
            # shows none (a `cd`, a `cp`) ends 0. A bash block ends with the marker's.
            expected = block.exit_code if samples or block.kind != "console" else 0
            assert status == expected, (
                f"{block.at}: exit {status}, the doc expects {expected} "
                f"({time.monotonic() - began:.1f} s):\n{script}\n--- output ---\n"
                f"{output[-4000:]}"
            )
            print(f"{block.at}: exit {status} in {time.monotonic() - began:.1f} s")
            missing = _missing(samples or block.prints, output)
            assert not missing, (
                f"{block.at}: the sample's lines {missing} are not in what it printed:\n"
                f"{script}\n--- output ---\n{output[-4000:]}"
            )
