"""Where `jzk doctor` runs: local worker processes (cluster=local), or a task of a Slurm job
step (`python -m jeanzay_kit.doctor`, which the script of `jzk doctor --submit` runs under
srun). Reads the environment and argv here, once, and passes values down."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from jeanzay_kit import report
from jeanzay_kit.config.spec import JobSpec
from jeanzay_kit.distributed.ranks import RankInfo
from jeanzay_kit.errors import JzkError

PROGRAM = "jzk doctor"


@dataclass(frozen=True)
class DoctorOptions:
    timeout_s: float = 60.0  # how long a rank may stay silent before it is named
    size_mb: float = 16.0  # the all-reduce of the bandwidth tests
    iters: int = 5  # timed all-reduces per test


def _probe(spec: JobSpec, info: RankInfo, visible: str | None, options: DoctorOptions) -> int:
    from jeanzay_kit.doctor.probe import probe_rank

    return probe_rank(
        info,
        spec.cluster.device,
        visible,
        backend=spec.comm.backend,
        timeout_s=options.timeout_s,
        size_mb=options.size_mb,
        iters=options.iters,
    )


def _rank_main(index: int, spec: JobSpec, infos: list, options: DoctorOptions) -> None:
    """One local worker (a spawned process): exits 1 with one line on a failed check."""
    threads = max(1, (os.cpu_count() or 1) // len(infos))
    import torch

    torch.set_num_threads(threads)
    try:
        code = _probe(spec, infos[index], os.environ.get("CUDA_VISIBLE_DEVICES"), options)
    except JzkError as err:
        report.error(PROGRAM, err)
        sys.exit(err.exit_code)
    sys.exit(code)


def doctor_local(spec: JobSpec, options: DoctorOptions) -> int:
    """Start the run's world size of workers on this machine, as `python train.py` does."""
    import torch.multiprocessing as mp

    from jeanzay_kit.node.local import free_port, local_rank_infos

    infos = local_rank_infos(spec.layout.world_size, free_port())
    context = mp.start_processes(
        _rank_main,
        args=(spec, infos, options),
        nprocs=len(infos),
        join=False,
        start_method="spawn",
    )
    try:
        while not context.join():
            pass
    except mp.ProcessExitedException as err:
        return err.exit_code or 1
    except mp.ProcessRaisedException as err:
        report.error(PROGRAM, str(err).strip().splitlines()[-1])
        return 1
    return 0


def task_main(argv: Sequence[str], env: dict[str, str]) -> int:
    """`python -m jeanzay_kit.doctor [--timeout S] [--size-mb M] OVERRIDES` on a task of a job
    step; also reads the frozen config of a rendered script (--config-dir/--config-name)."""
    import argparse

    from jeanzay_kit.config.spec import build_job_spec
    from jeanzay_kit.distributed.ranks import launched_by, rank_info_from_env

    parser = argparse.ArgumentParser(prog="python -m jeanzay_kit.doctor")
    parser.add_argument("--timeout", type=float, default=DoctorOptions.timeout_s)
    parser.add_argument("--size-mb", type=float, default=DoctorOptions.size_mb)
    parser.add_argument("--iters", type=int, default=DoctorOptions.iters)
    parser.add_argument("--config-dir", default=None)
    parser.add_argument("--config-name", default=None)
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args(argv)
    try:
        if launched_by(env) is None:
            raise JzkError(
                "python -m jeanzay_kit.doctor runs as the tasks of a job step. HINT: "
                "`jzk doctor --submit cluster=...`, or `srun python -m jeanzay_kit.doctor "
                "cluster=...` inside an allocation; `jzk doctor` alone runs locally"
            )
        cfg = _task_config(args.config_dir, args.config_name, args.overrides)
        spec = build_job_spec(cfg, interpreter=sys.executable)
        options = DoctorOptions(args.timeout, args.size_mb, args.iters)
        return _probe(spec, rank_info_from_env(env), env.get("CUDA_VISIBLE_DEVICES"), options)
    except JzkError as err:
        report.error(PROGRAM, err)
        return err.exit_code


def _task_config(config_dir: str | None, name: str | None, overrides: Sequence[str]) -> dict:
    """The frozen config a rendered script wrote (already resolved), or one composed from
    overrides. Hydra's own overrides (hydra.run.dir=...) mean nothing here."""
    if config_dir and name:
        from omegaconf import OmegaConf

        loaded = OmegaConf.to_container(OmegaConf.load(Path(config_dir) / f"{name}.yaml"))
        assert isinstance(loaded, dict)
        return loaded
    from jeanzay_kit.config.compose import compose_config

    return compose_config([o for o in overrides if not o.startswith("hydra.")], None)
