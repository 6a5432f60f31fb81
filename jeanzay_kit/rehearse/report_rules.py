"""What a rehearsal measured, as its report says it. Pure: the runner (rehearse/runner.py)
times each fault; here are the verdicts, the totals and the advice (Young's interval)."""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

from jeanzay_kit.ending.ending_rules import KILLED, UNKNOWN
from jeanzay_kit.rehearse.schedule import PREEMPT, STARTUP


@dataclass(frozen=True)
class Measured:
    """One fault as the runner saw it (times in seconds from its injection)."""

    kind: str
    step: int  # the newest step the run had reached when it was injected
    detected_s: float | None  # until the toolkit acted on it (a stop agreed, a restart)
    by: str  # what noticed it: the stop agreement, the launcher, the watchdog
    resumed_s: float | None  # until a step past the one it resumed from was logged
    resumed_from: int | None  # the step the run went on from


@dataclass(frozen=True)
class FaultRow:
    kind: str
    step: int
    detected_s: float | None
    by: str
    resumed_s: float | None
    lost_steps: int | None
    verdict: str


# A process's death by SIGKILL with no word of its own in the log: the launcher's
# evidence (`killed by SIGKILL`, `exit 137: killed by SIGKILL`: node/local.py, the script
# task), or srun's line when it ended the job step (ending_rules.KILLED).
_KILLED_BY_SIGKILL = re.compile(r"killed by SIGKILL")


def noticed_by(kind: str, evidence: str) -> str:
    """What noticed an attempt's end, in the report's words, from its endings.jsonl record.
    A process killed from outside is `unknown` to the run's record (nothing says why: the
    OOM killer, a user, a node lost), but a rehearsal knows it killed it: what noticed
    is the launcher that saw its process die, or srun that ended the job step."""
    if kind == UNKNOWN and KILLED.search(evidence):
        return f"srun ended the job step: a process killed ({evidence})"
    if kind == UNKNOWN and _KILLED_BY_SIGKILL.search(evidence):
        return f"the launcher: a process killed ({evidence})"
    return f"{kind}: {evidence}"


def row(m: Measured, checkpoint_every: int) -> FaultRow:
    """The verdict: a stop signal loses no step; a crash or a hang at most the checkpoint
    interval; a run that did not go on failed the fault."""
    lost = None if m.resumed_from is None else max(m.step - m.resumed_from, 0)
    if m.resumed_s is None or lost is None:
        verdict = "not survived: the run did not go on"
    elif m.kind in (PREEMPT, STARTUP) and lost > 0:
        verdict = f"lost {lost} step(s) on a stop signal (0 expected)"
    elif lost > checkpoint_every:
        verdict = f"lost {lost} steps, more than checkpoint.every_steps={checkpoint_every}"
    else:
        verdict = "ok"
    return FaultRow(m.kind, m.step, m.detected_s, m.by, m.resumed_s, lost, verdict)


@dataclass(frozen=True)
class Where:
    """Where a run that makes no step is: in words; whether it can never go on by itself
    (a held job, one Slurm refuses as it stands); whether it waits in a queue (a wait
    that may last, on a busy cluster)."""

    words: str
    never: bool = False
    queued: bool = False


def job_waiting(job: str, row: str, shown: str) -> Where:
    """A job's state in words, from squeue's `%T|%r|%N` row and `scontrol show job`: why
    it pends (slurm/pending.py) or where it runs, and the nodes it leaves out (after a
    node at fault, restart_job.leave_out); and whether it can never start by itself:
    held, or refused as it stands (Slurm's BadConstraints when the nodes it leaves out
    leave too few)."""
    from jeanzay_kit.slurm.pending import Waiting, never_starts, pending_why

    state, reason, nodes = ([*row.strip().split("|"), "", ""])[:3]
    found = re.search(r"ExcNodeList=(\S+)", shown)
    left_out = found[1] if found and found[1] != "(null)" else ""
    said = f"job {job} {state or 'not in the queue'}"
    if state == "PENDING" and reason == "BadConstraints" and left_out:
        said += f" ({reason}): the node(s) it leaves out, {left_out}, leave too few for it"
    elif state == "PENDING":
        said += f": {pending_why(Waiting(job, reason))}"
    elif nodes:
        said += f" on {nodes}"
    if left_out and reason != "BadConstraints":
        said += f"; it leaves out node(s) {left_out}"
    never = state == "PENDING" and never_starts(reason)
    return Where(said, never, queued=state in ("PENDING", "REQUEUED", "CONFIGURING"))


def progress_line(number: int, done: int, total: int, m: Measured) -> str:
    """One line as each fault ends, while the rehearsal goes on (a run on a cluster takes
    minutes a fault: its user sees where it is). number: the fault's in faults.json and
    the report (from 0); done: the faults ended so far, this one included."""
    took = "not noticed" if m.detected_s is None else f"noticed in {m.detected_s:.1f} s"
    went_on = (
        "did not go on"
        if m.resumed_s is None
        else f"went on from step {m.resumed_from} {m.resumed_s:.1f} s after it"
    )
    head = f"rehearse: #{number} {m.kind} ({done}/{total}) at step {m.step}"
    return f"{head}: {took} ({m.by}); {went_on}"


def young_interval_s(save_s: float, mtbf_s: float) -> float:
    """Young's checkpoint interval: sqrt(2 x save time x mean time between failures)
    (J. W. Young, "A first order approximation to the optimum checkpoint interval",
    Communications of the ACM 17(9), 1974)."""
    return math.sqrt(2 * save_s * mtbf_s)


def goodput(reference_s: float, rehearsal_s: float) -> tuple[float, str | None]:
    """The run without faults' time over the rehearsal's, and what to say when it is
    over 1: a rehearsal with its faults cannot train the same steps faster than the same
    run without them unless the machine was busier while that run trained (a user trial
    read 1.07 on a loaded machine). Then it is given as 1, with the line saying why it
    is no measure."""
    if reference_s <= 0 or rehearsal_s <= 0:
        return 0.0, None
    ratio = reference_s / rehearsal_s
    if ratio <= 1:
        return ratio, None
    return 1.0, (
        f"goodput not measured: the run without faults took {reference_s:.1f} s, longer "
        f"than the rehearsal with its faults ({rehearsal_s:.1f} s), so the machine was "
        "busier while it ran; rehearse where the cores are not all taken"
    )


@dataclass(frozen=True)
class Totals:
    digest_equal: bool
    lost_steps: int
    goodput: float  # the fault-free run's time over the rehearsal's
    loss_close: bool | None = None  # final_loss_check's verdict (None: nothing to compare)
    bitwise: bool = True  # the run ends bit for bit as its reference when resumes are exact


# A run that is not deterministic (GPU kernels that add with atomics, as an embedding's
# backward does on CUDA) never ends bit for bit as its reference, however exact its
# resumes: then the ends' losses are compared, over the last LOSS_WINDOW steps both
# logged (a twentieth of them, 10 to 100).
LOSS_WINDOW = (10, 100)
LOSS_FLOOR = 1e-4  # of the loss: the least difference allowed


@dataclass(frozen=True)
class LossCheck:
    close: bool
    line: str


def final_loss_check(
    reference: Mapping[int, float], rehearsed: Mapping[int, float]
) -> LossCheck | None:
    """The rehearsal's final loss against the run without faults' (each a step -> loss
    map, the last attempt's value for a step trained twice): their means over the last
    steps both logged differ by at most the reference's own spread over those steps (the
    standard deviation of its loss from step to step at the end of training: what a
    different batch order or rounding moves it by), or LOSS_FLOOR of it when it is
    flat. None: under 2 common steps."""
    steps = sorted(set(reference) & set(rehearsed))
    if len(steps) < 2:
        return None
    low, high = LOSS_WINDOW
    window = steps[-max(low, min(high, len(steps) // 20)) :]
    ref = [reference[s] for s in window]
    got = statistics.fmean(rehearsed[s] for s in window)
    spread, want = statistics.pstdev(ref), statistics.fmean(ref)
    # A loss that does not move at all (spread 0) still allows for rounding.
    close = abs(got - want) <= max(spread, LOSS_FLOOR * abs(want))
    return LossCheck(
        close,
        f"final loss {got:.4g} against the run without faults' {want:.4g} (means of the "
        f"last {len(window)} steps): {'within' if close else 'outside'} its step-to-step "
        f"spread ({spread:.2g})",
    )


# Steps lost on a stop signal: the loop went on, or stopped, without saving first.
NO_SAVE_ON_STOP = (
    "your loop does not save on the stop signal: when s.should_stop(step, loss=loss) is "
    "True, save (ckpt.save(step + 1)) before s.requeue_and_exit(), and no step is lost "
    "(docs/your-own-loop.md, part b)"
)


def advice(
    rows: Sequence[FaultRow],
    step_s: float,
    save_s: float,
    every_s: float,
    every_steps: int,
    *,
    own_loop: bool = False,
) -> list[str]:
    """What to change, from the figures: the checkpoint interval against Young's for
    this fault rate (when the run recorded how long a save blocks it), and every fault
    that was not survived. own_loop: the user's loop (a script on the session), which
    sets its interval itself and must save on a stop."""
    knob = "your script's checkpoint interval" if own_loop else "checkpoint.every_steps"
    out = [f"fault {i}: {r.kind}: {r.verdict}" for i, r in enumerate(rows) if r.verdict != "ok"]
    if own_loop and any(r.kind in (PREEMPT, STARTUP) and r.lost_steps for r in rows):
        out.append(NO_SAVE_ON_STOP)
    if step_s > 0 and every_s > 0 and save_s > 0:
        best = young_interval_s(save_s, every_s) / step_s
        now = every_steps
        if now > 2 * best or now < best / 2:
            out.append(
                f"{knob}={now}: for a fault every {every_s:g} s, a save of "
                f"{save_s:.2f} s and a step of {step_s:.3f} s, Young's interval is about "
                f"{max(round(best), 1)} steps"
            )
    return out


# The watchdog's timeout suggested from the run: this many of its slowest steps (with
# their save), and never under a minute (what a step does varies more than a rehearsal
# shows: an evaluation, a slower node, a filesystem at its busiest).
WATCHDOG_STEPS, WATCHDOG_FLOOR_S = 10, 60.0


def watchdog_advice(stall_s: float, slowest_s: float) -> str | None:
    """watchdog.stall_seconds against the slowest step of the run without faults (its
    save included): so long that a hang holds the allocation for nothing, or so short
    that a slow step is taken for a hang; None when it fits (or the watchdog is off)."""
    if stall_s <= 0 or slowest_s <= 0:
        return None
    enough = max(WATCHDOG_FLOOR_S, WATCHDOG_STEPS * slowest_s)
    step = f"the slowest step of the run without faults took {slowest_s:.2f} s with its save"
    if stall_s < 2 * slowest_s:
        return (
            f"watchdog.stall_seconds={stall_s:g} is under twice {step}: a slow step may be "
            f"taken for a hang; about {math.ceil(enough)} s waits it out (an evaluation too?)"
        )
    if stall_s > 3 * enough:
        return (
            f"watchdog.stall_seconds={stall_s:g}: a hang holds the allocation that long "
            f"before it is named, and {step}; about {math.ceil(enough)} s names it sooner "
            "(keep it above your evaluation's time, which the rehearsal does not see)"
        )
    return None


def ended_before_fault(
    code: int | None, step: int, due: int, log: str, after: str | None = None
) -> str:
    """Why a run ended before the schedule's next fault was sent (the rehearsal stops
    there). A failure after the fault before (`after`: its "#N kind"): that fault was not
    survived (on Slurm its job was not requeued), whatever the run's length. Past the
    step where the fault was due: the rehearsal, which reads the run's records twenty
    times a second, was not given the CPU while the run got there and on to its end (a
    loaded machine; once on a 2-core CI runner)."""
    said = f"the run ended (exit {code}) at step {step}"
    if code and after is not None:
        return (
            f"{said} after fault {after} and did not go on: that fault was not survived "
            f"(nothing started the run again). HINT: its log says why, in its last lines: {log}"
        )
    if step < due:
        return (
            f"{said}, before the next fault at step {due}: it trained fewer steps than its "
            "run without faults. HINT: give it more steps (train.steps, or your script's "
            f"own), or lower --faults or --every; see {log}"
        )
    return (
        f"{said}, past step {due} where the next fault was due, before the rehearsal saw "
        "it get there: the machine was too busy for the rehearsal to follow the run. "
        "HINT: rehearse where the cores are not all taken, or give the run more steps "
        f"(train.steps, or your script's own) so that its faults fall well inside it; see {log}"
    )


def report(rows: Sequence[FaultRow], totals: Totals, lines: Sequence[str]) -> dict[str, object]:
    """rehearsal.json's object (and `jzk rehearse --json`'s last line)."""
    return {
        "faults": [asdict(r) for r in rows],
        "digest_equal": totals.digest_equal,
        "loss_close": totals.loss_close,
        # What the final model must meet: digest_equal, or (bitwise false: a run on
        # GPUs) loss_close.
        "bitwise": totals.bitwise,
        "lost_steps": totals.lost_steps,
        "goodput": round(totals.goodput, 3),
        "advice": list(lines),
    }
