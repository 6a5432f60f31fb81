"""What each path of a project is, for every launch: code, data or an output place. Pure:
names, sizes and arguments in, decisions out (project/snapshot.py lists and copies;
node/script_cwd.py makes the script's working directory from the same answers).

One rule, wherever a job runs (docs/run-directories.md):

* an **output place** is where the script writes: `job.script_outputs` (globs from the
  project's root: `out*/`, `checkpoint*/`, `*.pt`, ...), every path an output option of
  the command names (`--output runs/a`, `--out_dir=out`), and every relative path of
  `job.resume_args` (what a run resumes from is what it wrote itself). An output place
  is the run's own: never frozen, never shown from the project;
* **code** is a file with a source or configuration suffix (or a name such as
  `Makefile`), no larger than `job.snapshot_max_file_bytes`, outside any folder that
  holds more than `job.snapshot_max_folder_files` files (a dataset of small JSON files is
  data), plus a small file an option names as configuration (`--config exp.conf`):
  frozen at submission, so an edit while the job waits changes nothing;
* everything else is **data** (token files, pickles, images, pretrained weights, large
  or numerous files): reached in place through a link, on the cluster as here.
"""

from __future__ import annotations

import fnmatch
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from jeanzay_kit.values import human_bytes

# An option whose value is where the script writes: nanoGPT's --out_dir, Hugging Face's
# --output_dir, timm's --output, --save_dir, --checkpoint_dir, --ckpt_path, --log_dir,
# Hydra-style out_dir=... . Matched on the option's name without its dashes.
_OUTPUT_OPTION = re.compile(
    r"^(out|output|save|saving|ckpt|checkpoint|checkpoints|log|logging|snapshot)"
    r"([_-]?(dir|directory|path|folder|root|prefix))?$",
    re.IGNORECASE,
)
# An option whose value is a configuration file: --config, --cfg, --hparams, --settings.
_CONFIG_OPTION = re.compile(r"(config|conf|cfg|hparams|settings)", re.IGNORECASE)

# Source and configuration files: what a snapshot freezes. Everything else (.bin, .npy,
# .pkl, .pt, .jpg, .parquet, .arrow, ...) is data, reached where it lies.
CODE_SUFFIXES = frozenset(
    {
        *(".py", ".pyi", ".pyx", ".pxd", ".ipynb"),
        *(".yaml", ".yml", ".toml", ".cfg", ".ini", ".json", ".jsonc", ".conf", ".env"),
        *(".txt", ".md", ".rst", ".sh", ".bash", ".slurm", ".sbatch", ".j2", ".jinja"),
        *(".c", ".cc", ".cpp", ".h", ".hpp", ".cu", ".cuh", ".proto"),
    }
)
CODE_NAMES = frozenset({"Makefile", "Dockerfile", "LICENSE", "setup.py", ".gitignore"})


def is_output_option(name: str) -> bool:
    """`--out_dir`, `output_dir`, `--save-dir`: an option naming where the script writes."""
    return bool(_OUTPUT_OPTION.match(name.lstrip("-+~")))


def relative_path(value: str) -> str | None:
    """`value` as a project-relative path ("a/b"), or None when it is not one (absolute,
    leaving the project, empty, an interpolation, a number)."""
    value = value.strip()
    if not value or value.startswith(("/", "~", "$")) or "${" in value:
        return None
    parts = [p for p in value.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        return None
    return "/".join(parts)


def _split_options(args: Sequence[str]) -> list[tuple[str, str]]:
    """(option name or "", value) for each value of the command's arguments:
    `--key=v` and `key=v`, `--key v` (when v is not an option itself), a bare `v`."""
    out: list[tuple[str, str]] = []
    i = 0
    while i < len(args):
        arg = args[i]
        key, sep, value = arg.partition("=")
        if sep and re.fullmatch(r"[-+~]*[A-Za-z_][\w.-]*", key):
            out.append((key.rsplit(".", 1)[-1], value))
        elif arg.startswith("-") and i + 1 < len(args) and not args[i + 1].startswith("-"):
            out.append((arg, args[i + 1]))
            i += 1
        else:
            out.append(("", arg))
        i += 1
    return out


def command_paths(args: Sequence[str]) -> tuple[list[str], list[str]]:
    """(outputs, named): the project-relative paths the command's output options name,
    and every other argument value that could be a relative path (shown if it exists)."""
    outputs: list[str] = []
    named: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        key, sep, value = arg.partition("=")
        if sep and re.fullmatch(r"[-+~]*[A-Za-z_][\w.-]*", key):  # --key=v, key=v
            target = outputs if is_output_option(key.rsplit(".", 1)[-1]) else named
        elif arg.startswith("-") and is_output_option(arg) and i + 1 < len(args):
            target, value = outputs, args[i + 1]  # --out_dir out
            i += 1
        else:
            target, value = named, arg
        path = relative_path(value)
        if path is not None:
            target.append(path)
        i += 1
    return outputs, named


def config_paths(args: Sequence[str]) -> list[str]:
    """The project-relative files the command names as configuration (`--config x.conf`)."""
    return [
        path
        for key, value in _split_options(args)
        if key and _CONFIG_OPTION.search(key) and (path := relative_path(value)) is not None
    ]


def resume_values(resume_args: Sequence[str]) -> list[str]:
    """The paths job.resume_args names, relative or absolute, as written (`--resume
    out/last.pth.tar`, `--resume_from=/scratch/x.pt`). A word without a folder or a
    suffix (`--init_from=resume`) is a flag's value, not a path."""
    return [
        value
        for _, value in _split_options(resume_args)
        if (value.startswith("/") or relative_path(value) is not None)
        and ("/" in value or "." in value)
    ]


def resume_paths(resume_args: Sequence[str]) -> list[str]:
    """The project-relative paths of resume_values: what a run resumes from is its own
    output, so each is an output place."""
    return [p for v in resume_values(resume_args) if (p := relative_path(v)) is not None]


def _glob_prefix(pattern: Sequence[str], parts: Sequence[str]) -> int | None:
    """How many leading parts of a path the glob's segments match (`**`: any depth), or
    None: the pattern matches no leading part of the path."""
    if not pattern:
        return 0
    head, rest = pattern[0], pattern[1:]
    if head == "**":
        for skip in range(len(parts) + 1):
            found = _glob_prefix(rest, parts[skip:])
            if found is not None:
                return skip + found
        return None
    if parts and fnmatch.fnmatchcase(parts[0], head):
        found = _glob_prefix(rest, parts[1:])
        return None if found is None else 1 + found
    return None


def output_place(
    name: str, patterns: Iterable[str], places: Iterable[str] = (), folder: bool = False
) -> str | None:
    """The output place the project file `name` lies in (the place's own path), or None.
    `patterns`: job.script_outputs' globs (a trailing "/" names folders only); `places`:
    paths the command names (output options, job.resume_args), a file or a folder;
    `folder`: `name` is a folder (it may be an output place itself)."""
    parts = name.split("/")
    for pattern in patterns:
        folders_only = pattern.endswith("/")
        segments = [s for s in pattern.rstrip("/").split("/") if s not in ("", ".")]
        depth = _glob_prefix(segments, parts)
        if depth is None or depth == 0:
            continue
        if depth == len(parts) and folders_only and not folder:
            continue  # `out*/` names folders: a file outline.txt is no output place
        return "/".join(parts[:depth])
    for place in places:
        if name == place or name.startswith(place + "/"):
            return place
    return None


@dataclass(frozen=True)
class Limits:
    """job.snapshot_max_file_bytes and job.snapshot_max_folder_files."""

    file_bytes: int
    folder_files: int


def is_code_name(name: str) -> bool:
    """A source or configuration file by its name (CODE_SUFFIXES, CODE_NAMES)."""
    base = name.rsplit("/", 1)[-1]
    dot = base.rfind(".")
    return base in CODE_NAMES or (dot > 0 and base[dot:].lower() in CODE_SUFFIXES)


def crowded_folders(names: Iterable[str], limit: int) -> set[str]:
    """The folders (not the root) holding more than `limit` files at any depth below."""
    counts: Counter[str] = Counter()
    for name in names:
        parts = name.split("/")[:-1]
        for depth in range(1, len(parts) + 1):
            counts["/".join(parts[:depth])] += 1
    return {folder for folder, n in counts.items() if n > limit}


@dataclass
class Part:
    """Some of a project's files: how many, how many bytes, in which top folders."""

    files: int = 0
    bytes: int = 0
    tops: Counter[str] = field(default_factory=Counter)

    def add(self, name: str, size: int) -> None:
        self.files += 1
        self.bytes += size
        top = name.split("/", 1)[0]
        self.tops[top + ("/" if "/" in name else "")] += size

    def describe(self, most: int = 3) -> str:
        if not self.files:
            return "nothing"
        tops = ", ".join(t for t, _ in self.tops.most_common(most))
        more = ", ..." if len(self.tops) > most else ""
        return f"{self.files} file(s), {human_bytes(self.bytes)} ({tops}{more})"


@dataclass
class SnapshotPlan:
    """What a submission freezes of a project, and what it leaves where it lies."""

    frozen: list[str] = field(default_factory=list)
    frozen_part: Part = field(default_factory=Part)
    in_place: Part = field(default_factory=Part)  # data: reached through links
    outputs: Part = field(default_factory=Part)  # output places: the run's own

    def summary(self, where: str) -> str:
        """One line: what was frozen and what is reached in place, sizes and counts."""
        return (
            f"{self.frozen_part.files} file(s), {human_bytes(self.frozen_part.bytes)} "
            f"frozen in {where} (reached in place: {self.in_place.describe()}; never "
            f"frozen, the run's own output places: {self.outputs.describe()})"
        )


def plan_snapshot(
    files: Sequence[tuple[str, int]],
    patterns: Sequence[str],
    places: Sequence[str],
    configs: Sequence[str],
    limits: Limits,
) -> SnapshotPlan:
    """Split a project's candidate files ((name, bytes), names relative to its root) into
    what is frozen, what is reached in place and what lies in an output place.
    patterns/places: output_place's; configs: config_paths of the command."""
    crowded = crowded_folders((n for n, _ in files), limits.folder_files)
    named = set(configs)
    plan = SnapshotPlan()
    for name, size in files:
        if output_place(name, patterns, places) is not None:
            plan.outputs.add(name, size)
            continue
        in_crowd = any(name.startswith(f + "/") for f in crowded)
        code = (is_code_name(name) and not in_crowd) or name in named
        if code and size <= limits.file_bytes:
            plan.frozen.append(name)
            plan.frozen_part.add(name, size)
        else:
            plan.in_place.add(name, size)
    return plan
