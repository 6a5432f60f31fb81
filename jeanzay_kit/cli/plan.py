"""`jzk plan`: when the request would start, and what would start sooner while training
the same run (launch/plan_rules.py). Every row is validated (the fit check included)
before Slurm is asked (`sbatch --test-only`: no job is created). docs/queue.md."""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import asdict

from jeanzay_kit.cli.common import add_config_args, build_spec, require_slurm, slurm_answer
from jeanzay_kit.config.spec import JobSpec
from jeanzay_kit.errors import JzkError
from jeanzay_kit.launch.allocation import charged_gpus
from jeanzay_kit.launch.plan_rules import (
    Alternative,
    Request,
    Row,
    alternatives,
    other_pools,
    plan_table,
    row_of,
    with_alternative,
)


def add(sub: argparse._SubParsersAction) -> None:
    plan = sub.add_parser(
        "plan",
        help="when the request would start, and what would start sooner (sbatch --test-only)",
        description="Ask Slurm (sbatch --test-only, no job created) when the request would "
        "start, and the same for each alternative that still trains the same run: a shorter "
        "time limit in a chain of jobs, another QoS, half the nodes for twice the time (the "
        "global batch kept). Each row: its estimated start, the end by which it is done, the "
        "GPU hours at most. An alternative that does not pass validation is never shown. "
        "docs/queue.md.",
    )
    plan.add_argument("--json", action="store_true", help="the rows as a JSON list, last line")
    plan.add_argument("--apply", type=int, metavar="N", help="submit row N (jzk submit)")
    add_config_args(plan)
    plan.set_defaults(run=run)


def request_of(spec: JobSpec) -> Request:
    res, cluster = spec.resources, spec.cluster
    limits = [
        (q.name, q.max_minutes, q.max_gpus_per_job)
        for q in cluster.qos_by_time()
        if q.usable_on(res.partition.name)
    ]
    longest = max([m for _, m, _ in limits] + [res.partition.max_minutes or 0])
    script = spec.job.runs_script
    return Request(
        minutes=res.time_minutes,
        nodes=res.nodes,
        gpus_per_node=res.gpus_per_node,
        qos=res.qos,
        qos_limits=limits,
        longest_minutes=longest,
        resumes=not script or bool(spec.job.resume_args),
        keeps_global_batch=not script,
        pools=other_pools(res.account, cluster.account_suffix, _profiles(), cluster.name),
    )


def _profiles() -> list[tuple[str, str | None]]:
    """(name, account suffix) of the Slurm profiles that load alone (cli/clusters.py)."""
    from jeanzay_kit.cli.clusters import profile_options
    from jeanzay_kit.config.clusters import profile_from_dict
    from jeanzay_kit.config.compose import load_profile

    out = []
    for option in profile_options(None):
        data = load_profile(option.root.path / "cluster" / f"{option.name}.yaml")
        if data is None:
            continue
        try:
            prof = profile_from_dict(data)
        except JzkError:
            continue
        if prof.is_slurm:
            out.append((option.name, prof.account_suffix))
    return out


def run(args: argparse.Namespace) -> int:
    spec = build_spec(args)
    require_slurm(spec, "there is no queue to plan")
    rows: list[Row] = []
    for alt in alternatives(request_of(spec)):
        row = _row(args, alt, len(rows))
        if row is not None:
            rows.append(row)
    if args.apply is not None:
        return _apply(args, rows)
    if args.json:
        print(json.dumps([_public(r) for r in rows]))
        return 0
    print(plan_table(rows))
    refused = [r for r in rows if r.refused]
    for r in refused:
        print(f"row {r.number}: Slurm refuses it ({r.refused})")
    print("\nsubmit a row: jzk plan <the same overrides> --apply N")
    return 0


def _row(args: argparse.Namespace, alt: Alternative, number: int) -> Row | None:
    """The alternative validated (the fit check included) and Slurm's estimate; None
    when it does not pass validation (never shown)."""
    from jeanzay_kit.launch.fit_check import check
    from jeanzay_kit.launch.request import spec_of

    overrides = with_alternative(args.overrides, alt)
    try:
        spec = spec_of(overrides, args.config_dir)

        def no_hint(more: object) -> JobSpec:
            raise JzkError("no hint is looked for")

        check(spec, overrides, no_hint, os.environ)
    except JzkError:
        return None
    answer = slurm_answer(spec, overrides)
    gpus = charged_gpus(spec)
    refused = None if answer.accepted else answer.message
    return row_of(number, alt, spec.resources.time_minutes, gpus, answer.start, refused)


def _public(row: Row) -> dict[str, object]:
    out = asdict(row)
    out["overrides"] = list(row.overrides)
    return out


def _apply(args: argparse.Namespace, rows: list[Row]) -> int:
    from jeanzay_kit.cli import submit

    chosen = [r for r in rows if r.number == args.apply]
    if not chosen:
        raise JzkError(f"--apply {args.apply}: there are rows 0 to {len(rows) - 1}")
    row = chosen[0]
    print(f"submitting row {row.number} ({row.label})")
    sub = argparse.Namespace(
        overrides=with_alternative(args.overrides, Alternative(row.label, row.overrides)),
        config_dir=args.config_dir,
        chain=row.chain,
        hold=False,
        test_only=False,
        parsable=False,
        json=False,
        on=None,
        command="submit",
    )
    return submit.run(sub)
