"""What a script task's working directory shows of the project. Pure: names in, a plan
out (node/script_cwd.py lists the folders and makes the links).

A script runs in `<run_dir>/cwd/`, where the project is shown through symbolic links, so
that relative reads find the project's files and relative writes of new files land in
the run. One thing must not be shown: what an earlier run of the script left where the
script writes (`out/ckpt.pt`, a `snapshot.pt` at the root), or the new run would resume
it, and two experiments would write into one file. So the rule is about *places*, never
about what a file holds:

* an **output place** is a project path the script writes into: `job.script_outputs`
  (folder names and globs, by default where training code conventionally saves: `out/`,
  `checkpoints/`, a `*.pt` at the root, ...) and every path an output option of the
  command names (`--out_dir=out-shakespeare`, `--output_dir runs/a`, `save_dir=...`);
* an output place is the run's own: a folder starts empty in the run (the project's copy
  is not shown), a file is not shown; the folders above it are mirrored (real folders
  whose other entries are links), so the way to it is the run's own too;
* every other project entry is one link, at any depth and of any type: a dataset of a
  million files costs one link (Jean Zay counts inodes per project);
* a path the command names explicitly (`--resume_from=checkpoints/e3.pt`) is always shown,
  even inside an output place: the user asked for it;
* the toolkit's own folders (the run directories' parent, the log folder) are linked
  whole, so an argument that names them means what it meant.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

# An option whose value is where the script writes: nanoGPT's --out_dir, Hugging Face's
# --output_dir, --save_dir, --checkpoint_dir, --ckpt_path, --log_dir, Hydra-style
# out_dir=... . Matched on the option's name without its dashes.
_OUTPUT_OPTION = re.compile(
    r"^(out|output|save|saving|ckpt|checkpoint|checkpoints|log|logging|snapshot)"
    r"([_-]?(dir|directory|path|folder|root|prefix))?$",
    re.IGNORECASE,
)


def is_output_option(name: str) -> bool:
    """`--out_dir`, `output_dir`, `--save-dir`: an option naming where the script writes."""
    return bool(_OUTPUT_OPTION.match(name.lstrip("-+~")))


def _relative(value: str) -> str | None:
    """`value` as a project-relative path ("a/b"), or None when it is not one (absolute,
    leaving the project, empty, an interpolation, a number)."""
    value = value.strip()
    if not value or value.startswith(("/", "~", "$")) or "${" in value:
        return None
    parts = [p for p in value.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        return None
    return "/".join(parts)


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
        path = _relative(value)
        if path is not None:
            target.append(path)
        i += 1
    return outputs, named


@dataclass
class Shadow:
    """What the working directory holds, as project-relative paths."""

    links: list[str] = field(default_factory=list)  # one symbolic link each, to the project
    mirrored: list[str] = field(default_factory=list)  # real folders, their entries below
    own: list[str] = field(default_factory=list)  # output folders, empty at the run's start
    hidden: list[str] = field(default_factory=list)  # project entries not shown

    def summary(self) -> str:
        """The project entries the script does not see, for its start line."""
        return ", ".join(f"{p}/" if p in self.own else p for p in self.hidden)


def _under(path: str, folder: str) -> bool:
    return path.startswith(folder + "/")


def shadow_plan(
    children: Callable[[str], Mapping[str, bool]],
    outputs: Iterable[str],
    named: Iterable[str],
    always: Sequence[str] = (),
) -> Shadow:
    """The working directory for these output places and named paths. `children(rel)`
    lists a project folder ("" the root) as {name: is_folder}; `always` are top-level
    names linked whatever the rules say (the toolkit's own folders)."""
    outs = {p for p in outputs if p.split("/")[0] not in always}
    plan = Shadow()
    wanted = set(named)

    def visit(folder: str) -> None:
        for name, is_dir in sorted(children(folder).items()):
            rel = f"{folder}/{name}" if folder else name
            if not folder and name in always:
                plan.links.append(rel)
            elif rel in outs:
                if rel in wanted:
                    plan.links.append(rel)  # named by the command: the user asked for it
                    continue
                plan.hidden.append(rel)
                if is_dir:
                    plan.own.append(rel)
            elif is_dir and any(_under(o, rel) for o in outs):
                plan.mirrored.append(rel)
                visit(rel)
            else:
                plan.links.append(rel)

    visit("")
    # Paths the command names inside an output folder: linked one by one (the folders
    # between are made in the run).
    for path in sorted(wanted):
        if any(_under(path, own) for own in plan.own) and _exists(children, path):
            plan.links.append(path)
    return plan


def _exists(children: Callable[[str], Mapping[str, bool]], path: str) -> bool:
    folder, _, name = path.rpartition("/")
    return name in children(folder)
