"""`jzk rehearse`: the schedule written first (faults.json), the run without faults, the
run under the schedule, then rehearsal.json (report_rules.py says what is in it)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from jeanzay_kit.ckpt.kept import refuse_stale
from jeanzay_kit.config.spec import JobSpec
from jeanzay_kit.errors import JzkError
from jeanzay_kit.rehearse import report_rules as rules
from jeanzay_kit.rehearse.runner import (
    check_launch,
    logged_losses,
    rehearse_run,
    run_reference,
    save_seconds,
    slowest_step_seconds,
    timeline,
)
from jeanzay_kit.rehearse.schedule import (
    CKPT_WRITE,
    EXPECTED,
    HANG,
    KILL_RANK,
    KINDS,
    NAN,
    NODE_LOST,
    SLURM_KINDS,
    Fault,
    kinds_for,
    misfit,
    paced,
    schedule,
    to_json,
)
from jeanzay_kit.rundir.run_directory import RunDir


@dataclass(frozen=True)
class Options:
    faults: int
    every_s: float
    seed: int
    folder: Path
    slurm: bool = False  # submitted to the Slurm cluster (--slurm), else run here
    # The environment, read once by the command (checkpoint.dir's $SCRATCH and the like).
    env: Mapping[str, str] = field(default_factory=dict)
    project: Path | None = None  # where job.entry's script lies (job.workdir, or here)


def _digest_lines(
    spec: JobSpec, plan: Sequence[Fault], equal: bool, check: rules.LossCheck | None
) -> list[str]:
    """What the final model's digest says when it differs from the reference's, and its
    final loss against the reference's (final_loss_check)."""
    if equal:
        return []
    loss = f"; {check.line}" if check is not None else ""
    if _skipped_update(spec, plan):
        return [f"the final model differs by design: train.nonfinite=skip dropped an update{loss}"]
    if not _bitwise(spec, plan) and check is not None and check.close:
        return [f"the final model differs, as it does on GPUs however exact the resumes{loss}"]
    if not _bitwise(spec, plan) and check is None:
        return [
            "the final model differs, as it does on GPUs however exact the resumes, and the "
            "runs logged no loss to compare it by: log it (s.log(step, loss=loss))"
        ]
    return [f"the final model differs from the run without faults: a resume was not exact{loss}"]


def _skipped_update(spec: JobSpec, plan: Sequence[Fault]) -> bool:
    return spec.train.nonfinite == "skip" and any(f.kind == NAN for f in plan)


def _bitwise(spec: JobSpec, plan: Sequence[Fault]) -> bool:
    """Whether the run ends bit for bit as its reference when every resume is exact: on
    CPU, yes (the tests hold it), unless a NaN's update was dropped (train.nonfinite=
    skip); on GPUs kernels that add with atomics (an embedding's backward on CUDA) make
    two runs of the same command differ."""
    from jeanzay_kit.distributed.devices import nvidia_driver_present

    on_cpu = spec.cluster.device == "cpu" or (
        spec.cluster.device == "auto" and not spec.cluster.is_slurm and not nvidia_driver_present()
    )
    return on_cpu and not _skipped_update(spec, plan)


def rehearse(spec: JobSpec, overrides: Sequence[str], opts: Options) -> dict[str, object]:
    run = RunDir(opts.folder / "run")
    reference = reference_of(run)
    _refuse_bad_start(spec, opts, (reference, run))
    run.root.mkdir(parents=True)
    kinds, left_out = kinds_for(SLURM_KINDS if opts.slurm else KINDS, _size_bytes(spec, opts))
    if left_out:
        print(f"rehearse: {left_out}", flush=True)
    plan = schedule(opts.faults, opts.every_s, opts.seed, spec.layout.world_size, kinds)
    run.faults.write_text(json.dumps(to_json(plan, opts.seed, opts.every_s), indent=1) + "\n")
    more = _run_overrides(spec, overrides, opts, plan)
    print(f"rehearse: {len(plan)} fault(s), seed {opts.seed}, in {opts.folder}", flush=True)
    for f in plan:
        print(f"  {f.number:>2} {f.kind:<12} after {f.after_s:g} s  ({EXPECTED[f.kind]})")
    print("rehearse: the run without faults first (the reference)", flush=True)
    ref = run_reference(timeline(more, reference, opts.folder / "reference.log", opts.slurm))
    at_pace = paced(plan, ref.steps_per_s)
    # The run's own length and checkpoint interval, as the reference showed them: a
    # script (job.entry) has its own, which the config does not know.
    every = ref.checkpoint_every or spec.checkpoint.every_steps
    if why := misfit(at_pace, ref.last_step, every):
        raise JzkError(why)
    print(
        f"rehearse: reference done in {ref.seconds:.1f} s ({ref.steps_per_s:.0f} steps/s); "
        f"faults after {', '.join(str(n) for _, n in at_pace)} steps of training; now the "
        "run under the schedule",
        flush=True,
    )
    step_s = 1 / ref.steps_per_s
    # A script's own loop sets its interval itself (its save option), not the config.
    own = spec.job.runs_script
    line = timeline(more, run, opts.folder / "run.log", opts.slurm, spec)
    if own:
        line = replace(line, step_s=step_s, interval=every)
    measured, total_s = rehearse_run(line, at_pace)
    rows = [rules.row(m, every) for m in measured]
    equal = run.model_digest.read_text().strip() == ref.digest
    check = rules.final_loss_check(logged_losses(reference), logged_losses(run))
    close = None if check is None else check.close
    lost = sum(r.lost_steps or 0 for r in rows)
    ratio, unmeasured = rules.goodput(ref.seconds, total_s)
    totals = rules.Totals(equal, lost, ratio, close, _bitwise(spec, plan))
    lines = rules.advice(rows, step_s, save_seconds(run), opts.every_s, every, own_loop=own)
    stall = rules.watchdog_advice(spec.watchdog.stall_seconds, slowest_step_seconds(reference))
    more_lines = [line for line in (stall, unmeasured) if line]
    lines = [*_digest_lines(spec, plan, equal, check), *lines, *more_lines]
    found = rules.report(rows, totals, lines)
    run.rehearsal.write_text(json.dumps(found, indent=1) + "\n")
    return found


def _refuse_bad_start(spec: JobSpec, opts: Options, runs: Sequence[RunDir]) -> None:
    """JzkError before anything runs: bad options, a plain script, a folder or a
    checkpoint.dir an earlier rehearsal left."""
    check_launch(spec, opts.slurm)
    if opts.faults < 1 or opts.every_s <= 0:
        raise JzkError("--faults N (1 or more) and --every S (seconds, more than 0)")
    if spec.job.runs_script and opts.project is not None:
        refuse_plain_script(spec.job.entry, opts.project)  # before its run without faults
    if opts.folder.exists():
        raise JzkError(
            f"{opts.folder} exists: a rehearsal starts afresh. HINT: remove it, or "
            "--dir another folder (the same --seed replays the same schedule)"
        )
    for each in runs:  # checkpoint.dir: an earlier rehearsal's, left there
        refuse_stale(spec.checkpoint.dir, each, opts.env)


def _run_overrides(
    spec: JobSpec, overrides: Sequence[str], opts: Options, plan: Sequence[Fault]
) -> list[str]:
    # Each crash or hang spends a restart: the rehearsal gives the run that many more.
    spent = sum(f.kind in (KILL_RANK, HANG, CKPT_WRITE, NODE_LOST) for f in plan)
    more = [*overrides, f"preemption.max_restarts={spec.preemption.max_restarts + spent}"]
    if opts.slurm and not any(o.startswith("job.log_dir=") for o in overrides):
        # The jobs' Slurm logs and code snapshots in the rehearsal's folder, not a logs/
        # left in the project (a user trial found one there after `rm -r rehearsal`).
        more.append(f"job.log_dir={opts.folder.absolute() / 'logs'}")
    return more


def refuse_plain_script(entry: str, project: Path) -> None:
    """JzkError, before anything runs, when job.entry's script reaches no module that
    names the toolkit (script/reach.py; nothing said when undecided: the run without
    faults shows it, runner.NOT_RECORDED)."""
    from jeanzay_kit.script.reach import TOOLKIT, entry_file, names_any

    script = entry_file(entry, project)
    if script is None or names_any(script, project, TOOLKIT) is not False:
        return
    raise JzkError(
        f"job.entry={entry}: neither {script.name} nor a module of yours it imports uses "
        f"the toolkit ({TOOLKIT[0]}), so its loop records no steps, heartbeats or final "
        "model digest for a rehearsal to follow, and a rehearsal of a plain script is not "
        "built yet (docs/rehearse.md, What is not rehearsed yet). HINT: run your loop "
        "through the session (docs/your-own-loop.md, part b), or rehearse the toolkit's "
        "loop (without job.entry)"
    )


def _size_bytes(spec: JobSpec, opts: Options) -> int:
    """The size of the filesystem the run's checkpoints will be on: checkpoint.dir's, or
    the rehearsal's folder's (the nearest of its parents that exists)."""
    import shutil

    from jeanzay_kit.values import expand_vars

    where = opts.folder.absolute()
    if spec.checkpoint.dir:
        where = Path(expand_vars(spec.checkpoint.dir, opts.env)).expanduser().absolute()
    while not where.exists():
        where = where.parent
    return shutil.disk_usage(where).total


def reference_of(run: RunDir) -> RunDir:
    """The run without faults beside a rehearsal's run (<dir>/run, <dir>/reference)."""
    return run.sibling("reference")


def report_lines(found: dict[str, object]) -> list[str]:
    rows = found["faults"]
    assert isinstance(rows, list)
    head = ("#", "FAULT", "STEP", "DETECTED", "RESUMED", "LOST")
    out = [
        f"{head[0]:>2} {head[1]:<12} {head[2]:>5} {head[3]:>9} {head[4]:>8} {head[5]:>5}  VERDICT"
    ]
    for i, r in enumerate(rows):
        det = "-" if r["detected_s"] is None else f"{r['detected_s']:.1f}s"
        res = "-" if r["resumed_s"] is None else f"{r['resumed_s']:.1f}s"
        lost = "-" if r["lost_steps"] is None else str(r["lost_steps"])
        cells = f"{i:>2} {r['kind']:<12} {r['step']:>5} {det:>9} {res:>8} {lost:>5}"
        out.append(f"{cells}  {r['verdict']}; {r['by']}")
    out.append(
        f"final model equal to the run without faults: {found['digest_equal']}; steps lost: "
        f"{found['lost_steps']}; goodput {found['goodput']:.2f} (the reference's time over "
        "the rehearsal's)"
    )
    advice = found["advice"]
    assert isinstance(advice, list)
    out += [f"change: {a}" for a in advice] or [
        "change: nothing: every fault was survived as expected"
    ]
    return out
