"""A job's log as starts, and a job's end as an exit code: what `jzk logs` prints. Pure.

A requeued job appends every start to the same log (#SBATCH --open-mode=append); the
script marks each start with one line (slurm/sbatch.py START_MARK), so a log splits into
its starts. A log written before the marks existed is one start.
"""

from __future__ import annotations

from jeanzay_kit.slurm.sbatch import START_MARK


def starts(text: str) -> list[str]:
    """The log's text per start of the job, first to last (each with its mark line)."""
    parts: list[list[str]] = [[]]
    for line in text.splitlines(keepends=True):
        if line.startswith(START_MARK) and any(parts[-1]):
            parts.append([])
        parts[-1].append(line)
    return ["".join(p) for p in parts if p]


def pick_start(text: str, attempt: int | None) -> str:
    """All of the log, or its `attempt`-th start (1 = the first, -1 = the last)."""
    if attempt is None:
        return text
    found = starts(text)
    index = attempt - 1 if attempt > 0 else attempt
    if attempt == 0 or not found or not -len(found) <= index < len(found):
        raise IndexError(f"--attempt {attempt}: the log has {len(found)} start(s)")
    return found[index]


def find_records(records: list[dict], target: str) -> list[dict]:
    """The records of job `target`: an id, or an array job's id (all its tasks)."""
    return [
        r
        for r in records
        if str(r.get("job_id")) == target or str(r.get("array_job_id", "")) == target
    ]


def exit_code(state: str, code: str) -> int:
    """The job's end as a process exit code: 0 when COMPLETED, its own code when it
    failed with one ("2:0" -> 2), 1 otherwise (cancelled, timed out, a node lost)."""
    if state == "COMPLETED":
        return 0
    first = code.split(":", 1)[0] if code else ""
    return int(first) if first.isdigit() and int(first) else 1
