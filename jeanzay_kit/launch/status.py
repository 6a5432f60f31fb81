"""Job states from squeue and sacct output, and the `jzk status` table. Pure.

squeue knows queued and running jobs (and finished ones for MinJobAge, 300 s by
default); sacct knows the rest when the site has accounting. `jzk status` asks squeue
first and sacct for the jobs squeue no longer shows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# The format strings the commands are run with (slurm/commands.py); the parsers below
# read exactly these fields, separated by "|".


@dataclass(frozen=True)
class JobState:
    job_id: str
    state: str
    elapsed: str
    where: str  # nodes, or the reason a pending job waits
    exit_code: str = ""
    source: str = "squeue"


def _rows(text: str) -> list[list[str]]:
    """The five "|"-separated fields of each line (both formats have five)."""
    rows = [line.strip().split("|") for line in text.splitlines()]
    return [row for row in rows if len(row) == 5]


def parse_squeue(text: str) -> dict[str, JobState]:
    """Rows of `squeue -h -r -o SQUEUE_FORMAT` (one row per array task)."""
    return {
        job_id: JobState(job_id, state, elapsed, where)
        for job_id, state, elapsed, _limit, where in _rows(text)
    }


def parse_sacct(text: str) -> dict[str, JobState]:
    """Rows of `sacct -X -n -P -o SACCT_FIELDS` (allocations only, newest record per job)."""
    return {
        # "CANCELLED by 0" -> "CANCELLED"
        job_id: JobState(job_id, state.split()[0] if state else "", elapsed, nodes, code, "sacct")
        for job_id, state, elapsed, code, nodes in _rows(text)
    }


@dataclass(frozen=True)
class Usage:
    """What sacct says of a job over all its attempts: the newest one's state, and the
    GPU hours of all (elapsed x GPUs of each start, a requeued job's included)."""

    state: JobState
    gpu_hours: float
    attempts: int


def parse_usage(text: str) -> dict[str, Usage]:
    """Rows of `sacct -X -n -P --duplicates -o SACCT_USAGE_FIELDS`: one per attempt, the
    newest last."""
    out: dict[str, Usage] = {}
    for line in text.splitlines():
        row = line.strip().split("|")
        if len(row) != 7:
            continue
        job_id, state, elapsed, code, nodes, raw, tres = row
        seconds = int(raw) if raw.isdigit() else 0
        before = out.get(job_id)
        hours = (before.gpu_hours if before else 0.0) + seconds * tres_gpus(tres) / 3600
        now = JobState(job_id, state.split()[0] if state else "", elapsed, nodes, code, "sacct")
        out[job_id] = Usage(now, hours, (before.attempts if before else 0) + 1)
    return out


def tres_gpus(tres: str) -> int:
    """GPUs in an AllocTRES string: gres/gpu=4, or the sum of typed ones (gres/gpu:h100=4)."""
    plain, typed = None, 0
    for item in tres.split(","):
        key, _, value = item.partition("=")
        if not value.isdigit():
            continue
        if key == "gres/gpu":
            plain = int(value)
        elif key.startswith("gres/gpu:"):
            typed += int(value)
    return plain if plain is not None else typed


ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED"}


def run_objects(
    records: Sequence[Mapping[str, Any]], states: Mapping[str, JobState], hours: Mapping[str, float]
) -> list[dict[str, Any]]:
    """`jzk status --json`: one object per run (docs/slurm.md, "jzk status --json")."""
    out = []
    for rec in records:
        st = states.get(state_key(rec))
        out.append(
            {
                "run_dir": rec.get("run_dir"),
                "job_id": str(rec["job_id"]),
                "state": st.state if st else "UNKNOWN",
                "exit_code": (st.exit_code or None) if st else None,
                "elapsed": st.elapsed if st else None,
                "where": (st.where or None) if st else None,
                "step": rec.get("step"),
                "steps": rec.get("total"),
                "loss": rec.get("loss"),
                "eta_s": rec.get("eta_s"),
                "restarts": rec.get("restarts", 0),
                "checkpoint": _checkpoint(rec) if _checkpoint(rec) != "-" else None,
                "gpu_hours": hours.get(state_key(rec)),
                "last_line": rec.get("last_line"),
                "overrides": list(rec.get("overrides", [])),
            }
        )
    return out


def state_key(rec: Mapping[str, Any]) -> str:
    """Where a record's state is in the states mapping: its Slurm job id, or, for a run
    on this machine (job id "local"), its run directory: each local run has its own."""
    job = str(rec["job_id"])
    return f"local:{rec.get('run_dir', '')}" if job == "local" else job


def status_table(records: Sequence[Mapping[str, Any]], states: Mapping[str, JobState]) -> str:
    """One line per manifest record: job, state, elapsed, progress, checkpoint, run.

    records carry `job_id`, `run_dir`, `overrides` (manifest.jsonl) and optionally what
    the caller read in the run directory: `checkpoint` (newest complete step), `step`,
    `total`, `loss`, `eta_s`, `oldest_beat_s` (a stuck rank shows here), `restarts`,
    `evaluation` (the newest eval_* values) and `data_wait_share` (the last window's time
    waiting for batches)."""
    header = (
        "JOB",
        "STATE",
        "ELAPSED",
        "STEP",
        "LOSS",
        "EVAL",
        "DATA",
        "ETA",
        "BEAT",
        "RESTARTS",
        "CKPT",
        "WHERE",
        "RUN DIR",
        "OVERRIDES",
    )
    rows = [header]
    for rec in records:
        st = states.get(state_key(rec))
        state = st.state if st else "UNKNOWN"
        if st and st.exit_code and st.exit_code != "0:0":
            state += f" (exit {st.exit_code})"
        step, total = rec.get("step"), rec.get("total")
        rows.append(
            (
                str(rec["job_id"]),
                state,
                st.elapsed if st else "-",
                f"{step}/{total or '?'}" if step is not None else "-",
                f"{rec['loss']:.4f}" if rec.get("loss") is not None else "-",
                _evaluation(rec.get("evaluation")),
                f"{rec['data_wait_share']:.0%}" if rec.get("data_wait_share") is not None else "-",
                _duration(rec.get("eta_s")),
                _duration(rec.get("oldest_beat_s")) + (" ago" if rec.get("oldest_beat_s") else ""),
                str(rec.get("restarts", 0)),
                _checkpoint(rec),
                st.where if st and st.where else "-",
                str(rec.get("run_dir", "-")),
                " ".join(rec.get("overrides", [])) or "-",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(header) - 1)]
    table = "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row[:-1], widths, strict=True)) + "  " + row[-1]
        for row in rows
    )
    return "\n".join([table, *_script_lines(records)])


def _checkpoint(rec: Mapping[str, Any]) -> str:
    """The toolkit's newest complete step, or a script's newest checkpoint-looking file."""
    if rec.get("checkpoint") is not None:
        return f"step-{rec['checkpoint']}"
    if rec.get("checkpoint_file"):
        return f"{rec['checkpoint_file']} ({_duration(rec.get('checkpoint_age_s'))} ago)"
    return "-"


def _script_lines(records: Sequence[Mapping[str, Any]]) -> list[str]:
    """Under the table, for each script task: its starts and the newest line it printed
    (a script tells the toolkit no step; its output is what can be known)."""
    lines = []
    for rec in records:
        if rec.get("attempts") is None:
            continue
        said = (
            f"last line {_duration(rec.get('last_line_age_s'))} ago: {rec['last_line'][-100:]!r}"
            if rec.get("last_line")
            else "no line printed yet"
        )
        lines.append(f"{rec['job_id']} (script, {rec['attempts']} start(s)): {said}")
    return ["", *lines] if lines else []


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    from jeanzay_kit.runtime.progress import format_duration

    return format_duration(seconds)


def summary(states: Iterable[str]) -> str:
    counts: dict[str, int] = {}
    for s in states:
        counts[s] = counts.get(s, 0) + 1
    return ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))


def _evaluation(values: Mapping[str, Any] | None) -> str:
    """`0.4321 accuracy=0.912`: the eval loss, then each metric of eval.metrics."""
    from jeanzay_kit.runtime.progress import is_eval_metric

    if not values or values.get("eval_loss") is None:
        return "-"
    parts = [f"{values['eval_loss']:.4f}"]
    for key, value in values.items():
        if is_eval_metric(key) and isinstance(value, (int, float)):
            parts.append(f"{key[5:]}={value:.4g}")
    return " ".join(parts)
