"""The health gate's rules: what a node's checks found, and what the job does. Pure.

Before step 0 of each start of a Slurm job (watchdog.health_gate), one task per node
(node/health.py) checks that the GPUs Slurm gave are visible, run a small kernel and
have their memory free, and that the run directory and the scratch folders take writes.
Each node's answer is one JSON line; this module turns them into one decision:

- every node fine: train;
- some nodes failed (or gave no answer): leave them out and requeue, before any
  training (a broken GPU or an unmounted filesystem stays broken for this job);
- every node of a multi-node job failed the same check: the cause is not a node (a
  scratch variable pointing nowhere, a folder of someone else's): the job ends with the
  check and its fix instead of excluding one healthy node after another.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

# Another process holding more than a tenth of a GPU (a stale job's, a zombie rank's) is
# a node to leave out: the run's memory plan counts on the whole card. CUDA's own context
# takes about 0.5 GiB of the smallest (16 GiB) card the toolkit supports, well above it.
MIN_FREE_FRACTION = 0.9
# The probe's GPU checks must end within this: a GPU that hangs its driver does not
# hold the job (the gate's answer comes within 30 s of the job's start).
GPU_CHECK_SECONDS = 20.0
# The same check failing on this many nodes of one job in turn is not the nodes (a check
# wrong for the site, a setting every node shares): the job ends instead of walking
# through the partition one requeue at a time.
REPEATED_NODES = 3
TRAIN, REQUEUE, END = "train", "requeue", "end"
NO_ANSWER = "no answer: the node's check died or hung (read the job's log)"


@dataclass(frozen=True)
class GpuCheck:
    """One visible GPU: its memory (bytes) and the error of its kernel ("" when it ran
    and gave the right sum)."""

    index: int
    free: int
    total: int
    error: str = ""


def gpu_problems(expected: int, checks: Sequence[GpuCheck]) -> list[str]:
    """What is wrong with a node's GPUs: fewer visible than Slurm gave, a kernel that
    failed, memory already taken."""
    problems = []
    if len(checks) < expected:
        problems.append(f"gpus: {len(checks)} of the {expected} GPU(s) Slurm gave are visible")
    for gpu in checks:
        if gpu.error:
            problems.append(f"gpu {gpu.index}: {gpu.error}")
        elif gpu.total and gpu.free < MIN_FREE_FRACTION * gpu.total:
            problems.append(
                f"gpu {gpu.index}: {gpu.free / 2**30:.1f} of {gpu.total / 2**30:.1f} GiB free "
                f"(below {MIN_FREE_FRACTION:.0%}): another process holds its memory"
            )
    return problems


def scratch_folders(env: Mapping[str, str]) -> list[tuple[str, str]]:
    """The folders a job writes besides its run directory, as (variable, path): the
    node's temporary folder (TMPDIR, /tmp when unset: compile caches, loader workers'
    shared memory spills) and the site's scratch (SCRATCH; JOBSCRATCH, Jean Zay's per-job
    folder) where they are set."""
    folders = [("TMPDIR", env.get("TMPDIR") or "/tmp")]
    folders += [(name, env[name]) for name in ("SCRATCH", "JOBSCRATCH") if env.get(name)]
    return folders


@dataclass(frozen=True)
class NodeHealth:
    """One node's answer: its problems ("<check>: <what>"), notes (a check skipped) and
    how long its checks took."""

    node: str
    problems: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    seconds: float = 0.0

    def record(self) -> dict[str, object]:
        return {"node": self.node, "problems": list(self.problems), "notes": list(self.notes),
                "seconds": round(self.seconds, 2)}  # fmt: skip


def node_health_of(record: object) -> NodeHealth | None:
    """A probe's JSON object back as a NodeHealth (None: not one)."""
    if not isinstance(record, Mapping) or not isinstance(record.get("node"), str):
        return None
    problems, notes = record.get("problems", []), record.get("notes", [])
    seconds = record.get("seconds", 0.0)
    return NodeHealth(
        str(record["node"]),
        tuple(map(str, problems)) if isinstance(problems, list) else ("unreadable answer",),
        tuple(map(str, notes)) if isinstance(notes, list) else (),
        float(seconds) if isinstance(seconds, (int, float)) else 0.0,
    )


@dataclass(frozen=True)
class GateDecision:
    action: str  # TRAIN, REQUEUE (leave `bad` out) or END
    bad: dict[str, tuple[str, ...]] = field(default_factory=dict)  # node -> its problems
    line: str = ""  # what the job's log says


def _check(problem: str) -> str:
    return problem.split(":", 1)[0]


def checks_of(evidence: str) -> set[str]:
    """The checks an unhealthy node's recorded evidence names (its problems, "; "-joined)."""
    return {_check(problem) for problem in evidence.split("; ") if problem}


def decide_gate(
    answers: Sequence[NodeHealth], nodes: Sequence[str], earlier: Sequence[set[str]] = ()
) -> GateDecision:
    """The gate's decision from the nodes' answers. nodes: the job's nodes (a node that
    gave no answer failed); earlier: the checks each node this job left out before failed
    (endings.jsonl)."""
    by_node = {a.node: a for a in answers}
    bad = {n: by_node[n].problems if n in by_node else (NO_ANSWER,) for n in nodes}
    bad = {n: p for n, p in bad.items() if p}
    seconds = max((a.seconds for a in answers), default=0.0)
    if not bad:
        notes = sorted({note for a in answers for note in a.notes})
        said = f" ({'; '.join(notes)})" if notes else ""
        return GateDecision(TRAIN, {}, f"{len(nodes)} node(s) fine in {seconds:.1f} s{said}")
    shown = "; ".join(f"{n}: {', '.join(p)}" for n, p in sorted(bad.items()))
    shared = set.intersection(*({_check(p) for p in probs} for probs in bad.values()))
    if len(nodes) > 1 and len(bad) == len(nodes) and shared - {NO_ANSWER.split(":")[0]}:
        check = sorted(shared)[0]
        return GateDecision(
            END, bad,
            f"every node fails the same check ({shown}): the cause is not a node. HINT: "
            f"{fix_of(check)}",
        )  # fmt: skip
    for check in sorted(shared - {NO_ANSWER.split(":")[0]}):
        times = len(bad) + sum(check in checks for checks in earlier)
        if times >= REPEATED_NODES:
            return GateDecision(
                END, bad,
                f"{times} nodes of this job in turn failed the same check ({shown}): the "
                f"cause is not the nodes. HINT: {fix_of(check)}",
            )  # fmt: skip
    return GateDecision(REQUEUE, bad, f"{len(bad)} of {len(nodes)} node(s) failed: {shown}")


def fix_of(check: str) -> str:
    """The fix of a check every node fails."""
    if check == "run_dir":
        return "set job.run_dir to a folder you can write from the compute nodes"
    if check in ("TMPDIR", "SCRATCH", "JOBSCRATCH"):
        return f"point ${check} at a folder that exists and you can write, or unset it"
    return (
        "read the problems above; turn the gate off for this job with "
        "watchdog.health_gate=false if the check is wrong for your cluster"
    )
