"""`hydra/launcher=jeanzay`: a sweep becomes Slurm job arrays, submitted with submitit.

    python train.py -m cluster=slurm_local optim.lr=0.1,0.01,0.001

Every sweep point is composed and validated (JobSpec) before anything is submitted: one
bad point means nothing is queued. Points with the same resource shape share one job
array (chunked to the cluster's MaxArraySize). The launcher returns once everything is
queued (hydra.launcher.wait=true waits for the end; so does a sweeper that reads the
runs' values, e.g. hydra/sweeper=optuna: each run returns its result.json value) and writes
<sweep_dir>/manifest.jsonl: job id, array index, overrides and run dir of every run.

Each run's config is resolved and frozen here, at submission, and its run directory is
<sweep_dir>/<subdir>: the same on every requeue, so a requeued task resumes.
"""

# No `from __future__ import annotations`: Hydra loads plugin modules outside
# sys.modules, where dataclasses cannot resolve string annotations.

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.core.utils import JobReturn, JobStatus, configure_log, setup_globals
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig

log = logging.getLogger(__name__)


@dataclass
class JeanzayLauncherConf:
    _target_: str = "hydra_plugins.jeanzay_launcher.jeanzay_launcher.JeanzayLauncher"
    # Return as soon as the arrays are queued: a sweep may wait hours for nodes, and the
    # manifest plus `jzk status <sweep_dir>` tell where it stands.
    wait: bool = False
    # With wait=true: seconds between two looks at the queue.
    poll_seconds: float = 5.0
    # At most this many tasks of one array run at once (sbatch --array=0-N%P).
    array_parallelism: int = 256
    # submitit's job files (pickled task, its stdout/stderr); %j is the job id.
    submitit_folder: str = "${hydra.sweep.dir}/.submitit/%j"


ConfigStore.instance().store(
    group="hydra/launcher", name="jeanzay", node=JeanzayLauncherConf, provider="jeanzay_kit"
)


class JeanzayLauncher(Launcher):
    # Hydra passes every field of JeanzayLauncherConf, where the defaults are declared.
    def __init__(
        self, *, wait: bool, poll_seconds: float, array_parallelism: int, submitit_folder: str
    ) -> None:
        self.wait = wait
        self.poll_seconds = poll_seconds
        self.array_parallelism = array_parallelism
        self.submitit_folder = submitit_folder
        self.config: DictConfig | None = None
        self.hydra_context: HydraContext | None = None

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        # The task function is not pickled: every task runs jeanzay_kit's trainer
        # (jeanzay_kit.node.task) on the frozen config, as train.py would.
        self.config = config
        self.hydra_context = hydra_context

    def launch(
        self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
    ) -> Sequence[JobReturn]:
        from jeanzay_kit import report
        from jeanzay_kit.errors import JzkError

        try:
            return self._launch(job_overrides, initial_job_idx)
        except JzkError as err:
            # A bad sweep point, sbatch's refusal or failed runs: one message and an exit
            # code, as `jzk` gives, not a Hydra traceback.
            report.error(report.TRAIN, err)
            raise SystemExit(err.exit_code) from err

    def _launch(
        self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
    ) -> Sequence[JobReturn]:
        from jeanzay_kit.errors import RunsFailed
        from jeanzay_kit.launch.arrays import plan_arrays
        from jeanzay_kit.launch.manifest import MANIFEST, read_manifest
        from jeanzay_kit.launch.sweep import submit_arrays, wait_for

        assert self.config is not None and self.hydra_context is not None
        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        sweep_dir = Path(str(self.config.hydra.sweep.dir)).absolute()

        points = self._validated_points(job_overrides, initial_job_idx, sweep_dir)
        max_size = min(p.spec.cluster.max_array_size for p in points)
        code_dir = _snapshot(points[0].spec)
        plans = plan_arrays(points, max_size, self.array_parallelism, code_dir)
        folder = str(Path(self.submitit_folder).absolute())
        log.info(
            f"jeanzay launcher: submitting {len(points)} run(s) as {len(plans)} job "
            f"array(s) to cluster {points[0].spec.cluster.name}"
        )
        # Hydra calls launch once per batch (hydra.sweeper.max_batch_size): a later batch
        # adds to the manifest of the earlier ones.
        manifest = sweep_dir / MANIFEST
        earlier = read_manifest(manifest) if initial_job_idx > 0 and manifest.exists() else []
        submitted = submit_arrays(plans, folder, sweep_dir, earlier)
        for r, _ in submitted:
            log.info(
                f"  #{r['num']} job {r['job_id']}: {' '.join(r['overrides'])} -> {r['run_dir']}"
            )
        log.info(f"manifest: {sweep_dir / 'manifest.jsonl'} (`jzk status {sweep_dir}`)")

        by_num = {r["num"]: (r, job) for r, job in submitted}
        outcomes: dict[int, tuple[str, Any]] = {}
        if self._must_wait():
            results = wait_for([job for _, job in submitted], self.poll_seconds)
            for (r, _), outcome in zip(submitted, results, strict=True):
                outcomes[r["num"]] = outcome
        returns = []
        for point in points:
            ret = JobReturn(
                overrides=list(point.overrides),
                # Points share one composed config, changed point by point, so none is
                # kept (Hydra reads only the return values); the run's config is the
                # resolved one each job gets (point.spec.config).
                cfg=None,
                hydra_cfg=self.config,
                working_dir=point.run_dir,
                task_name=str(self.config.hydra.job.name),
            )
            if point.num in outcomes:
                state, value = outcomes[point.num]
                ret.status = JobStatus.COMPLETED if state == "COMPLETED" else JobStatus.FAILED
                ret.return_value = value if state == "COMPLETED" else RuntimeError(value)
            else:
                # Hydra's sweeper reads every return value: without wait, the launcher's
                # job is done once the run is queued, and its value is the manifest line.
                ret.status = JobStatus.COMPLETED
                ret.return_value = by_num[point.num][0]
            returns.append(ret)
        failed = [by_num[n][0]["job_id"] for n, (s, _) in outcomes.items() if s != "COMPLETED"]
        if failed:
            raise RunsFailed(f"{len(failed)} run(s) failed: jobs {', '.join(failed)}")
        return returns

    def _must_wait(self) -> bool:
        """hydra.launcher.wait, or a sweeper that learns from the runs' values (Optuna's):
        it gets them only once the runs are done (each run's result.json value)."""
        from jeanzay_kit.train_app import GRID_SWEEPERS

        assert self.config is not None
        sweeper = str(self.config.hydra.sweeper.get("_target_", ""))
        return self.wait or not sweeper.endswith(GRID_SWEEPERS)

    def _validated_points(
        self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int, sweep_dir: Path
    ) -> list[Any]:
        """Compose, resolve and validate every point; raise once, listing every problem.

        Points that differ only in values share one composition (launch/point_configs.py):
        composing is what a sweep's submission cost (0.2-0.8 s a point)."""
        from hydra.errors import HydraException
        from omegaconf.errors import OmegaConfBaseException

        from jeanzay_kit.config.compose import compose_error
        from jeanzay_kit.config.spec import build_job_spec
        from jeanzay_kit.errors import JzkError, LaunchError, SpecError
        from jeanzay_kit.launch.arrays import SweepPoint
        from jeanzay_kit.launch.point_configs import PointConfigs, resolved_point

        assert self.config is not None and self.hydra_context is not None
        composer = PointConfigs(self.hydra_context.config_loader, self.config)
        points, problems = [], []
        for idx, overrides in enumerate(job_overrides):
            num = initial_job_idx + idx
            label = f"#{num} ({' '.join(overrides) or 'no overrides'})"
            try:
                with composer.point(overrides, num) as sweep_config:
                    run_dir, plain = resolved_point(sweep_config, str(sweep_dir))
                spec = build_job_spec(plain)
            except (HydraException, OmegaConfBaseException) as err:
                # A value Hydra refuses (train.steps=many): listed with the other points'
                # problems, in the words `jzk validate` uses, naming the key.
                problems.append(f"{label}: {compose_error(err, overrides)}")
                continue
            except SpecError as err:
                problems.append(f"{label}: {err}")
                continue
            if not spec.cluster.is_slurm:
                problems.append(
                    f"{label}: cluster={spec.cluster.name} is not a Slurm cluster. HINT: the "
                    "jeanzay launcher submits to Slurm; for local sweeps use "
                    "hydra/launcher=basic"
                )
                continue
            if spec.job.runs_script:
                # Your own command on every task: it must exist before any array is
                # submitted (relative to the project, where the launcher runs).
                from jeanzay_kit.node.script_task import check_entry

                try:
                    check_entry(spec.job.entry, Path.cwd())
                except JzkError as err:
                    problems.append(f"{label}: {err}")
                    continue
            points.append(SweepPoint(num, tuple(overrides), run_dir, spec))
        if problems:
            raise LaunchError(
                "nothing was submitted; fix these sweep points:\n" + "\n".join(problems)
            )
        if not points:
            raise LaunchError("the sweep has no points")
        return points


def _snapshot(spec: Any) -> Any:
    """The project's code frozen once for the whole sweep (its points share it), or None
    with job.snapshot=false. The launcher runs in the project's directory."""
    from jeanzay_kit.project.snapshot import take_snapshot

    if not spec.job.snapshot_for(spec.cluster.is_slurm):
        return None
    snap = take_snapshot(
        Path.cwd(), spec.job.log_dir, spec.job.snapshot_include, spec.checkpoint.run_dir
    )
    log.info(f"code: {snap.files} file(s) ({snap.source}) frozen in {snap.path}")
    return str(snap.path)
