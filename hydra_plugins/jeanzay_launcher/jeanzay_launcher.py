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

Your own `@hydra.main` app with `hydra/launcher=jeanzay` (any task function that is not
the toolkit's trainer, jeanzay_kit/train_app.py): every task calls YOUR function, as
hydra-submitit-launcher does, and the launcher takes hydra-submitit-launcher's keys
(timeout_min, nodes, tasks_per_node, gpus_per_node, ...; launch/app_rules.py) plus
`cluster`, the profile every point is validated against before anything is queued
(node/app_task.py runs each task; docs/slurm.md "Coming from hydra-submitit-launcher").
"""

# No `from __future__ import annotations`: Hydra loads plugin modules outside
# sys.modules, where dataclasses cannot resolve string annotations.

import logging
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
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
    # Laptop mode (docs/remote.md): the cluster's ssh host (`jzk remote setup HOST` once).
    # The points are validated here, the code sent, and the same sweep launched there.
    on: str | None = None

    # ---- a Hydra app of yours only (launch/app_rules.py): hydra-submitit-launcher's keys,
    # with its meaning; unset (null): its default (HSL_DEFAULTS: timeout_min 60, nodes 1,
    # tasks_per_node 1, signal_delay_s 120, max_num_timeout 0). The toolkit's own trainer
    # refuses them, naming its key (resources.time, resources.nodes, ...).
    # The cluster profile every point is validated against (cluster=<name> of the
    # toolkit: jeanzay_h100, jeanzay_v100, ..., or a profile of yours). No default: a
    # sweep without it is refused before anything is queued, naming the profiles.
    cluster: str | None = None
    timeout_min: int | None = None
    nodes: int | None = None
    tasks_per_node: int | None = None
    gpus_per_node: int | None = None
    cpus_per_task: int | None = None
    mem_gb: int | None = None
    partition: str | None = None
    qos: str | None = None
    account: str | None = None
    constraint: str | None = None
    comment: str | None = None
    exclude: str | None = None
    gres: str | None = None
    cpus_per_gpu: int | None = None
    gpus_per_task: int | None = None
    mem_per_gpu: str | None = None
    mem_per_cpu: str | None = None
    max_num_timeout: int | None = None
    # {} (unset): a mapping, so that hydra.launcher.additional_parameters={mail-type:END}
    # and +hydra.launcher.additional_parameters.mail-type=END both work.
    additional_parameters: dict[str, Any] = field(default_factory=dict)
    setup: list[str] | None = None
    srun_args: list[str] | None = None
    signal_delay_s: int | None = None
    name: str | None = None
    stderr_to_stdout: bool | None = None


ConfigStore.instance().store(
    group="hydra/launcher", name="jeanzay", node=JeanzayLauncherConf, provider="jeanzay_kit"
)


class JeanzayLauncher(Launcher):
    # Hydra passes every field of JeanzayLauncherConf, where the defaults are declared.
    def __init__(
        self,
        *,
        wait: bool,
        poll_seconds: float,
        array_parallelism: int,
        submitit_folder: str,
        on: str | None = None,
        **app_keys: Any,
    ) -> None:
        self.on = on
        self.wait = wait
        self.poll_seconds = poll_seconds
        self.array_parallelism = array_parallelism
        self.submitit_folder = submitit_folder
        # hydra-submitit-launcher's keys as given on the launcher (each point's own
        # hydra.launcher node is read again at launch: a sweep may vary them).
        self.app_keys = app_keys
        self.config: DictConfig | None = None
        self.hydra_context: HydraContext | None = None
        self.task_function: TaskFunction | None = None

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        # The toolkit's trainer is not pickled: its tasks run jeanzay_kit.node.task on
        # the frozen config, as train.py would. Any other task function is a Hydra app
        # of yours: it is pickled and called on every task (node/app_task.py).
        self.config = config
        self.hydra_context = hydra_context
        self.task_function = task_function

    def is_app(self) -> bool:
        """Your own task function, not the toolkit's trainer (jeanzay_kit/train_app.py):
        never replaced by the trainer, whatever its config holds."""
        module = getattr(self.task_function, "__module__", None)
        return module != "jeanzay_kit.train_app"

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
            report.error(report.TRAIN if not self.is_app() else "jeanzay launcher", err)
            raise SystemExit(err.exit_code) from err

    def _launch(
        self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
    ) -> Sequence[JobReturn]:
        from jeanzay_kit.errors import RunsFailed
        from jeanzay_kit.launch.arrays import plan_arrays
        from jeanzay_kit.launch.manifest import read_manifest
        from jeanzay_kit.launch.sweep import submit_arrays, wait_for
        from jeanzay_kit.rundir.run_directory import RunDir

        assert self.config is not None and self.hydra_context is not None
        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        sweep_dir = Path(str(self.config.hydra.sweep.dir)).absolute()
        app_task, points = self._points(job_overrides, initial_job_idx, sweep_dir)
        if self.on:
            return self._launch_there(points, initial_job_idx)
        from jeanzay_kit.launch.allocation import check_request

        # Every point to its time limit: what the sweep takes at most of the allocation.
        hours = sum(p.spec.resources.total_gpus * p.spec.resources.time_minutes for p in points)
        check_request(points[0].spec, hours / 60)
        if not app_task:
            _check_storage(points[0].spec, len(points))
        max_size = min(p.spec.cluster.max_array_size for p in points)
        code_dir = _snapshot(points[0].spec)
        plans = plan_arrays(points, max_size, self.array_parallelism, code_dir)
        folder = str(Path(self.submitit_folder).absolute())
        log.info(
            f"jeanzay launcher: submitting {len(points)} run(s) as {len(plans)} job "
            f"array(s) to cluster {points[0].spec.cluster.name}"
            + (f", each task calling {_name(self.task_function)}" if app_task else "")
        )
        # Hydra calls launch once per batch (hydra.sweeper.max_batch_size): a later batch
        # adds to the manifest of the earlier ones.
        manifest = RunDir(sweep_dir).manifest
        earlier = read_manifest(manifest) if initial_job_idx > 0 and manifest.exists() else []
        submitted = submit_arrays(plans, folder, sweep_dir, earlier, app_task)
        for r, _ in submitted:
            log.info(
                f"  #{r['num']} job {r['job_id']}: {' '.join(r['overrides'])} -> {r['run_dir']}"
            )
        log.info(f"manifest: {manifest} (`jzk status {sweep_dir}`)")

        by_num = {r["num"]: (r, job) for r, job in submitted}
        outcomes: dict[int, tuple[str, Any]] = {}
        if self._must_wait():
            results = wait_for([job for _, job in submitted], self.poll_seconds)
            for (r, _), outcome in zip(submitted, results, strict=True):
                outcomes[r["num"]] = outcome
        returns = [self._returned(p, by_num[p.num][0], outcomes, app_task) for p in points]
        failed = [by_num[n][0]["job_id"] for n, (s, _) in outcomes.items() if s != "COMPLETED"]
        if failed:
            raise RunsFailed(f"{len(failed)} run(s) failed: jobs {', '.join(failed)}")
        return returns

    def _launch_there(self, points: list[Any], initial_job_idx: int) -> list[JobReturn]:
        """hydra.launcher.on=HOST: every point was validated here; the sweep itself runs
        on the login node (its first batch launches them all there)."""
        from jeanzay_kit.errors import LaunchError
        from jeanzay_kit.remote.laptop import remote_of, sweep_on

        assert self.config is not None
        if self._must_wait():
            raise LaunchError(
                f"hydra.launcher.on={self.on} with a sweeper that waits for the runs' values "
                "(or hydra.launcher.wait=true): it would hold this laptop's connection for "
                "the whole sweep. HINT: `jzk submit --on` each point, or run the sweep on "
                "the login node"
            )
        if initial_job_idx == 0:
            remote = remote_of(points[0].spec, self.on or "", dict(os.environ))
            sweep_on(remote, points[0].spec, Path.cwd(), sys.argv)
        return [
            self._queued(point, {"on": self.on, "overrides": list(point.overrides)})
            for point in points
        ]

    def _points(
        self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int, sweep_dir: Path
    ) -> tuple[Any, list[Any]]:
        """Every point checked against its profile, and a Hydra app's function packed
        (None when the points run the toolkit's own training)."""
        assert self.config is not None and self.hydra_context is not None
        if not self.is_app():
            _refuse_app_keys(self.app_keys)
            return None, self._validated_points(job_overrides, initial_job_idx, sweep_dir)
        from jeanzay_kit.node.app_task import AppTask

        # Hydra's state as the app left it, before the profile's checks compose the
        # toolkit's config beside it.
        app_task = AppTask.pack(self.hydra_context, self.config, self.task_function)
        return app_task, self._app_points(job_overrides, initial_job_idx, sweep_dir)

    def _returned(
        self, point: Any, record: dict[str, Any], outcomes: dict[int, Any], app_task: Any
    ) -> JobReturn:
        """What Hydra's sweeper gets for one point."""
        ret = self._queued(point, record)
        if point.num not in outcomes:
            return ret
        state, value = outcomes[point.num]
        if state == "COMPLETED" and app_task is not None:
            return value  # the task's own JobReturn, as hydra-submitit-launcher gives
        ret.status = JobStatus.COMPLETED if state == "COMPLETED" else JobStatus.FAILED
        ret.return_value = value if state == "COMPLETED" else RuntimeError(value)
        return ret

    def _queued(self, point: Any, value: object) -> JobReturn:
        """A point whose run is queued: Hydra's sweeper reads every return value, and
        without wait the launcher's job is done once the run is queued (its value: the
        manifest line, or where it was sent)."""
        assert self.config is not None
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
        ret.status = JobStatus.COMPLETED
        ret.return_value = value
        return ret

    def _app_points(
        self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int, sweep_dir: Path
    ) -> list[Any]:
        """Every point of your app: its own launcher keys (a sweep may vary them, e.g.
        hydra.launcher.gpus_per_node=1,2) translated (launch/app_rules.py) and validated
        against the cluster profile, once per distinct request; raise once, listing every
        problem, before anything is submitted."""
        from hydra.errors import HydraException
        from omegaconf.errors import OmegaConfBaseException

        from jeanzay_kit.errors import JzkError
        from jeanzay_kit.launch.app_rules import in_launcher_words, translate
        from jeanzay_kit.launch.arrays import SweepPoint
        from jeanzay_kit.launch.point_configs import PointConfigs

        assert self.config is not None and self.hydra_context is not None
        composer = PointConfigs(self.hydra_context.config_loader, self.config)
        master = _hydra_view(self.config)
        specs: dict[tuple[str, ...], Any] = {}
        points, problems = [], []
        for idx, overrides in enumerate(job_overrides):
            num = initial_job_idx + idx
            label = f"#{num} ({' '.join(overrides) or 'no overrides'})"
            try:
                keys, job_name, subdir = _point_view(composer, overrides, num, master)
                request = translate(keys, job_name)
                run_dir = str(sweep_dir / subdir)
                if request.overrides not in specs:
                    specs[request.overrides] = _toolkit_spec(request.overrides)
                spec = specs[request.overrides]
                if isinstance(spec, JzkError):
                    raise spec
            except (HydraException, OmegaConfBaseException) as err:
                problems.append(f"{label}: {err}")
                continue
            except JzkError as err:
                problems.append(f"{label}: {in_launcher_words(str(err))}")
                continue
            points.append(SweepPoint(num, tuple(overrides), run_dir, spec, app=request))
        return _all_or_nothing(points, problems)

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
        from jeanzay_kit.errors import JzkError, SpecError
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
                # job.python=auto: the interpreter that runs the sweep, as `jzk submit`'s.
                spec = build_job_spec(plain, interpreter=sys.executable)
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
            try:
                fit = _check_task(spec, overrides, _spec_of(composer, num, sweep_dir))
            except JzkError as err:
                problems.append(f"{label}: {err}")
                continue
            if fit:
                log.info(f"{label}: {' '.join(fit.split())}")  # its GPU memory estimate
            points.append(SweepPoint(num, tuple(overrides), run_dir, spec))
        return _all_or_nothing(points, problems)


def _spec_of(composer: Any, num: int, sweep_dir: Path) -> Any:
    """The request of other overrides of a point, composed as the point is (the fit
    check's hints are checked with it)."""

    def spec_of(overrides: Sequence[str]) -> Any:
        from jeanzay_kit.config.spec import build_job_spec
        from jeanzay_kit.launch.point_configs import resolved_point

        with composer.point(list(overrides), num) as sweep_config:
            _, plain = resolved_point(sweep_config, str(sweep_dir))
        return build_job_spec(plain, interpreter=sys.executable)

    return spec_of


def _check_task(spec: Any, overrides: Sequence[str], spec_of: Any) -> str:
    """What a point must pass besides its request: your own command exists (relative to
    the project, where the launcher runs), and the plan fits its GPU's memory
    (launch/fit_check.py, as `jzk validate` checks it): its estimate's line, "" where
    none is made. A JzkError names the problem."""
    if spec.job.runs_script:
        from jeanzay_kit.script.entry import check_entry

        check_entry(spec.job.entry, Path.cwd())
    from jeanzay_kit.launch.fit_check import check

    fit = check(spec, list(overrides), spec_of, os.environ)
    return "" if fit is None else fit.line()


def _all_or_nothing(points: list[Any], problems: list[str]) -> list[Any]:
    """Every point, or a LaunchError listing every problem: one bad point, nothing queued."""
    from jeanzay_kit.errors import LaunchError

    if problems:
        raise LaunchError("nothing was submitted; fix these sweep points:\n" + "\n".join(problems))
    if not points:
        raise LaunchError("the sweep has no points")
    return points


def _hydra_view(cfg: Any) -> tuple[dict[str, Any], str, str | None]:
    """(launcher keys, job name, subdir) of a composed config; subdir None unless it is
    Hydra's default `${hydra.job.num}` (then each point's is its number)."""
    from omegaconf import OmegaConf

    from jeanzay_kit.launch.app_rules import APP_KEYS

    launcher = OmegaConf.to_container(cfg.hydra.launcher, resolve=True)
    assert isinstance(launcher, dict)
    written = OmegaConf.to_container(cfg.hydra.sweep, resolve=False)
    numbered = isinstance(written, dict) and written.get("subdir") == "${hydra.job.num}"
    keys = {k: launcher.get(k) for k in APP_KEYS}
    return keys, str(cfg.hydra.job.name), "" if numbered else None


def _point_view(
    composer: Any, overrides: Sequence[str], num: int, master: tuple[Any, str, str | None]
) -> tuple[dict[str, Any], str, str]:
    """A point's launcher keys, job name and subdir. Points of value overrides only
    (`lr=0.1`) under Hydra's default subdir read the master config's (composing each
    point again would cost as much as the rest of the submission); any other point is
    composed as Hydra would (launch/point_configs.py)."""
    keys, name, subdir = master
    if subdir is not None and composer.values_only(overrides):
        return keys, name, str(num)
    with composer.point(overrides, num) as cfg:
        keys, name, _ = _hydra_view(cfg)
        return keys, name, str(cfg.hydra.sweep.subdir)


def _name(function: Any) -> str:
    return f"{getattr(function, '__module__', '?')}.{getattr(function, '__qualname__', '?')}"


def _refuse_app_keys(keys: dict[str, Any]) -> None:
    """hydra-submitit-launcher's keys are read for a Hydra app of yours; the toolkit's
    trainer has keys of its own for each, named here."""
    from jeanzay_kit.errors import LaunchError
    from jeanzay_kit.launch.app_rules import TOOLKIT_KEYS

    given = sorted(k for k, v in keys.items() if v is not None and v != {})
    if given:
        raise LaunchError(
            "nothing was submitted: "
            + "; ".join(f"hydra.launcher.{k} is for a Hydra app of yours" for k in given[:1])
            + " (hydra/launcher=jeanzay in your own @hydra.main), and this sweep runs the "
            "toolkit's trainer. HINT: "
            + ", ".join(f"{k} -> {TOOLKIT_KEYS.get(k, 'docs/slurm.md')}" for k in given)
        )


def _toolkit_spec(overrides: Sequence[str]) -> Any:
    """The JobSpec of one translated request: the toolkit's config composed with it (as
    `jzk validate` would) and validated against the cluster profile. The request runs
    a command of yours (job.entry): the trainer's own sections play no part. Composed
    beside the running Hydra app, whose global state is put back afterwards. A refusal
    is returned (not raised): points of the same request share it."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig
    from hydra.core.utils import JobRuntime

    from jeanzay_kit.config.compose import compose_config
    from jeanzay_kit.config.spec import build_job_spec
    from jeanzay_kit.errors import JzkError

    hydra_now, view = GlobalHydra.instance().hydra, HydraConfig.instance().cfg
    job_name = JobRuntime.instance().conf.get("name")  # the app's: its log, --job-name
    GlobalHydra.instance().clear()
    try:
        cfg = compose_config([*overrides, "job.entry=your-hydra-app", "job.entry_kind=script"])
        spec = build_job_spec(cfg, interpreter=sys.executable)
    except JzkError as err:
        return err
    finally:
        GlobalHydra.instance().clear()
        if hydra_now is not None:
            GlobalHydra.instance().initialize(hydra_now)
        HydraConfig.instance().cfg = view
        JobRuntime.instance().set("name", job_name)
    if not spec.cluster.is_slurm:
        return _not_slurm(spec.cluster.name)
    return spec


def _not_slurm(name: str) -> Any:
    from jeanzay_kit.errors import LaunchError

    return LaunchError(
        f"hydra.launcher.cluster={name} is not a Slurm cluster. HINT: name a Slurm profile "
        "(jeanzay_h100, ...), or use hydra/launcher=basic to run the points here"
    )


def _check_storage(spec: Any, runs: int) -> None:
    """The files and bytes of the sweep's runs (this batch's points, beside the first) and
    of its one code snapshot, on each filesystem, against what is left there: refused
    before the queue, as `jzk submit` refuses one run (a sweep of small runs meets the
    inode quota first). A Hydra app's points write what its function writes: not known."""
    from jeanzay_kit.launch.storage import check_storage, request_of
    from jeanzay_kit.project.job_code import snapshot_footprint

    env, workdir = dict(os.environ), Path.cwd()
    snapshot = snapshot_footprint(spec, workdir)
    check_storage(request_of(spec, workdir, env, runs, snapshot), spec, env)


def _snapshot(spec: Any) -> Any:
    """The project's code frozen once for the whole sweep (its points share it), or None
    with job.snapshot=false. The launcher runs in the project's directory."""
    from jeanzay_kit.project.job_code import snapshot_rules
    from jeanzay_kit.project.snapshot import take_snapshot

    if not spec.job.snapshot_for(spec.cluster.is_slurm):
        return None
    snap = take_snapshot(Path.cwd(), snapshot_rules(spec))
    log.info(snap.summary())
    return str(snap.path)
