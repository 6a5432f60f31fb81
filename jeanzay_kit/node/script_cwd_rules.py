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
  command names (`--out_dir=out-shakespeare`, `--output_dir runs/a`, `save_dir=...`)
  and every path `job.resume_args` names (project/places.py: the same rule freezes the
  code at submission);
* an output place is the run's own: a folder starts empty in the run (the project's copy
  is not shown), a file is not shown; the folders above it are mirrored (real folders
  whose other entries are links), so the way to it is the run's own too;
* every other project entry is one link, at any depth and of any type: a dataset of a
  million files costs one link (Jean Zay counts inodes per project); on Slurm, where the
  code was frozen at submission, the link of a code file leads to the snapshot's copy,
  and the link of data to the project, so a relative path reads the same file on a
  node as here (but for the code's edits since the submission);
* a path the command names explicitly (`--resume_from=checkpoints/e3.pt`) is always shown,
  even inside an output place: the user asked for it;
* the toolkit's own folders (the run directories' parent, the log folder) are linked
  whole, so an argument that names them means what it meant.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field


@dataclass
class Shadow:
    """What the working directory holds, as project-relative paths."""

    links: list[str] = field(default_factory=list)  # one symbolic link each, to the project
    code_links: list[str] = field(default_factory=list)  # to the code snapshot's copy
    mirrored: list[str] = field(default_factory=list)  # real folders, their entries below
    own: list[str] = field(default_factory=list)  # output folders, empty at the run's start
    hidden: list[str] = field(default_factory=list)  # project entries not shown

    def summary(self) -> str:
        """The project entries the script does not see, for its start line."""
        return ", ".join(f"{p}/" if p in self.own else p for p in self.hidden)


Lister = Callable[[str], Mapping[str, bool]]


def _under(path: str, folder: str) -> bool:
    return path.startswith(folder + "/")


def _whole(children: Lister, frozen: Lister, folder: str) -> bool:
    """The snapshot holds all of the project's `folder`, every entry at every depth:
    one link to the snapshot's copy shows it. Only folders the snapshot has are listed."""
    mine, copy = children(folder), frozen(folder)
    if dict(mine) != dict(copy):
        return False
    return all(_whole(children, frozen, f"{folder}/{n}") for n, d in copy.items() if d)


def shadow_plan(
    children: Lister,
    outputs: Iterable[str],
    named: Iterable[str],
    always: Sequence[str] = (),
    frozen: Lister | None = None,
) -> Shadow:
    """The working directory for these output places and named paths. `children(rel)`
    lists a project folder ("" the root) as {name: is_folder}; `always` are top-level
    names linked whatever the rules say (the toolkit's own folders); `frozen` lists the
    code snapshot's folders alike (None: no snapshot). A project entry the snapshot
    holds whole is shown from the snapshot, one it does not hold from the project, and
    a folder it holds in part is mirrored: its code from the snapshot, its data in place."""
    outs = {p for p in outputs if p.split("/")[0] not in always}
    plan = Shadow()
    wanted = set(named)

    def visit(folder: str) -> None:
        copies = frozen(folder) if frozen is not None else {}
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
            elif name in copies and copies[name] == is_dir and frozen is not None:
                if not is_dir or _whole(children, frozen, rel):
                    plan.code_links.append(rel)
                else:
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


def _exists(children: Lister, path: str) -> bool:
    folder, _, name = path.rpartition("/")
    return name in children(folder)
