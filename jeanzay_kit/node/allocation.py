"""`jzk train cluster=<slurm profile>` inside an allocation (`salloc`, or a batch script
of your own): the job runs as a step of that allocation, as `jzk submit` would run it.

The script `jzk submit` would submit is written to the log folder and run with bash in
the allocation: its `srun` starts the tasks on the allocation's nodes, with the same
rank derivation, run directory, checkpoints and stop handling. Its #SBATCH lines are
comments to bash; srun reads the step's shape from the environment instead (srun's
input variables SLURM_NNODES, SLURM_NTASKS, SLURM_NTASKS_PER_NODE, SLURM_CPUS_PER_TASK,
set here from the config). An interactive allocation is yours, not Slurm's to requeue:
a stop saves and ends (run the same command again to resume), and a failed step is not
requeued (preemption.requeue=false, preemption.max_restarts=0 for the step).
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from jeanzay_kit.config.spec import JobSpec, build_job_spec
from jeanzay_kit.errors import JzkError


def allocation_nodes(env: Mapping[str, str]) -> int | None:
    """The node count of the allocation this process runs in (not as a task of a step:
    a `salloc` shell or a batch script), None outside any allocation."""
    if not env.get("SLURM_JOB_ID"):
        return None
    count = env.get("SLURM_JOB_NUM_NODES") or env.get("SLURM_NNODES") or "1"
    return int(count) if count.isdigit() else 1


def step_config(cfg: Mapping[str, Any], spec: JobSpec, nodes: int, job: str) -> dict[str, Any]:
    """The config of the step: every node of the allocation unless resources.nodes asks
    for fewer, and no requeue (module docstring)."""
    asked = spec.resources.nodes
    if asked > nodes:
        raise JzkError(
            f"resources.nodes={asked} but this allocation (job {job}) has {nodes} node(s). "
            f"HINT: resources.nodes={nodes} to run on them, or allocate {asked}: "
            f"salloc -N{asked} ..."
        )
    step = copy.deepcopy(dict(cfg))
    if asked == 1 and nodes > 1:  # the default: the allocation's nodes, all of them
        step["resources"] = {**step["resources"], "nodes": nodes}
    step["preemption"] = {**step.get("preemption", {}), "requeue": False, "max_restarts": 0}
    # No health gate: it requeues a job without a broken node, and an allocation the user
    # holds is neither requeued nor shrunk by a step (its nodes are the user's choice).
    step["watchdog"] = {**step.get("watchdog", {}), "health_gate": False}
    return step


def step_environment(env: Mapping[str, str], spec: JobSpec) -> dict[str, str]:
    """The allocation's environment with the step's shape in srun's input variables."""
    res = spec.resources
    return {
        **env,
        "SLURM_NNODES": str(res.nodes),
        "SLURM_NTASKS": str(res.nodes * res.ntasks_per_node),
        "SLURM_NTASKS_PER_NODE": str(res.ntasks_per_node),
        "SLURM_CPUS_PER_TASK": str(res.cpus_per_task),
    }


def run_as_step(cfg: Mapping[str, Any], spec: JobSpec, env: Mapping[str, str], nodes: int) -> int:
    """Write the job's script and run it in this allocation; its exit code."""
    from jeanzay_kit.project.job_code import snapshot_code
    from jeanzay_kit.slurm.sbatch import render_sbatch

    job = env["SLURM_JOB_ID"]
    step = build_job_spec(step_config(cfg, spec, nodes, job), interpreter=sys.executable)
    workdir = Path(step.job.workdir) if step.job.workdir else Path.cwd()
    script = render_sbatch(
        step,
        rendered_by=[],
        workdir=str(workdir),
        rerender="jzk train",
        code_dir=snapshot_code(step, workdir),
    )
    # Several `jzk train` may run side by side in one allocation: each step has its own
    # script and frozen config (the script's JZK_STEP_TAG), never another's.
    tag = str(os.getpid())
    path = workdir / step.job.log_dir / f"{step.job.name}-step-{job}-{tag}.sh"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(script)
    res = step.resources
    print(
        f"inside allocation {job}: the job runs as a step on {res.nodes} node(s) x "
        f"{res.ntasks_per_node} task(s) ({path}); run dir {step.checkpoint.run_dir}",
        flush=True,
    )
    shape = {**step_environment(env, step), "JZK_STEP_TAG": tag}
    return subprocess.call(["bash", str(path)], cwd=workdir, env=shape)
