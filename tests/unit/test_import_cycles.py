"""No module of jeanzay_kit imports itself back, directly or through others, counting the
imports inside functions too (a lazy import still ties two modules together)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "jeanzay_kit"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    target = full if full in modules else node.module
                    if target in modules and target != name:
                        graph[name].add(target)
            elif isinstance(node, ast.Import):
                graph[name] |= {a.name for a in node.names if a.name in modules} - {name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return None


def test_the_walker_finds_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycle_between_modules() -> None:
    graph = import_graph()
    assert "jeanzay_kit.config.spec" in graph and graph["jeanzay_kit.node.entry"]
    cycle = find_cycle(graph)
    assert cycle is None, " -> ".join(cycle or [])


# A leaf table imports nothing of the package, so it ties no rooms together: any room may
# read it (the stop signals and exit codes: config validates preemption.signal with it).
LEAF_TABLES = {"jeanzay_kit.ending.codes"}


def test_a_leaf_table_imports_nothing_of_the_package() -> None:
    graph = import_graph()
    assert all(not graph[leaf] for leaf in LEAF_TABLES), {t: graph[t] for t in LEAF_TABLES}


def room_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Rooms are the subpackages (config, slurm, slurm_syntax, distributed, launch, node,
    train, ckpt, examples...) and each top-level module (errors, report, train_app...):
    no room imports back a room that imports it, top-level modules included."""

    def room(module: str) -> str | None:
        parts = module.split(".")
        return parts[1] if len(parts) > 1 else None

    rooms: dict[str, set[str]] = {}
    for source, targets in graph.items():
        if (a := room(source)) is None:
            continue
        rooms.setdefault(a, set())
        for target in targets - LEAF_TABLES:
            b = room(target)
            if b is not None and b != a:
                rooms[a].add(b)
                rooms.setdefault(b, set())
    return rooms


def test_no_import_cycle_between_rooms() -> None:
    rooms = room_graph(import_graph())
    assert {"config", "slurm", "slurm_syntax", "distributed", "ckpt", "train", "node"} <= set(rooms)
    # The leaf room of Slurm's notations imports no other room (but the error family).
    assert rooms["slurm_syntax"] <= {"errors"}
    # The task side never imports the submit side; the machinery never imports the
    # shipped examples (they are chosen by _target_, like a user's own classes).
    assert "launch" not in rooms["node"], rooms["node"]
    assert not any("examples" in targets for targets in rooms.values())
    cycle = find_cycle(rooms)
    assert cycle is None, " -> ".join(cycle or [])


# The rooms from the bottom up, following the data flow (docs/architecture.md): a room
# imports only rooms below it. Top-level helpers (errors, report, durable_io, version,
# torch_version) and the contracts user code meets (contracts) sit under everything.
ROOM_ORDER = [
    "slurm_syntax",
    "distributed",
    "config",
    "rundir",  # the run directory's room: its names, RunDir, the records both sides read
    "slurm",
    "project",
    "script",  # your own script (job.entry): what both sides know of it
    "ckpt",
    "ending",  # how an attempt ends: stop signals, exit codes, requeue, why it ended
    "runtime",
    "train",
    "node",
    "integrations",
    "train_app",
    "launch",
    "offline",  # compute nodes without internet: the network check, prefetch
    "rehearse",  # a seeded schedule of faults on a run of the user's, here
    "tune",
    "analysis",
    "doctor",
    "remote",  # laptop mode: the laptop's ssh to the login node, and the login node's side
    "cli",
]
HELPERS = {
    "errors",
    "report",
    "durable_io",
    "version",
    "torch_version",
    "contracts",
    "values",
    "extras",  # which optional extra a command needs (imports errors only)
}


def test_rooms_import_only_the_rooms_below_them() -> None:
    rooms = room_graph(import_graph())
    unplaced = set(rooms) - set(ROOM_ORDER) - HELPERS - {"conf", "examples"}
    assert not unplaced, f"rooms missing from ROOM_ORDER: {sorted(unplaced)}"
    upward = [
        f"{room} imports {target}"
        for room in ROOM_ORDER
        for target in sorted(rooms.get(room, set()) - HELPERS)
        if target in ROOM_ORDER and ROOM_ORDER.index(target) > ROOM_ORDER.index(room)
    ]
    assert not upward, upward


def test_exceptions_are_one_family_in_errors_py() -> None:
    """Every exception class a user can meet is defined in errors.py (and is a JzkError)."""
    import jeanzay_kit.errors as errors

    package = Path(errors.__file__).parent
    elsewhere = []
    for path in sorted(package.rglob("*.py")):
        if path.name == "errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(
                getattr(b, "id", getattr(b, "attr", "")).endswith(("Error", "Exception"))
                for b in node.bases
            ):
                elsewhere.append(f"{path.relative_to(package)}:{node.name}")
    assert not elsewhere, f"exception classes outside errors.py: {elsewhere}"
    family = [
        obj
        for obj in vars(errors).values()
        if isinstance(obj, type)
        and issubclass(obj, Exception)
        and obj.__module__ == errors.__name__
    ]
    assert all(issubclass(cls, errors.JzkError) for cls in family), family


def _functions() -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Every function of the package and of its Hydra plugins (hydra_plugins/ ships in
    the same wheel and is read by the same newcomers)."""
    out = []
    root = PACKAGE.parent
    paths = sorted(PACKAGE.rglob("*.py")) + sorted((root / "hydra_plugins").rglob("*.py"))
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out.append((f"{path.relative_to(root)}:{node.name}", node))
    return out


def test_no_function_of_the_package_is_over_60_lines() -> None:
    """Read top to bottom by newcomers: every function fits on a screen."""
    long = [
        f"{where} ({length} lines)"
        for where, node in _functions()
        if (length := (node.end_lineno or node.lineno) - node.lineno + 1) > 60
    ]
    assert not long, long


def test_many_settings_are_passed_by_name() -> None:
    """More than 6 parameters (self aside) is a settings list: the rest keyword-only, so
    a call reads `keep_last=3`, never a seventh bare value in the right place."""
    crowded = []
    for where, node in _functions():
        positional = [a.arg for a in node.args.posonlyargs + node.args.args]
        positional = [a for a in positional if a not in ("self", "cls")]
        if len(positional) > 6:
            crowded.append(f"{where} ({len(positional)} positional parameters)")
    assert not crowded, crowded
