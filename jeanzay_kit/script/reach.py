"""What a script of the user's (job.entry) reaches, read before anything runs: whether
it or a module of the user's it imports names the toolkit (a rehearsal follows only a
loop on the session API), or anything that starts a process group (a script started as
several processes that does not is several copies of one run).

Read as text and with `ast`, never imported: from the entry file through the modules it
imports that are the user's own (found beside the entry, under the project's root or
its `src/`, or installed from a folder outside the interpreter's own, as an editable
install is), breadth first. A file that merely names a word looked for (in an import,
or a string given to importlib) counts. Undecided (None) when the entry is not a Python
file of the project (a shell script, a module installed elsewhere): nothing is said.
"""

from __future__ import annotations

import ast
import importlib.util
import shlex
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

TOOLKIT = ("jeanzay_kit",)
# What a script that runs as several processes names to be one run: torch's process
# group, or a library that starts one for it. Generous on purpose: a word here only
# keeps a warning from being said.
DISTRIBUTED = (
    "jeanzay_kit", "torch.distributed", "init_process_group", "DistributedDataParallel",
    "idr_torch", "lightning", "accelerate", "transformers", "deepspeed", "horovod",
    "torchrun", "LOCAL_RANK", "SLURM_PROCID", "WORLD_SIZE",
)  # fmt: skip
MAX_FILES = 2000  # a project's own modules; past this, undecided


def imported_names(source: str) -> list[tuple[str, int]]:
    """Each module an import statement may load, as (dotted name, level): `import a.b`
    gives a.b; `from a import b` gives a and a.b (b may be a submodule); `from . import
    b` gives ("b", 1). A source that does not parse imports nothing here."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    out: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(alias.name, 0) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if base:
                out.append((base, node.level))
            out += [(_join(base, a.name), node.level) for a in node.names if a.name != "*"]
    return out


def _join(base: str, name: str) -> str:
    return f"{base}.{name}" if base else name


def module_files(name: str, level: int, here: Path, roots: Sequence[Path]) -> list[Path]:
    """Where the module may lie among the user's files (pure path arithmetic): relative
    to the importing file's package for a relative import, else under each root."""
    parts = name.split(".") if name else []
    if level > len(here.parents):  # above the filesystem's root: Python refuses it too
        return []
    package = here.parent if level <= 1 else here.parent.parents[level - 2]
    bases = [package] if level else list(roots)
    out = []
    for base in bases:
        target = base.joinpath(*parts)
        out += [target.with_name(target.name + ".py"), target / "__init__.py"]
    return out


def entry_file(entry: str, project: Path) -> Path | None:
    """The Python file job.entry runs (`train.py --x`, `-m pkg.train`), or None."""
    try:
        words = shlex.split(entry)
    except ValueError:
        return None
    if len(words) >= 2 and words[0] == "-m":
        for found in module_files(words[1], 0, project / "x.py", [project, project / "src"]):
            if found.name == "__init__.py":
                found = found.with_name("__main__.py")
            if found.is_file():
                return found
        return None
    if words and words[0].endswith(".py") and (project / words[0]).is_file():
        return project / words[0]
    return None


def names_any(
    entry: Path,
    project: Path,
    words: Sequence[str],
    installed: Callable[[str], Path | None] | None = None,
) -> bool | None:
    """Whether the entry or one of the user's modules it imports names one of `words`.
    installed: where a module the project's folders do not hold lies when it is the
    user's own (default: found by importlib outside this interpreter's folders)."""
    return _reaches(entry, project, lambda source: any(w in source for w in words), installed)


def imports_any(
    entry: Path,
    project: Path,
    tops: Sequence[str],
    installed: Callable[[str], Path | None] | None = None,
) -> bool | None:
    """Whether the entry or one of the user's modules it imports imports one of the
    top-level packages `tops` (an import statement, not a word in a comment)."""

    def imports(source: str) -> bool:
        return any(not lvl and n.split(".")[0] in tops for n, lvl in imported_names(source))

    return _reaches(entry, project, imports, installed)


def _reaches(
    entry: Path,
    project: Path,
    found: Callable[[str], bool],
    installed: Callable[[str], Path | None] | None,
) -> bool | None:
    """Whether `found` holds for the source of the entry or of one of the user's
    modules it imports (None: too many files to tell)."""
    roots = [entry.parent, project, project / "src"]
    find = installed or _users_installed
    seen: set[Path] = set()
    queue = [entry.resolve()]
    while queue:
        path = queue.pop(0)
        if path in seen:
            continue
        if len(seen) >= MAX_FILES:
            return None
        seen.add(path)
        try:
            source = path.read_text(errors="replace")
        except OSError:
            continue
        if found(source):
            return True
        queue += _next_files(imported_names(source), path, roots, find)
    return False


def _next_files(
    names: Iterable[tuple[str, int]],
    here: Path,
    roots: Sequence[Path],
    find: Callable[[str], Path | None],
) -> list[Path]:
    out = []
    for name, level in names:
        local = [p for p in module_files(name, level, here, roots) if p.is_file()]
        if not local and not level and (found := find(name.split(".")[0])) is not None:
            local = [found]
        out += [p.resolve() for p in local]
    return out


def _users_installed(top: str) -> Path | None:
    """A top-level module installed from the user's own folder (an editable install),
    not from this interpreter's folders (the standard library, site-packages)."""
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    origin = getattr(spec, "origin", None)
    if not origin or not origin.endswith(".py"):
        return None
    path = Path(origin)
    own = {Path(p).resolve() for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    if any(part in ("site-packages", "dist-packages") for part in path.parts):
        return None
    if any(path.resolve().is_relative_to(p) for p in own):
        return None
    return path


def single_process_warning(entry: str, project: Path, processes: int) -> str | None:
    """The warning for a script started as several processes (resources: nodes x
    gpus_per_node) that names nothing starting a process group, or None."""
    script = entry_file(entry, project)
    if processes < 2 or script is None or names_any(script, project, DISTRIBUTED) is not False:
        return None
    return (
        f"job.entry={entry} runs as {processes} processes (resources.nodes x "
        f"resources.gpus_per_node), but neither {script.name} nor a module of yours it "
        "imports starts a process group (torch.distributed, idr_torch, Lightning, "
        "Accelerate...): each process trains the same model alone and writes the same "
        "files. HINT: resources.gpus_per_node=1 resources.nodes=1 runs it once"
    )
