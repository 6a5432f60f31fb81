"""Job states from squeue and sacct output, and the `jzk status` table. Pure.

squeue knows queued and running jobs (and finished ones for MinJobAge, 300 s by
default); sacct knows the rest when the site has accounting. `jzk status` asks squeue
first and sacct for the jobs squeue no longer shows.
"""

from __future__ import annotations

import signal
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from jeanzay_kit.ending.codes import signal_of_exit
from jeanzay_kit.ending.ending_rules import GPU_OOM, SLURM_STATES, STOPPED, Verdict
from jeanzay_kit.launch.ledger import RunRecord, ledger
from jeanzay_kit.values import strings

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
    gpus: int = 0  # the newest start's GPUs
    queue_wait_s: float | None = None  # submit (or requeue) to start, every start summed


def parse_usage(text: str) -> dict[str, Usage]:
    """Rows of `sacct -X -n -P --duplicates -o SACCT_USAGE_FIELDS`: one per attempt, the
    newest last (rows without Submit and Start, as older callers asked, are read too)."""
    out: dict[str, Usage] = {}
    for line in text.splitlines():
        row = line.strip().split("|")
        if len(row) not in (7, 9):
            continue
        job_id, state, elapsed, code, nodes, raw, tres = row[:7]
        seconds = int(raw) if raw.isdigit() else 0
        before = out.get(job_id)
        hours = (before.gpu_hours if before else 0.0) + seconds * tres_gpus(tres) / 3600
        now = JobState(job_id, state.split()[0] if state else "", elapsed, nodes, code, "sacct")
        waited = queue_wait(*row[7:]) if len(row) == 9 else None
        if before is not None and before.queue_wait_s is not None:
            waited = before.queue_wait_s + (waited or 0.0)
        out[job_id] = Usage(
            now, hours, (before.attempts if before else 0) + 1, tres_gpus(tres), waited
        )
    return out


def queue_wait(submit: str, start: str) -> float | None:
    """Seconds from sacct's Submit to its Start (ISO times); None for a start that has
    not happened (Unknown, None)."""
    from datetime import datetime

    try:
        return max(
            0.0, (datetime.fromisoformat(start) - datetime.fromisoformat(submit)).total_seconds()
        )
    except ValueError:
        return None


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


def ending(exit_code: str) -> str | None:
    """Slurm's ExitCode `code:signal` in words: `killed by SIGUSR1` (the signal field, or
    a task's 128 + N, which script tasks end with when their command died of signal N:
    node/script_task.py), `exit 2`; None for `0:0` or nothing."""
    code, _, sig = exit_code.partition(":")
    if sig.isdigit() and int(sig) > 0:
        return f"killed by {_signal_word(int(sig))}"
    if not code.isdigit() or int(code) == 0:
        return None
    if died_of := signal_of_exit(int(code)):
        return f"exit {code}: killed by {died_of}"
    return f"exit {code}"


_SIGNALS = {int(s) for s in signal.Signals}


def _signal_word(signum: int) -> str:
    return signal.Signals(signum).name if signum in _SIGNALS else f"signal {signum}"


ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED"}


def is_live(st: JobState | None) -> bool:
    """The job is queued or running: its steps past the newest checkpoint are in flight,
    and an earlier attempt's stop is not its end. Slurm's STOPPED (suspended) counts as
    not live: nothing runs."""
    return st is not None and st.state not in ENDED and st.state != "STOPPED"


@dataclass(frozen=True)
class RunProgress:
    """What a run directory says of its run (launch/run_files.py reads it)."""

    step: int | None = None
    total: int | None = None
    loss: float | None = None
    eta_s: float | None = None
    oldest_beat_s: float | None = None  # age of the stalest heartbeat of a running rank
    restarts: int = 0
    data_wait_share: float | None = None  # of the last logged window's step time
    evaluation: Mapping[str, float] | None = None  # eval_loss, eval_<name> of the newest
    # A script task (job.entry a script) tells no step: what the toolkit saw from outside.
    attempts: int | None = None  # starts of the script, whoever requeued it
    last_line: str | None = None  # the newest line any task printed
    last_line_age_s: float | None = None
    checkpoint_file: str | None = None  # the script's newest checkpoint-looking file
    checkpoint_age_s: float | None = None
    # How the newest attempt ended (ending/endings.py): its class and its one line.
    verdict: str | None = None
    evidence: str | None = None  # `data error at step 4: ValueError: ...`
    fix: str | None = None
    storm: bool = False  # restarts that completed no new checkpoint (a restart storm)


@dataclass(frozen=True)
class RunView:
    """One run as `jzk status` shows it: its manifest record (manifest.jsonl, or a local
    run directory found on disk) and what its directory says."""

    job_id: str  # a Slurm job id, or "local"
    run_dir: str | None
    overrides: tuple[str, ...] = ()
    checkpoint: int | None = None  # the toolkit's newest complete step
    progress: RunProgress = RunProgress()
    record: RunRecord | None = None  # its starts and step times, for the ledger
    gpu_memory: str | None = None  # the plan's per-GPU estimate at submission (jzk submit)
    archived: bool = False  # its checkpoints went into an archive (jzk ckpt archive --remove)

    @property
    def key(self) -> str:
        """Where its state is in the states mapping: its Slurm job id, or, for a run on
        this machine (job id "local"), its run directory: each local run has its own."""
        return f"local:{self.run_dir or ''}" if self.job_id == "local" else self.job_id


def run_view(record: Mapping[str, object]) -> RunView:
    """A manifest record (at least `job_id`; `run_dir`, `overrides`) as a RunView."""
    run_dir = record.get("run_dir")
    return RunView(
        job_id=str(record["job_id"]),
        run_dir=None if run_dir is None else str(run_dir),
        overrides=strings(record.get("overrides")),
        gpu_memory=str(record["gpu_memory"]) if record.get("gpu_memory") else None,
    )


def remote_view(row: Mapping[str, object]) -> tuple[RunView, JobState]:
    """A run on another cluster (laptop mode) as this table shows it, from what `jzk
    status --json` said there (`host` and `run` added): its job as HOST:ID."""
    host = str(row.get("host", "?"))
    job = f"{host}:{row.get('job_id', '?')}"

    def number(key: str) -> float | None:
        value = row.get(key)
        return float(value) if isinstance(value, int | float) else None

    step, total = number("step"), number("steps")
    checkpoint = str(row.get("checkpoint") or "")
    progress = RunProgress(
        step=None if step is None else int(step),
        total=None if total is None else int(total),
        loss=number("loss"),
        eta_s=number("eta_s"),
        restarts=int(number("restarts") or 0),
        last_line=str(row["last_line"]) if row.get("last_line") else None,
        verdict=str(row["verdict"]) if row.get("verdict") else None,
        evidence=str(row["evidence"]) if row.get("evidence") else None,
    )
    view = RunView(
        job_id=job,
        run_dir=f"{host}:{row.get('run_dir')}",
        overrides=strings(row.get("overrides")),
        checkpoint=int(checkpoint[5:]) if checkpoint.startswith("step-") else None,
        progress=progress,
    )
    state = JobState(
        job,
        str(row.get("state") or "UNKNOWN"),
        str(row.get("elapsed") or "-"),
        str(row.get("where") or ""),
        str(row.get("exit_code") or ""),
    )
    return view, state


@dataclass(frozen=True)
class RunUsage:
    """sacct's figures of every job that wrote one run directory, together: a run
    cancelled and submitted again on the same directory has one ledger over all its jobs,
    as it has one starts.jsonl (without this, a job's own hours against the whole run's
    steps gave a goodput above 1)."""

    gpu_hours: float | None  # None: no job of it is in the accounting (a local run)
    gpus: int  # the GPUs of one start
    queue_wait_s: float | None
    live: bool  # one of its jobs is queued or running


def run_usage(
    views: Sequence[RunView], usage: Mapping[str, Usage], states: Mapping[str, JobState]
) -> dict[str, RunUsage]:
    """Each run directory's RunUsage (keyed by run_dir, "" for views without one)."""
    out: dict[str, RunUsage] = {}
    for run_dir in dict.fromkeys(v.run_dir or "" for v in views):
        mine = [v for v in views if (v.run_dir or "") == run_dir]
        jobs = [usage[v.key] for v in mine if v.key in usage]
        waits = [u.queue_wait_s for u in jobs if u.queue_wait_s is not None]
        live = any(is_live(states.get(v.key)) for v in mine)
        out[run_dir] = RunUsage(
            gpu_hours=sum(u.gpu_hours for u in jobs) if jobs else None,
            gpus=max((u.gpus for u in jobs), default=0),
            queue_wait_s=sum(waits) if waits else None,
            live=live,
        )
    return out


def run_ledger(view: RunView, run: RunUsage | None) -> dict[str, object]:
    """The ledger's keys of `jzk status --json` (launch/ledger.py), the run directory's
    over every job that wrote it: goodput (productive / allocated GPU hours, null without
    accounting), lost_steps, startup_s, queue_wait_s."""
    run = run or RunUsage(None, 0, None, live=False)
    if view.record is None:  # no start recorded (a script task): sacct's wait alone
        return {
            "goodput": None,
            "lost_steps": None,
            "startup_s": None,
            "queue_wait_s": run.queue_wait_s,
        }
    one = ledger(view.record, run.gpu_hours, run.gpus, run.queue_wait_s, ended=not run.live)
    good = one.goodput
    return {
        "goodput": None if good is None else round(good, 4),
        "lost_steps": one.lost_steps,
        "startup_s": round(one.startup_s, 1),
        "queue_wait_s": one.queue_wait_s,
    }


NOT_PENDING: dict[str, object] = {
    "pending_reason": None,
    "pending_why": None,
    "start_estimate": None,
}


def run_objects(
    views: Sequence[RunView],
    states: Mapping[str, JobState],
    hours: Mapping[str, float],
    usage: Mapping[str, Usage] | None = None,
    pending: Mapping[str, Mapping[str, object]] | None = None,
) -> list[dict[str, object]]:
    """`jzk status --json`: one object per run (docs/slurm.md, "jzk status --json").
    pending: per job, pending_reason, pending_why and start_estimate (a pending job)."""
    out: list[dict[str, object]] = []
    runs = run_usage(views, usage or {}, states)
    for view in views:
        st, p = states.get(view.key), view.progress
        out.append(
            {
                "run_dir": view.run_dir,
                "job_id": view.job_id,
                "state": st.state if st else "UNKNOWN",
                "exit_code": (st.exit_code or None) if st else None,
                "ending": ending(st.exit_code) if st else None,
                "elapsed": st.elapsed if st else None,
                "where": (st.where or None) if st else None,
                "step": p.step,
                "steps": p.total,
                "loss": p.loss,
                "eta_s": p.eta_s,
                "restarts": p.restarts,
                "checkpoint": _checkpoint(view) if _checkpoint(view) != "-" else None,
                "gpu_hours": hours.get(view.key),
                "last_line": p.last_line,
                "verdict": newest_end(p, st)[0],
                "evidence": said_end(view, st)[1],
                "restart_storm": p.storm,
                "overrides": list(view.overrides),
                **(pending or {}).get(view.key, NOT_PENDING),
                **run_ledger(view, runs.get(view.run_dir or "")),
            }
        )
    return out


HEADER = (
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


def status_table(views: Sequence[RunView], states: Mapping[str, JobState]) -> str:
    """One line per run: job, state, elapsed, progress (a stuck rank shows in BEAT, the
    newest evaluation in EVAL, the last window's time waiting for batches in DATA),
    checkpoint, run; under it, what each script task last printed."""
    rows = [HEADER, *(_row(view, states.get(view.key)) for view in views)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADER) - 1)]
    table = "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row[:-1], widths, strict=True)) + "  " + row[-1]
        for row in rows
    )
    return "\n".join([table, *_script_lines(views), *ending_lines(views, states)])


def newest_end(p: RunProgress, st: JobState | None) -> tuple[str | None, str | None, str | None]:
    """(class, line, fix) of the newest end: the run's record (endings.jsonl), or sacct's
    State when Slurm itself ended the job (a time limit, a node failure, the host's
    out of memory: the batch script was killed with it, nothing was recorded)."""
    state = st.state if st is not None and st.source == "sacct" else ""
    if state in SLURM_STATES and p.verdict != SLURM_STATES[state]:
        said = Verdict(SLURM_STATES[state], f"sacct State={state}")
        return said.kind, said.line(), said.fix
    return p.verdict, p.evidence, p.fix


def said_end(view: RunView, st: JobState | None) -> tuple[str | None, str | None, str | None]:
    """newest_end, an out-of-GPU-memory end with the plan's estimate made before the
    queue (how far the real run was from it tells a leak from a plan too large)."""
    kind, evidence, fix = newest_end(view.progress, st)
    if kind == GPU_OOM and evidence and view.gpu_memory:
        evidence += f" (estimated before the queue: {view.gpu_memory})"
    return kind, evidence, fix


def ending_lines(
    views: Sequence[RunView], states: Mapping[str, JobState] | None = None
) -> list[str]:
    """Under the table, for each run whose newest attempt did not complete: how it ended
    and the fix; a restart storm is flagged."""
    lines = []
    for view in views:
        p = view.progress
        st = (states or {}).get(view.key)
        kind, evidence, fix = said_end(view, st)
        if kind == STOPPED and is_live(st):
            kind = None  # a stop that was requeued: its next attempt is queued or running
        if p.storm:
            lines.append(
                f"{view.job_id}: RESTART STORM: {p.restarts} restart(s), the last ones without "
                "a new checkpoint. HINT: read the endings below and the log (jzk logs); "
                "cancel the job if the cause is not passing"
            )
        if kind and kind != "completed" and evidence:
            lines.append(f"{view.job_id}: {evidence}" + (f". HINT: {fix}" if fix else ""))
    return ["", *lines] if lines else []


def _row(view: RunView, st: JobState | None) -> tuple[str, ...]:
    p = view.progress
    state = st.state if st else "UNKNOWN"
    how = ending(st.exit_code) if st else None
    if how:
        state += f" ({how})"
    return (
        view.job_id,
        state,
        st.elapsed if st else "-",
        f"{p.step}/{p.total or '?'}" if p.step is not None else "-",
        f"{p.loss:.4f}" if p.loss is not None else "-",
        _evaluation(p.evaluation),
        f"{p.data_wait_share:.0%}" if p.data_wait_share is not None else "-",
        _duration(p.eta_s),
        _duration(p.oldest_beat_s) + (" ago" if p.oldest_beat_s else ""),
        str(p.restarts),
        _checkpoint(view),
        st.where if st and st.where else "-",
        view.run_dir or "-",
        " ".join(view.overrides) or "-",
    )


def _checkpoint(view: RunView) -> str:
    """The toolkit's newest complete step, or a script's newest checkpoint-looking file."""
    p = view.progress
    if view.checkpoint is not None:
        return f"step-{view.checkpoint}"
    if p.checkpoint_file:
        return f"{p.checkpoint_file} ({_duration(p.checkpoint_age_s)} ago)"
    return "archived" if view.archived else "-"


def _script_lines(views: Sequence[RunView]) -> list[str]:
    """Under the table, for each script task: its starts and the newest line it printed
    (a script tells the toolkit no step; its output is what can be known)."""
    lines = []
    for view in views:
        p = view.progress
        if p.attempts is None:
            continue
        said = (
            f"last line {_duration(p.last_line_age_s)} ago: {_clip(p.last_line)!r}"
            if p.last_line
            else "no line printed yet"
        )
        lines.append(f"{view.job_id} (script, {p.attempts} start(s)): {said}")
    return ["", *lines] if lines else []


def _clip(line: str, width: int = 100) -> str:
    """A long line's head (what it is: "[rank 0] done", "Epoch 3") and tail (its newest
    figures), not its tail alone cut mid-word ("ank 0] done: ...")."""
    if len(line) <= width:
        return line
    head = width * 3 // 5
    return f"{line[:head]} … {line[-(width - head - 3) :]}"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    from jeanzay_kit.rundir.progress import format_duration

    return format_duration(seconds)


def summary(states: Iterable[str]) -> str:
    counts: dict[str, int] = {}
    for s in states:
        counts[s] = counts.get(s, 0) + 1
    return ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))


def _evaluation(values: Mapping[str, float] | None) -> str:
    """`0.4321 accuracy=0.912`: the eval loss, then each metric of eval.metrics."""
    from jeanzay_kit.rundir.progress import is_eval_metric

    if not values or values.get("eval_loss") is None:
        return "-"
    parts = [f"{values['eval_loss']:.4f}"]
    for key, value in values.items():
        if is_eval_metric(key) and isinstance(value, (int, float)):
            parts.append(f"{key[5:]}={value:.4g}")
    return " ".join(parts)
