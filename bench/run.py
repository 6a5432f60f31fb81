"""Every benchmark in one command: bench/results.json and the tables of docs/performance.md.

    .venv/bin/python bench/run.py            # all of them, the rounds of docs/performance.md
    .venv/bin/python bench/run.py --quick    # fewer rounds and steps: < 10 min on 2 cores
    .venv/bin/python bench/run.py --only ttfs_vs_bare --rounds 1 --out /tmp/r.json --docs none
    .venv/bin/python bench/run.py --only ddp_vs_handwritten --merge   # refresh some, keep the rest

Each figure is a ratio against a baseline measured in the same run (or a count), the
median of several rounds, with the spread of the rounds. The benchmarks are the scripts
of bench/ (each runs on its own too, with more options); this runs them one after the
other in fresh processes, reads their bench/results/<name>.json back and writes
bench/results.json: one number per figure at the top level (null where it could not be
measured, with the reason under "skipped"), the rounds, the machine and the date.

Without root (or without Slurm's packages) the Slurm figures are null; without a CUDA
device the GPU figures say "no GPU: skipped".
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO, RESULTS  # noqa: E402

from jeanzay_kit.rehearse.schedule import KINDS as REHEARSED  # noqa: E402

DOCS = REPO / "docs" / "performance.md"
PNG = REPO / "docs" / "img" / "bench-ratios.png"
BEGIN = "<!-- bench/run.py: begin (generated; edit bench/run.py, not this) -->"
END = "<!-- bench/run.py: end -->"


@dataclass
class Figure:
    key: str
    what: str
    value: float | None  # the median (ratio or count)
    rounds: list[float]  # one value per round
    ours: str = ""  # the toolkit's side, in words and units
    baseline: str = ""
    target: str = ""
    ratio: bool = True  # a ratio (plotted) or a count
    note: str = ""
    ci: list[float] = field(default_factory=list)  # a 95 % interval of the median, if known
    measured: str = ""  # the date and command of an earlier run it was kept from (--merge)

    @property
    def spread(self) -> list[float]:
        return [min(self.rounds), max(self.rounds)] if self.rounds else []


@dataclass
class Bench:
    name: str  # bench/results/<name>.json
    script: str
    keys: list[str]
    quick: list[str]  # the script's options under --quick
    full: list[str]
    figures: Callable[[dict], list[Figure]]
    # Under --tiny (tests/bench/test_every_bench.py): the smallest sizes that still run
    # every measured path, so a figure cannot silently stop being measured.
    tiny: list[str] = field(default_factory=lambda: ["--rounds", "1"])
    needs: Callable[[], str | None] = lambda: None  # why it cannot run here, or None
    rounds_flag: str = "--rounds"
    gpu: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


def median(values: list[float]) -> float:
    return statistics.median(values)


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms"


# --- what each script's JSON says, as figures -------------------------------------------


def runtime_figures(r: dict) -> list[Figure]:
    out = []
    for mode, key, what, base in (
        (
            "ddp",
            "ddp_vs_handwritten",
            "DDP step: `train()` / a hand-written DDP loop",
            "hand-written DDP (no_sync)",
        ),
        (
            "pipeline",
            "pipeline_vs_raw",
            "pipeline step (1F1B, 2 stages): `train()` / raw `PipelineStage` + `Schedule1F1B`",
            "raw torch.distributed.pipelining",
        ),
    ):
        m = r[mode]
        out.append(
            Figure(
                key,
                what,
                m["ratio_median"],
                m["ratios"],
                f"{ms(m['toolkit_step_s'])}/step",
                f"{ms(m['baseline_step_s'])}/step ({base})",
                "<= 1.02",
                ci=m.get("ratio_ci", []),
            )
        )
        if "cpu_ratio_median" in m:  # CPU time per step of both ranks (issue 59 point 4)
            c = {"ratio_median": m["cpu_ratio_median"], "ratios": m["cpu_ratios"]}
            c["ratio_ci"] = m["cpu_ratio_ci"]
            out.append(
                cpu_figure(
                    f"{key}_cpu",
                    what,
                    "both ranks' processes",
                    c,
                    m["toolkit_cpu_s"],
                    m["baseline_cpu_s"],
                    base,
                )
            )
    return out


def loader_figures(r: dict) -> list[Figure]:
    s, setup = r["step_s"], r["setup"]
    kb, workers = setup["decode_kb_per_sample"], setup["auto_workers"]
    rows = (  # (key, what, ours, baseline, target)
        (
            "loader_vs_hand_ddp",
            "DDP step through torch's DataLoader over the plan: `train()` / a hand-written "
            "loop with `DataLoader` + `DistributedSampler` (same map-style dataset and model)",
            f"{ms(s['toolkit'])}/step",
            f"{ms(s['hand'])}/step (hand-written DDP + DistributedSampler)",
            "<= 1.02",
        ),
        (
            "input_bound_auto_vs_0",
            f"input-bound dataset (inflating {kb} KB per sample): steps/s with "
            f"loader.num_workers=auto ({workers}) / with 0",
            f"{ms(s['auto'])}/step (workers=auto)",
            f"{ms(s['zero'])}/step (workers=0)",
            "> 1 (a speed-up)",
        ),
        (
            "input_bound_vs_preloaded",
            "the same input-bound run's step time with loader.num_workers=auto / the same "
            "model fed from preloaded tensors",
            f"{ms(s['auto'])}/step (workers=auto)",
            f"{ms(s['preloaded'])}/step (preloaded)",
            "<= 1.10 where the CPUs suffice",
        ),
    )
    figures = [
        Figure(
            key,
            what,
            r[key]["ratio_median"],
            r[key]["ratios"],
            ours,
            base,
            target,
            ci=r[key].get("ratio_ci", []),
        )
        for key, what, ours, base, target in rows
    ]
    if "loader_vs_hand_ddp_cpu" in r:  # CPU time per step of both ranks (issue 59 point 4)
        c = r["loader_vs_hand_ddp_cpu"]
        figures.insert(
            1,
            cpu_figure(
                "loader_vs_hand_ddp_cpu",
                rows[0][1],
                "both ranks' processes",
                c,
                r["cpu_s"]["toolkit"],
                r["cpu_s"]["hand"],
                "hand-written DDP",
            ),
        )
    return figures


def cpu_figure(key, what, whose, c, ours_s, theirs_s, base) -> Figure:
    """The CPU-time twin of a step-time figure: its paired ratios and 95 % interval."""
    return Figure(
        key,
        f"{what}, CPU time per step of {whose} (the two loops in lockstep, a baseline step "
        "before each of ours; each rank on a core of its own; ci: 95 % bootstrap interval "
        "of the median over rounds)",
        c["ratio_median"],
        c["ratios"],
        f"{ms(ours_s)} CPU/step",
        f"{ms(theirs_s)} CPU/step ({base})",
        "<= 1.02",
        ci=c["ratio_ci"],
    )


def eval_figures(r: dict) -> list[Figure]:
    s, setup, cost = r["eval_s"], r["setup"], r["data_wait_cost"]
    return [
        Figure(
            "eval_vs_hand",
            f"an evaluation of {setup['eval_samples']} samples on {setup['ranks']} ranks: the "
            "toolkit's `Evaluator` / a hand-written loop (`DataLoader` + "
            "`DistributedSampler(shuffle=False)`, loss x batch size, one all-reduce)",
            r["eval_vs_hand"]["ratio_median"],
            r["eval_vs_hand"]["ratios"],
            f"{s['toolkit']:.3f} s",
            f"{s['hand']:.3f} s (hand-written)",
            "<= 1.05",
        ),
        Figure(
            "data_wait_cost",
            "what measuring the data wait adds to a step (two perf_counter calls and a sum, "
            "timed alone) / the step time of `train()`",
            cost["ratio_median"],
            [cost["ratio_median"]],
            f"{cost['measurement_s_per_step'] * 1e9:.0f} ns/step",
            f"{ms(min(cost['step_s']))}/step",
            "<= 0.01",
        ),
    ]


def dataparallel_figures(r: dict) -> list[Figure]:
    return [
        Figure(
            "ddp_vs_dataparallel",
            "step time on the same global batch: `parallel=dataparallel` / `parallel=ddp` "
            "(the other way round: above 1, our DDP is faster)",
            r["ratio_median"],
            r["ratios"],
            f"DDP {ms(median(r['ddp_step_s']))}/step",
            f"DataParallel {ms(median(r['dataparallel_step_s']))}/step",
            ">= 1 (DDP no slower)",
            note="on a CPU-only machine DataParallel runs the module in one process (no "
            "replicas) against 2 DDP workers: the GPU comparison needs several GPUs",
        )
    ]


def checkpoint_figures(r: dict) -> list[Figure]:
    raw = r["raw"]
    size = r["checkpoint_bytes"]
    write = [size / s / bps for s, bps in zip(raw["sync_s"], raw["dd_Bps"], strict=True)]
    block = [b / s for b, s in zip(raw["async_block_s"], raw["sync_s"], strict=True)]
    resume = [b / a for a, b in zip(raw["fresh_s"], raw["resumed_s"], strict=True)]
    return [
        Figure(
            "ckpt_write_vs_dd",
            f"checkpoint write speed ({size / 1e6:.0f} MB, checksums, "
            "fsync, manifest) / `dd oflag=direct` of the same size",
            median(write),
            write,
            f"{r['write']['checkpoint_MBps']:.0f} MB/s",
            f"{r['write']['dd_direct_MBps']:.0f} MB/s (dd)",
            ">= 0.9",
        ),
        Figure(
            "async_block_vs_sync",
            "training thread held up by an async save / a synchronous save",
            median(block),
            block,
            ms(r["async"]["blocking_s"]),
            f"{ms(r['async']['sync_save_s'])} (sync save)",
            "<= 0.10",
            note=f"the step after an async save took {ms(r['async']['step_slowdown_s'])} "
            "longer (background writing shares the cores)",
        ),
        Figure(
            "resume_vs_fresh_start",
            "`python train.py` to its first step: resuming / starting fresh",
            median(resume),
            resume,
            f"{r['resume']['resumed_first_step_s']:.2f} s",
            f"{r['resume']['fresh_first_step_s']:.2f} s (fresh)",
            "<= 1.10",
        ),
    ]


def preemption_figures(r: dict) -> list[Figure]:
    every = r["setup"]["every_steps"]
    return [
        Figure(
            "steps_lost_per_preemption",
            "completed steps redone after a SIGUSR1 at a random step and a resume",
            statistics.mean(r["steps_lost_sigusr1"]),
            r["steps_lost_sigusr1"],
            f"{statistics.mean(r['steps_lost_sigusr1']):.1f} steps (SIGUSR1: saved at the next "
            "step)",
            f"{statistics.mean(r['steps_lost_sigkill']):.1f} steps (SIGKILL at the same "
            f"steps: periodic checkpoint every {every})",
            "0",
            ratio=False,
            note="mean over rounds, not median",
        )
    ]


def rehearse_figures(r: dict) -> list[Figure]:
    every = r["setup"]["every_s"]
    out = [
        Figure(
            "rehearsal_goodput",
            f"the default example under {r['faults']} seeded faults (one every ~{every:g} s "
            "of training): the run without faults' time / the rehearsal's",
            r["goodput"],
            [r["goodput"]],
            f"{r['lost_steps']} steps lost; final model equal: {r['digest_equal']}",
            "the run without faults",
            note="start-ups, detection and resumes included (jzk rehearse)",
        )
    ]
    for kind in REHEARSED:
        resumed = r["by_kind"].get(kind, {}).get("resumed_s", [])
        out.append(
            Figure(
                f"fault_to_step_{kind}_s",
                f"`{kind}`: seconds from the fault to the next step (median)",
                median(resumed) if resumed else None,
                resumed,
                f"max {max(resumed):.1f} s" if resumed else "",
                ratio=False,
            )
        )
    return out


def startup_figures(r: dict) -> list[Figure]:
    return [
        Figure(
            "ttfs_vs_bare",
            "time to first step: `python train.py` / `torchrun` of a minimal DDP "
            "script (2 CPU workers)",
            r["ratio_median"],
            r["ratios"],
            f"{median(r['train_py_s']):.2f} s",
            f"{median(r['bare_torchrun_s']):.2f} s (torchrun)",
            "<= 1.10",
        )
    ]


def warm_compile_figures(r: dict) -> list[Figure]:
    return [
        Figure(
            "warm_compile_vs_cold",
            "torch.compile of a requeued run on a new node (empty TMPDIR), its caches kept "
            "in the run directory / the cold compile (2 CPU workers, example MLP)",
            r["ratio_median"],
            r["ratios"],
            f"{median([x['warm_s'] for x in r['rounds']]):.1f} s",
            f"{median([x['cold_s'] for x in r['rounds']]):.1f} s (cold)",
            "<= 0.40",
        )
    ]


def lockstep_control_figures(r: dict) -> list[Figure]:
    c = r["cpu"]
    return [
        Figure(
            "lockstep_control",
            "the method's own check (A/A): a hand-written DDP step / the same loop's twin "
            "stepped just before it, CPU time per step of rank 0 in lockstep (each rank on "
            "a core of its own; ci: 95 % bootstrap interval of the median over rounds)",
            c["ratio_median"],
            c["ratios"],
            f"{ms(r['cpu_s'])} CPU/step",
            "its twin",
            "1, to within 0.01",
            ci=c["ratio_ci"],
        )
    ]


def session_figures(r: dict) -> list[Figure]:
    what = (
        "step time of a loop with the session API (should_stop every step, s.log, "
        "heartbeats, watchdog) / the same hand-written DDP loop (2 CPU workers)"
    )
    cpu = []
    if "cpu" in r:  # CPU time per step of both ranks (issue 59 point 4)
        cpu = [
            cpu_figure(
                "session_vs_hand_cpu",
                what,
                "both ranks",
                r["cpu"],
                median(r["session_cpu_s"]),
                median(r["hand_cpu_s"]),
                "hand-written DDP",
            )
        ]
    return [
        Figure(
            "session_vs_hand",
            what,
            r["step_ratio_median"],
            r["step_ratios"],
            f"{median(r['session_step_s']) * 1e3:.1f} ms/step",
            f"{median(r['hand_step_s']) * 1e3:.1f} ms/step (hand-written DDP)",
            "<= 1.02",
            ci=r.get("step_ratio_ci", []),
        ),
        *cpu,
        Figure(
            "script_ttfs_vs_torchrun",
            "time to first step: a script task (`jzk train job.entry=minimal_ddp.py`) / "
            "a bare `torchrun` of the same script (2 CPU workers)",
            r["start_ratio_median"],
            r["start_ratios"],
            f"{median(r['script_task_s']):.2f} s",
            f"{median(r['bare_torchrun_s']):.2f} s (torchrun)",
            "<= 1.10",
        ),
    ]


def slurm_figures(r: dict) -> list[Figure]:
    rounds = r["rounds"]
    ours = [x["jeanzay"]["until_sbatch_done_s"] for x in rounds]
    theirs = [x["submitit_slurm"]["until_sbatch_done_s"] for x in rounds]
    ratios = [a / b for a, b in zip(ours, theirs, strict=True)]
    s = r["summary"]
    big = [x["big_sweep_s"] for x in rounds if "big_sweep_s" in x]
    calls = [float(x["jeanzay"]["sbatch_calls"]) for x in rounds]
    figures = [
        Figure(
            "sweep_submit_vs_hsl",
            f"{r['points']}-point sweep submission (start to the "
            "last sbatch returned): ours / hydra-submitit-launcher",
            median(ratios),
            ratios,
            f"{s['sweep_submit_ours_s']:.2f} s",
            f"{s['sweep_submit_hydra_submitit_s']:.2f} s (hydra-submitit-launcher)",
            "<= 0.2",
        ),
        Figure(
            "sbatch_calls_per_sweep",
            f"sbatch calls for a {r['points']}-point sweep (one array per resource shape)",
            median(calls),
            calls,
            f"{median(calls):.0f}",
            f"{s['sbatch_calls_hydra_submitit']} (hydra-submitit-launcher)",
            "1",
            ratio=False,
        ),
    ]
    if big:
        figures.append(
            Figure(
                "sweep_1000_submit_s",
                f"{s['big_sweep_points']}-point sweep: `python train.py -m` "
                "start to return (every point composed, validated, frozen)",
                median(big),
                big,
                f"{median(big):.1f} s",
                "",
                "< 15 s",
                ratio=False,
            )
        )
    figures.append(
        Figure(
            "first_step_job_vs_srun",
            "submission to first step: `jzk submit` (sbatch, script, "
            "srun) / a bare `srun python train.py`",
            s["first_step_ratio"],
            [x["first_step_s"]["jzk_submit"] / x["first_step_s"]["bare_srun"] for x in rounds],
            f"{s['first_step_job_s']:.2f} s",
            f"{s['first_step_bare_srun_s']:.2f} s (srun)",
            "",
        )
    )
    return figures


def gpu_figures(r: dict) -> list[Figure]:
    return [
        Figure(
            "gpt2_124m_tokens_per_s",
            "GPT-2 124M, bf16, 1 GPU: tokens/s",
            r["tokens_per_s"],
            r["tokens_per_s_rounds"],
            f"{r['tokens_per_s']:.0f} tokens/s",
            "",
            "",
            ratio=False,
        ),
        Figure(
            "gpt2_124m_mfu",
            "GPT-2 124M, bf16, 1 GPU: model FLOPs utilisation",
            r["mfu"],
            r["mfu_rounds"],
            f"{r['mfu']:.3f}",
            f"peak of {r['device']}",
            "",
            ratio=False,
        ),
    ]


def gpu_vs_hand_figures(r: dict) -> list[Figure]:
    hand = statistics.median(x["hand"]["step_s"] for x in r["rounds"])
    ours = statistics.median(x["toolkit"]["step_s"] for x in r["rounds"])
    figures = [
        Figure(
            "gpt2_loop_vs_hand",
            "GPT-2 124M from a memory-mapped token file, 1 GPU, the GPU defaults (bf16, TF32, "
            "compile, fused AdamW): `train.py` step / the project's hand-written loop "
            "(bench/gpt_hand_loop.py, same model, data and settings)",
            r["ratio_median"],
            r["ratios"],
            ms(ours) + "/step",
            ms(hand) + "/step (hand-written)",
            "<= 1.02",
        )
    ]
    if r["mfu"] is not None:
        figures.append(
            Figure(
                "gpt2_124m_mfu_defaults",
                "GPT-2 124M, the same run: model FLOPs utilization",
                r["mfu"],
                r["mfu_rounds"],
                f"{r['mfu']:.3f}",
                f"dense peak of {r['device']}",
                ">= 0.45 (H100)",
                ratio=False,
            )
        )
    return figures


# --- what a machine can run ------------------------------------------------------------


def app_sweep_figures(r: dict) -> list[Figure]:
    rounds, s = r["rounds"], r["summary"]
    ratios = [x["ratio"] for x in rounds]
    return [
        Figure(
            "app_sweep_submit_vs_hsl",
            f"your Hydra app's {r['points']}-point sweep submission (start to the last "
            "sbatch returned, a stand-in sbatch): `hydra/launcher=jeanzay` / "
            "hydra-submitit-launcher",
            median(ratios),
            ratios,
            f"{s['ours_s']:.2f} s",
            f"{s['hydra_submitit_s']:.2f} s (hydra-submitit-launcher)",
            "<= 1.0",
        )
    ]


def sweep_validate_figures(r: dict) -> list[Figure]:
    rounds, s, n = r["rounds"], r["summary"], r["points"]
    seconds = [x["validate"] for x in rounds]
    ratios = [x["ratio"] for x in rounds]
    return [
        Figure(
            "sweep_validate_10k_s",
            f"`jzk validate -m` of a {n:,}-point sweep (cluster=slurm_local optim.lr=range): "
            "every point composed, checked and priced (the ceiling line), from an empty cache",
            median(seconds),
            seconds,
            f"{median(seconds):.1f} s ({s['validate_s_per_1000']:.2f} s per 1,000 points)",
            f"{s['scratch_s_per_1000']:.0f} s per 1,000 points composing each from scratch "
            "(before)",
            "< 60 s",
            ratio=False,
        ),
        Figure(
            "sweep_validate_vs_launcher",
            f"`jzk validate -m` of {n:,} points / `python train.py -m`'s own checks of the "
            "same points before it submits (PointConfigs, resolve, JobSpec, fit; each a "
            "whole process)",
            median(ratios),
            ratios,
            f"{s['validate_s']:.1f} s",
            f"{s['launcher_s']:.1f} s (the launcher's checks)",
            "<= 1.5",
        ),
    ]


def remote_figures(r: dict) -> list[Figure]:
    rounds, s, a, c = r["rounds"], r["summary"], r["archive"], r["commands"]
    login = s["login_node_s"]
    logins = ", ".join(f"{k} {v['logins']}" for k, v in c.items())
    calls = ", ".join(f"{k} {v['ssh_calls']}" for k, v in c.items())
    open_ = c["submit --on (master open)"]
    wire = [x["what"] for x in open_["calls"] if not x["what"].startswith("check")]
    most = float(max(v["logins"] for v in c.values()))
    project = r["project"]
    return [
        Figure(
            "remote_submit_overhead",
            "laptop mode: `jzk submit --on HOST` from the laptop's project (its code already "
            "there) / the same `jzk submit` typed on the login node (`ssh HOST 'cd <project "
            "there> && <venv>/bin/jzk submit ...'`), one warm master connection, a local sshd",
            s["overhead_ratio"],
            [x["ratio"] for x in rounds],
            f"{s['ours_s']:.2f} s",
            f"{login:.2f} s (on the login node)",
            "",
        ),
        Figure(
            "remote_first_submit_vs_login",
            "laptop mode: the first `jzk submit --on` (the code packed and sent) / the same "
            "submission on the login node",
            s["first_vs_login_node"],
            [s["first_vs_login_node"]],
            f"{s['first_submit_s']:.2f} s",
            f"{login:.2f} s (on the login node)",
            "",
        ),
        Figure(
            "remote_logins_per_command",
            "laptop mode: ssh logins (sshd's log) of a command, the most of: "
            + logins
            + " (from a closed master unless said)",
            most,
            [most],
            f"{most:.0f}",
            "",
            "<= 1",
            ratio=False,
        ),
        Figure(
            "remote_ssh_calls_per_submit",
            "laptop mode: ssh processes `jzk submit --on` starts, master open ("
            + ", ".join(wire)
            + " over the wire, the rest `-O check`); every command: "
            + calls,
            float(open_["ssh_calls"]),
            [float(open_["ssh_calls"])],
            f"{open_['ssh_calls']} ({open_['over_the_wire']} over the wire)",
            "",
            "",
            ratio=False,
        ),
        Figure(
            "remote_archive_bytes_ratio",
            f"laptop mode: the code archive on the wire / the frozen tree it became there "
            f"(logs/code/<hash>), a project of {project['py_files']} .py files",
            s["archive_vs_frozen_bytes"],
            [s["archive_vs_frozen_bytes"]],
            f"{a['wire_bytes']} B, {a['files']} files",
            f"{a['frozen_bytes']} B, {a['frozen_files']} files (frozen there)",
            "< 1",
        ),
        Figure(
            "remote_wire_vs_project_bytes",
            f"laptop mode: the code archive / the laptop's project with its data/ of "
            f"{project['data_files']} small files ({a['data_files_sent']} of them sent)",
            s["wire_vs_project_bytes"],
            [s["wire_vs_project_bytes"]],
            f"{a['wire_bytes']} B",
            f"{project['bytes']} B, {project['files']} files (the project here)",
            "",
        ),
    ]


def remote_needs() -> str | None:
    if os.geteuid() != 0:
        return "needs root (the local Slurm cluster, sshd, a second user): sudo .venv/bin/python"
    if not os.access("/usr/sbin/sshd", os.X_OK):
        return "no /usr/sbin/sshd: apt-get install openssh-server (scripts/setup.sh does)"
    if shutil.which("slurmctld") is None and shutil.which("apt-get") is None:
        return "no Slurm packages and no apt-get to install them"
    return None


def hsl_needs() -> str | None:
    try:
        import hydra_plugins.hydra_submitit_launcher  # noqa: F401
    except ImportError:
        return "the baseline is missing: .venv/bin/pip install -e '.[bench]'"
    return None


def slurm_needs() -> str | None:
    if os.geteuid() != 0:
        return "needs root (it starts the local Slurm cluster): sudo .venv/bin/python bench/run.py"
    if shutil.which("slurmctld") is None and shutil.which("apt-get") is None:
        return "no Slurm packages and no apt-get to install them"
    try:
        import hydra_plugins.hydra_submitit_launcher  # noqa: F401
    except ImportError:
        return "the baseline is missing: .venv/bin/pip install -e '.[bench]'"
    return None


def has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


def gpu_needs() -> str | None:
    return None if has_cuda() else "no GPU: skipped"


BENCHES = [
    Bench(
        "runtime",
        "bench_runtime.py",
        ["ddp_vs_handwritten", "pipeline_vs_raw", "ddp_vs_handwritten_cpu", "pipeline_vs_raw_cpu"],
        ["--steps", "12", "--warmup", "3", "--rounds", "3"],
        ["--rounds", "12"],
        runtime_figures,
        tiny=["--steps", "3", "--warmup", "1", "--rounds", "1"],
    ),
    Bench(
        "lockstep_control",
        "bench_lockstep_control.py",
        ["lockstep_control"],
        ["--steps", "12", "--warmup", "3", "--rounds", "3"],
        ["--rounds", "12"],
        lockstep_control_figures,
        tiny=["--steps", "3", "--warmup", "1", "--rounds", "1"],
    ),
    Bench(
        "loader",
        "bench_loader.py",
        [
            "loader_vs_hand_ddp",
            "loader_vs_hand_ddp_cpu",
            "input_bound_auto_vs_0",
            "input_bound_vs_preloaded",
        ],
        ["--steps", "10", "--warmup", "3", "--rounds", "2"],
        ["--rounds", "12", "--steps", "40"],
        loader_figures,
        tiny=["--steps", "3", "--warmup", "1", "--rounds", "1"],
    ),
    Bench(
        "eval",
        "bench_eval.py",
        ["eval_vs_hand", "data_wait_cost"],
        ["--steps", "10", "--warmup", "3", "--rounds", "2"],
        ["--rounds", "5", "--steps", "20"],
        eval_figures,
        tiny=["--steps", "3", "--warmup", "1", "--rounds", "1"],
    ),
    Bench(
        "dataparallel",
        "bench_dataparallel.py",
        ["ddp_vs_dataparallel"],
        ["--rounds", "3", "--steps", "10"],
        ["--rounds", "5"],
        dataparallel_figures,
        tiny=["--rounds", "1", "--steps", "3", "--warmup", "1"],
    ),
    Bench(
        "checkpoint",
        "bench_checkpoint.py",
        ["ckpt_write_vs_dd", "async_block_vs_sync", "resume_vs_fresh_start"],
        ["--hidden", "1024", "--rounds", "3", "--resume-rounds", "3"],
        ["--rounds", "11", "--resume-rounds", "11"],
        checkpoint_figures,
        tiny=["--hidden", "256", "--depth", "2", "--rounds", "1", "--resume-rounds", "1"],
    ),
    Bench(
        "preemption",
        "bench_preemption.py",
        ["steps_lost_per_preemption"],
        ["--rounds", "2"],
        ["--rounds", "6"],
        preemption_figures,
        tiny=["--rounds", "1", "--steps", "40", "--every", "10"],
    ),
    Bench(
        "rehearse",
        "bench_rehearse.py",
        ["rehearsal_goodput", *(f"fault_to_step_{k}_s" for k in REHEARSED)],
        ["--faults", "7", "--every", "1", "--steps", "3000"],
        ["--faults", "14", "--every", "2", "--steps", "8000"],
        rehearse_figures,
        tiny=["--faults", "7", "--every", "1", "--steps", "3000"],
        rounds_flag="",
    ),
    Bench(
        "startup",
        "bench_startup.py",
        ["ttfs_vs_bare"],
        ["--rounds", "3"],
        ["--rounds", "7"],
        startup_figures,
    ),
    Bench(
        "warm_compile",
        "bench_warm_compile.py",
        ["warm_compile_vs_cold"],
        ["--rounds", "1"],
        ["--rounds", "3"],
        warm_compile_figures,
        # One worker under --tiny: each worker compiles cold, on the suite's two cores.
        tiny=["--rounds", "1", "--workers", "1"],
    ),
    Bench(
        "session",
        "bench_session.py",
        ["session_vs_hand", "session_vs_hand_cpu", "script_ttfs_vs_torchrun"],
        ["--rounds", "3", "--steps", "30", "--start-rounds", "3"],
        ["--rounds", "12", "--start-rounds", "5"],
        session_figures,
        tiny=["--rounds", "1", "--steps", "5", "--start-rounds", "1"],
    ),
    Bench(
        "slurm",
        "bench_slurm.py",
        [
            "sweep_submit_vs_hsl",
            "sbatch_calls_per_sweep",
            "sweep_1000_submit_s",
            "first_step_job_vs_srun",
        ],
        ["--rounds", "2", "--points", "100", "--big-points", "1000"],
        ["--rounds", "3", "--points", "100", "--big-points", "1000"],
        slurm_figures,
        tiny=["--rounds", "1", "--points", "10", "--big-points", "20"],
        needs=slurm_needs,
    ),
    Bench(
        "app_sweep",
        "bench_app_sweep.py",
        ["app_sweep_submit_vs_hsl"],
        ["--rounds", "2", "--points", "100"],
        ["--rounds", "3", "--points", "100"],
        app_sweep_figures,
        tiny=["--rounds", "1", "--points", "10"],
        needs=hsl_needs,
    ),
    Bench(
        "sweep_validate",
        "bench_sweep_validate.py",
        ["sweep_validate_10k_s", "sweep_validate_vs_launcher"],
        ["--rounds", "1"],
        ["--rounds", "3"],
        sweep_validate_figures,
        tiny=["--rounds", "1", "--points", "100", "--scratch-points", "2"],
    ),
    Bench(
        "remote",
        "bench_remote.py",
        [
            "remote_submit_overhead",
            "remote_first_submit_vs_login",
            "remote_logins_per_command",
            "remote_ssh_calls_per_submit",
            "remote_archive_bytes_ratio",
            "remote_wire_vs_project_bytes",
        ],
        ["--rounds", "3"],
        ["--rounds", "5"],
        remote_figures,
        needs=remote_needs,
    ),
    Bench(
        "gpu",
        "bench_gpu.py",
        ["gpt2_124m_tokens_per_s", "gpt2_124m_mfu"],
        ["--rounds", "2"],
        ["--rounds", "3"],
        gpu_figures,
        needs=gpu_needs,
        gpu=True,
    ),
    Bench(
        "gpu_vs_hand",
        "bench_gpu_vs_hand.py",
        ["gpt2_loop_vs_hand", "gpt2_124m_mfu_defaults"],
        ["--rounds", "1", "--steps", "50"],
        ["--rounds", "3", "--steps", "60"],
        gpu_vs_hand_figures,
        tiny=["--rounds", "1", "--steps", "10"],
        needs=gpu_needs,
        gpu=True,
    ),
]


# --- the machine, the run, the outputs ---------------------------------------------------


def machine() -> dict[str, Any]:
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = None
    try:
        kib = int(Path("/proc/meminfo").read_text().split()[1])
        memory = f"{kib / 2**20:.0f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory": memory,
        "gpu": gpu,
        "gpus": torch.cuda.device_count() if gpu else 0,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "os": platform.platform(terse=True),
    }


def run_bench(bench: Bench, args) -> tuple[list[Figure], str | None]:
    why = bench.needs()
    if why:
        return [], why
    options = list(bench.tiny if args.tiny else bench.quick if args.quick else bench.full)
    if args.rounds and bench.rounds_flag:  # a schedule's faults are its rounds
        if bench.rounds_flag in options:
            i = options.index(bench.rounds_flag)
            options[i + 1 : i + 2] = [str(args.rounds)]
        else:
            options += [bench.rounds_flag, str(args.rounds)]
    result = RESULTS / f"{bench.name}.json"
    result.unlink(missing_ok=True)
    argv = [sys.executable, str(REPO / "bench" / bench.script), *options]
    print(f"== {bench.name}: {' '.join(argv[1:])}", flush=True)
    start = time.monotonic()
    done = subprocess.run(argv, cwd=REPO)
    print(f"== {bench.name}: {time.monotonic() - start:.0f} s", flush=True)
    if done.returncode != 0 or not result.exists():
        return [], f"failed (exit {done.returncode}): run `{' '.join(argv[1:])}` to see why"
    return bench.figures(json.loads(result.read_text())), None


def results_json(figures: list[Figure], skipped: dict[str, str], info: dict) -> dict:
    out: dict[str, Any] = {**info}
    for f in figures:
        out[f.key] = round(f.value, 4) if f.value is not None else None
    for key in skipped:
        out.setdefault(key, None)
    out["figures"] = {
        f.key: {**asdict(f), "value": f.value, "spread": f.spread, "n_rounds": len(f.rounds)}
        for f in figures
    }
    out["skipped"] = skipped
    return out


def earlier_figures(earlier: dict, measured: set[str]) -> tuple[list[Figure], dict[str, str]]:
    """The figures (and skips) of an earlier results.json that this run did not measure,
    each marked with the date and command that measured it."""
    names = {f.name for f in fields(Figure)}
    when = f"{earlier.get('date', '?')}, `{earlier.get('command', '?')}`"
    kept = []
    for key, saved in earlier.get("figures", {}).items():
        if key not in measured:
            figure = Figure(**{k: v for k, v in saved.items() if k in names})
            kept.append(replace(figure, measured=figure.measured or when))
    skipped = {k: v for k, v in earlier.get("skipped", {}).items() if k not in measured}
    return kept, skipped


def fmt(value: float | None, ratio: bool) -> str:
    if value is None:
        return "-"
    if ratio:
        return f"{value:.3f}"
    return f"{value:.1f}" if value % 1 else f"{value:.0f}"


def table(figures: list[Figure], skipped: dict[str, str], keys: list[str]) -> list[str]:
    rows = [
        "| figure | what is compared | ours | baseline | median | spread (rounds) | target |",
        "|---|---|---|---|---|---|---|",
    ]
    by_key = {f.key: f for f in figures}
    for key in keys:
        f = by_key.get(key)
        if f is None:
            if key in skipped:
                rows.append(f"| `{key}` | {skipped[key]} | | | - | | |")
            continue
        spread = (
            f"{fmt(f.spread[0], f.ratio)}-{fmt(f.spread[1], f.ratio)} ({len(f.rounds)})"
            if f.rounds
            else ""
        )
        if f.ci:  # a 95 % interval of the median (issue 59 point 4)
            spread += f"; CI {fmt(f.ci[0], f.ratio)}-{fmt(f.ci[1], f.ratio)}"
        what = f.what + (f"; {f.note}" if f.note else "")
        if f.measured:  # kept from an earlier run by --merge
            what += f" (measured {f.measured})"
        rows.append(
            f"| `{f.key}` | {what} | {f.ours} | {f.baseline} | **{fmt(f.value, f.ratio)}** | "
            f"{spread} | {f.target} |"
        )
    return rows


def docs_section(figures, skipped, info, png: Path | None, docs: Path) -> str:
    m = info["machine"]
    cpu_keys = [k for b in BENCHES if not b.gpu for k in b.keys]
    gpu_keys = [k for b in BENCHES if b.gpu for k in b.keys]
    lines = [
        BEGIN,
        f"Measured {info['date']} with `{info['command']}` ({info['seconds']:.0f} s) on "
        f"{m['cpu']}, {m['cores']} cores, {m['memory']} memory, "
        f"{m['gpu'] or 'no GPU'}, torch {m['torch']}, Python {m['python']}. Ratios are ours "
        "/ the baseline measured in the same run: the median of the rounds, and the lowest "
        "and highest round.",
        "",
        *table(figures, skipped, cpu_keys),
        "",
        "GPU figures:",
        "",
    ]
    if any(f.key in gpu_keys for f in figures):
        lines += table(figures, skipped, gpu_keys)
    else:
        why = gpu_needs() or "not run (bench/run.py --only left the GPU benchmarks out)"
        lines += ["| figure | result |", "|---|---|"]
        lines += [f"| `{k}` | {skipped.get(k, why)} |" for k in gpu_keys]
    if png is not None and png.exists():
        rel = os.path.relpath(png, docs.parent)
        lines += ["", f"![every round of every ratio, and the targets]({rel})"]
    lines.append(END)
    return "\n".join(lines)


def write_docs(docs: Path, section: str) -> None:
    text = docs.read_text() if docs.exists() else "# Performance\n"
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        tail = rest.split(END, 1)[1]
        text = head + section + tail
    else:
        # After the title and the first paragraph.
        head, sep, tail = text.partition("\n\n")
        title_end = tail.find("\n\n")
        if title_end < 0:
            text = f"{text.rstrip()}\n\n## Every figure, one command\n\n{section}\n"
        else:
            text = (
                f"{head}{sep}{tail[:title_end]}\n\n## Every figure, one command\n\n"
                f"```bash\n.venv/bin/python bench/run.py [--quick]\n```\n\n{section}"
                f"{tail[title_end:]}"
            )
    docs.write_text(text)


def plot(figures: list[Figure], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ratios = [f for f in figures if f.ratio and f.rounds]
    if not ratios:
        return
    fig, ax = plt.subplots(figsize=(8, 0.55 * len(ratios) + 1.2))
    for i, f in enumerate(ratios):
        ax.scatter(f.rounds, [i] * len(f.rounds), color="tab:blue", alpha=0.5, s=18)
        ax.scatter([f.value], [i], color="tab:blue", marker="|", s=300)
        target = f.target.replace("<=", "").replace(">=", "").split()[0] if f.target else ""
        with contextlib.suppress(ValueError):  # a target in words is not plotted
            ax.scatter([float(target)], [i], color="tab:red", marker="x", s=40)
    ax.set_yticks(range(len(ratios)), [f.key for f in ratios])
    ax.set_xscale("log")
    ax.axvline(1.0, color="grey", lw=0.8)
    ax.set_xlabel("ours / baseline (dots: rounds, bar: median, x: target; log scale)")
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="fewer rounds and steps (< 10 min)")
    parser.add_argument(
        "--tiny",
        action="store_true",
        help="one round of the smallest sizes: every figure measured, none to trust (tests)",
    )
    parser.add_argument("--only", nargs="+", metavar="KEY", help="only the benchmarks of these")
    parser.add_argument("--gpu", action="store_true", help="only the GPU benchmarks")
    parser.add_argument("--rounds", type=int, default=0, help="rounds of every benchmark")
    parser.add_argument("--out", default=str(REPO / "bench" / "results.json"))
    parser.add_argument(
        "--merge",
        action="store_true",
        help="keep the figures of --out that this run does not measure (with --only)",
    )
    parser.add_argument("--docs", default=str(DOCS), help="the markdown file to update, or 'none'")
    parser.add_argument("--png", default=str(PNG), help="the plot of the ratios, or 'none'")
    args = parser.parse_args()
    known = {k for b in BENCHES for k in b.keys}
    unknown = sorted(set(args.only or []) - known)
    if unknown:
        parser.error(f"unknown figure(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    benches = [b for b in BENCHES if not args.only or set(b.keys) & set(args.only)]
    if args.gpu:
        benches = [b for b in benches if b.gpu]

    start = time.monotonic()
    figures: list[Figure] = []
    skipped: dict[str, str] = {}
    for bench in benches:
        got, why = run_bench(bench, args)
        figures += got
        for key in bench.keys:
            if why:
                skipped[key] = why
    command = "python bench/run.py" + " ".join(
        [
            "",
            *(["--quick"] if args.quick else []),
            *(["--tiny"] if args.tiny else []),
            *(["--gpu"] if args.gpu else []),
            *(["--only", *args.only] if args.only else []),
            *([f"--rounds {args.rounds}"] if args.rounds else []),
        ]
    )
    info = {
        "date": datetime.date.today().isoformat(),
        "command": command,
        "seconds": round(time.monotonic() - start, 1),
        "quick": args.quick,
        "machine": machine(),
    }
    out = Path(args.out)
    if args.merge and out.exists():
        measured = {k for b in benches for k in b.keys}
        kept, kept_skipped = earlier_figures(json.loads(out.read_text()), measured)
        figures, skipped = kept + figures, {**kept_skipped, **skipped}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results_json(figures, skipped, info), indent=2) + "\n")
    png = None if args.png == "none" else Path(args.png)
    if png is not None:
        plot(figures, png)
    if args.docs != "none":
        docs = Path(args.docs)
        write_docs(docs, docs_section(figures, skipped, info, png, docs))
    for f in figures:
        print(
            f"{f.key:28s} {fmt(f.value, f.ratio):>8s}  (rounds {len(f.rounds)}, target "
            f"{f.target or '-'})"
        )
    for key, why in skipped.items():
        print(f"{key:28s} {'-':>8s}  {why}")
    print(f"wrote {out} in {info['seconds']:.0f} s")
    failed = [k for k, why in skipped.items() if why.startswith("failed")]
    if failed:
        sys.exit(f"bench/run.py: {len(failed)} figure(s) failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
