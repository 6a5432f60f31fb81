"""`jzk train [OVERRIDES]`: the Hydra application that trains, the same program on a
laptop and on every task of a Slurm job.

`jzk train`, `python -m jeanzay_kit.train_app` (what rendered scripts run on each task)
and `python train.py` in a checkout are one entry point: the config tree is the project's
`conf/`, then the user's folder, then the package's (config/compose.py), Hydra's
command line is the same (`-m` sweeps, `--cfg job`, `--help`), and the project's root is
importable (project/import_path.py). See docs/your-project.md.
"""

from __future__ import annotations

# Only light imports above the StopRequest: Slurm's signals (SIGUSR1 before the time
# limit, SIGTERM at preemption) must be noted from the very start, before Hydra (~0.3 s)
# is imported: the default action of SIGUSR1 is to kill the process.
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

from jeanzay_kit.ending.preemption import StopRequest
from jeanzay_kit.rundir.run_directory import RunDir

PROGRAM = "jzk train"
TRAIN_HELP = """usage: {prog} [KEY=VALUE ...] [-m] [-- YOUR SCRIPT'S ARGUMENTS]

Train the project here (cluster=local: one worker per GPU, or two CPU workers with
gloo), or, with -m and a Slurm profile, submit a sweep of it as job arrays. A rerun of the
same experiment resumes it from its newest complete checkpoint.

Common keys (docs/configuration.md lists every one, with its check):
  cluster=NAME                     where it runs: local, jeanzay_h100, ... (jzk clusters)
  resources.nodes=N resources.gpus_per_node=N resources.time=HH:MM:SS
  parallel=ddp|fsdp|pipeline|pipeline_ddp|dataparallel
  model=NAME data=NAME optim.lr=X  your model and data: model._target_=pkg.Class, ...
  train.steps=N train.global_batch_size=N|auto train.micro_batch_size=N|auto
  job.entry=script.py -- ARGS      your own script, unchanged, on every task
  job.run_dir=PATH                 where metrics and checkpoints go
  resume=auto|never|PATH           where to start from

Examples:
  {prog} train.steps=200
  {prog} -m cluster=jeanzay_h100 cluster.account=abc@h100 optim.lr=1e-3,3e-4
  {prog} job.entry=train_gpt.py -- --batch_size=8

Before a job: `jzk validate KEY=VALUE ...` shows what a request resolves to, and
`{prog} --cfg job` prints the whole composed config. Hydra's options: --hydra-help."""


def run_app(
    argv: Sequence[str] | None = None,
    stop: StopRequest | None = None,
    prog: str = PROGRAM,
) -> None:
    """Run Hydra's command line over `argv` (default sys.argv[1:]); exits like Hydra."""
    stop = stop or StopRequest()
    # The environment is read here, once; everything below receives values.
    env = dict(os.environ)
    cwd = Path.cwd()
    given = list(sys.argv[1:] if argv is None else argv)
    options = given[: given.index("--")] if "--" in given else given
    if "--help" in options or "-h" in options:  # the toolkit's page; Hydra's: --hydra-help
        print(TRAIN_HELP.format(prog=prog))
        return
    args = _prepared_args(given, env, cwd)

    import hydra
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import DictConfig, OmegaConf

    @hydra.main(version_base="1.3", config_path="pkg://jeanzay_kit.conf", config_name="config")
    def train(cfg: DictConfig) -> float | None:
        from jeanzay_kit.node.entry import main as run_main

        config = cast(dict[str, Any], OmegaConf.to_container(cfg, resolve=True))
        hydra_cfg = HydraConfig.get()
        run_dir = RunDir(Path(hydra_cfg.runtime.output_dir))
        # The environment of the process this task runs in, read once more: a launcher
        # may run it elsewhere (hydra-submitit-launcher pickles this function into a Slurm
        # job, where the command line's environment, a login node's, is not the task's).
        here = dict(os.environ)
        code = run_main(
            config,
            here,
            run_dir,
            cpu_count=os.cpu_count() or 1,
            stop=stop,
            on_held=lambda: _record_hydra(cfg, hydra_cfg, run_dir),
        )
        if code:
            sys.exit(code)
        # The run's result (runtime/run_result.py) is what Hydra's sweeper receives.
        return _run_value(run_dir, str(hydra_cfg.sweeper.get("_target_", "")), prog)

    saved = sys.argv
    # Hydra reads its command line from sys.argv (and its --help names sys.argv[0]).
    sys.argv = [prog, *args]
    try:
        train()
    finally:
        sys.argv = saved


def _record_hydra(cfg: Any, hydra_cfg: Any, run_dir: RunDir) -> None:
    """Hydra's record of the run (<run_dir>/.hydra: config, hydra, overrides), written by
    the process that holds the run directory only: the shipped config sets
    hydra.output_subdir=null so that a refused command (another run writes there:
    lease.py; its checkpoints or command are another experiment's: node/entry.py
    refuse_before_writing) rewrites none of it, and `jzk status` and `jzk report` go on
    naming the overrides the run trained with."""
    from omegaconf import OmegaConf

    out = run_dir.hydra
    out.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(cfg, out / "config.yaml", resolve=False)
    OmegaConf.save(OmegaConf.create({"hydra": hydra_cfg}), out / "hydra.yaml", resolve=False)
    OmegaConf.save(hydra_cfg.overrides.task, out / "overrides.yaml", resolve=False)


def _prepared_args(args: list[str], env: dict[str, str], cwd: Path) -> list[str]:
    """The command line as Hydra takes it (`-- ARGS` as job.args), the project on the
    import path, the schema and resolvers registered, the group choices checked: a
    mistake is one line and exit 2 before Hydra composes anything."""
    from jeanzay_kit import report
    from jeanzay_kit.config.command_line import split_script_args, with_script_args
    from jeanzay_kit.config.compose import check_group_choices, config_roots, register_schemas
    from jeanzay_kit.config.resolvers import register_resolvers
    from jeanzay_kit.errors import JzkError
    from jeanzay_kit.project.import_path import put_project_on_path

    try:
        # `jzk train [OVERRIDES] -- ARGS`: the script's arguments, verbatim, as job.args.
        args = with_script_args(*split_script_args(args))
    except JzkError as err:
        report.error(report.TRAIN, err)
        sys.exit(err.exit_code)
    put_project_on_path(env, cwd)
    register_resolvers()  # ${jzk.config_hash:} in the default job.run_dir
    register_schemas()  # the typed schema every conf/ file extends (base_<name>)
    if not _has_config_dir(args):
        try:
            overrides = [a for a in args if not a.startswith("-")]
            check_group_choices(overrides, config_roots(env, cwd))
            check_composes(args)
        except JzkError as err:
            report.error(report.TRAIN, err)
            sys.exit(err.exit_code)
    return args


# Hydra's flags after which the command line is still one run, or a sweep, to compose.
_RUN_FLAGS = ("-m", "--multirun")


def check_composes(args: Sequence[str]) -> None:
    """The overrides compose and resolve as `jzk validate` composes them: a value of the
    wrong type, a key the schema lacks, an override Hydra cannot parse, an interpolation
    naming a missing key are its one line (JzkError, exit 2), not Hydra's message or
    traceback. A sweep's points differ (`a=1,2`): only its syntax is checked here, each
    point where it is composed. Other flags (--cfg, --info, ...) are Hydra's own."""
    from jeanzay_kit.config.compose import compose_config
    from jeanzay_kit.config.compose_errors import compose_error

    if any(a.startswith("-") and a not in _RUN_FLAGS for a in args):
        return
    overrides = [a for a in args if not a.startswith("-")]
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    from jeanzay_kit.errors import JzkError

    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except HydraException as err:
        raise compose_error(err, overrides) from None
    if any(o.is_sweep_override() for o in parsed):
        return
    # Hydra's own keys (hydra.sweeper.params..., hydra/launcher=...) configure Hydra, not
    # the run: Hydra's entry point takes them, the compose API may not.
    job = [o for o, p in zip(overrides, parsed, strict=True) if not _is_hydra_key(p.key_or_group)]
    try:
        compose_config(job)  # the composition is cached: a rerun pays ~0.02 s
    except JzkError:
        raise
    except Exception:  # noqa: BLE001 - not a mistake of the request: Hydra's to judge
        return


def _is_hydra_key(key: str) -> bool:
    return key == "hydra" or key.startswith(("hydra.", "hydra/"))


# Sweepers that only enumerate points: they read no value from a run.
GRID_SWEEPERS = ("BasicSweeper", "JeanzaySweeper")


def _run_value(run_dir: RunDir, sweeper: str, prog: str) -> float | None:
    """The value of result.json; a search (any sweeper that is not a grid) without one is
    told why, in one line, instead of failing on a None deep in its own code."""
    from jeanzay_kit import report
    from jeanzay_kit.errors import JzkError
    from jeanzay_kit.runtime.run_result import missing_reason, read_result, result_value

    value = result_value(run_dir)
    if value is not None or sweeper.endswith(GRID_SWEEPERS):
        return value
    record = read_result(run_dir) or {}
    why = (
        missing_reason(str(record.get("objective")), record)
        if record
        else f"the run wrote no {run_dir.result} (a script writes it itself: docs/tuning.md)"
    )
    err = JzkError(f"the sweeper {sweeper} needs the run's value: {why}")
    report.error(prog, err)
    sys.exit(err.exit_code)


def _has_config_dir(args: Sequence[str]) -> bool:
    """A job's frozen config (--config-dir/--config-name) needs no group check."""
    return any(a.startswith(("--config-dir", "-cd", "--config-name", "-cn")) for a in args)


if __name__ == "__main__":
    run_app(prog="python -m jeanzay_kit.train_app")
