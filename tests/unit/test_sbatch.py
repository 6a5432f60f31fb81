"""sbatch rendering: golden files, hostile strings run through bash, the frozen config."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from jeanzay_kit.config.compose import compose_config
from jeanzay_kit.config.runtime_settings import from_spec, to_env
from jeanzay_kit.config.spec import JobSpec, build_job_spec
from jeanzay_kit.slurm.sbatch import (
    ARRAY_TASK,
    RenderError,
    hydra_override,
    render_sbatch,
    sbatch_quote,
    shell_word,
)
from tests.helpers import bash_prints

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
UPDATE = os.environ.get("JZK_UPDATE_GOLDEN") == "1"

GOLDEN_CASES = {
    "h100_ddp_2x4": [
        "cluster=jeanzay_h100",
        "cluster.account=abc@h100",
        "resources.nodes=2",
        "resources.gpus_per_node=4",
        "resources.time=10:00:00",
        "train.global_batch_size=64",
        "job.name=h100_ddp",
    ],
    "h100_torchrun_2x4": [
        "cluster=jeanzay_h100",
        "cluster.account=abc@h100",
        "resources.nodes=2",
        "resources.gpus_per_node=4",
        "parallel.launcher=torchrun",
        "train.global_batch_size=64",
    ],
    # Every task in IDRIS's Singularity (issue 42 point 1): --nv, binds, requeue outside.
    "h100_container_2x4": [
        "cluster=jeanzay_h100",
        "cluster.account=abc@h100",
        "resources.nodes=2",
        "resources.gpus_per_node=4",
        "train.global_batch_size=64",
        "job.container.image=$SINGULARITY_ALLOWED_DIR/pytorch-2.9.sif",
        "job.container.binds=[$DSDIR/imagenet:/data:ro]",
        "job.run_dir=/lustre/fsn1/projects/abc/runs/h100",
    ],
    "v100_32g_fp16_array": [
        "cluster=jeanzay_v100",
        "cluster.account=abc@v100",
        "resources.constraint=v100-32g",
        "resources.time=30:00:00",
    ],
    "a100_pipeline": [
        "cluster=jeanzay_a100",
        "cluster.account=abc@a100",
        "parallel=pipeline",
        "resources.gpus_per_node=4",
        "parallel.pipeline_stages=4",
        "parallel.microbatches=8",
        "resources.time=01:30:00",
    ],
    "slurm_local_low": [
        "cluster=slurm_local",
        "resources.partition=low",
        "resources.nodes=2",
        "resources.gpus_per_node=2",
        "resources.time=00:10:00",
    ],
    # jzk tune's job array: each task a task of the study (slurm/sbatch.py tune_step_lines).
    "h100_tune_array": [
        "cluster=jeanzay_h100",
        "cluster.account=abc@h100",
        "resources.gpus_per_node=4",
        "tune.params={optim.lr: 'tag(log, interval(1e-4, 1e-2))'}",
        "tune.tasks=3",
        "tune.dir=/scratch/me/studies/lr search",
    ],
    "generic_gpus_env": [
        "cluster=generic_slurm",
        "resources.qos=normal",
        "resources.mem=64G",
        "+cluster.env.NCCL_SOCKET_IFNAME=ib0",
    ],
}


def _spec(overrides: list[str]) -> JobSpec:
    return build_job_spec(compose_config(overrides))


@pytest.mark.parametrize("name", sorted(GOLDEN_CASES))
def test_rendered_script_matches_golden_file(name: str) -> None:
    overrides = GOLDEN_CASES[name]
    array = "0-9%2" if "array" in name else None
    tune = "tune" in name
    if tune:
        array = "0-2"
    # The script `jzk render` writes in a project directory (with a space: quoted).
    workdir = "/home/user/my project" if name.startswith("slurm_local") else None
    script = render_sbatch(
        _spec(overrides), array=array, rendered_by=overrides, workdir=workdir, tune=tune
    )
    path = GOLDEN / f"{name}.sbatch"
    if UPDATE or not path.exists():
        path.write_text(script)
        if not UPDATE:
            pytest.fail(f"created missing golden file {path}; check it and commit it")
    assert script == path.read_text(), (
        f"{path.name} differs from what render_sbatch produces now. If the change is "
        "intended, accept it with: JZK_UPDATE_GOLDEN=1 .venv/bin/python -m pytest "
        "tests/unit/test_sbatch.py, then review `git diff tests/golden`"
    )


def _sbatch_directives(script: str) -> dict[str, str]:
    """Read #SBATCH lines the way sbatch does: double quotes group, backslash escapes."""
    out: dict[str, str] = {}
    for line in script.splitlines():
        if not line.startswith("#SBATCH "):
            continue
        arg, quoted, escape = [], False, False
        for ch in line[len("#SBATCH ") :]:
            if escape:
                arg.append(ch)
                escape = False
            elif ch == "\\":
                escape = True
            elif ch == '"':
                quoted = not quoted
            elif ch == "#" and not quoted or ch.isspace() and not quoted:
                break
            else:
                arg.append(ch)
        flag, _, value = "".join(arg).partition("=")
        out[flag.removeprefix("--")] = value
    return out


def test_directives_carry_every_resource() -> None:
    d = _sbatch_directives(render_sbatch(_spec(GOLDEN_CASES["h100_ddp_2x4"])))
    assert d == {
        "job-name": "h100_ddp",
        "account": "abc@h100",
        "constraint": "h100",
        "qos": "qos_gpu_h100-t3",
        "nodes": "2",
        "ntasks-per-node": "4",
        "gres": "gpu:4",
        "cpus-per-task": "24",
        "hint": "nomultithread",
        "time": "10:00:00",
        "output": "logs/%x-%j.out",
        "error": "logs/%x-%j.err",
        "signal": "USR1@120",
        "requeue": "",
        "open-mode": "append",
    }


def test_partition_profiles_render_partition_and_arrays_use_array_ids() -> None:
    s = _spec(
        ["cluster=jeanzay_v100_8gpu", "cluster.account=abc@v100", "resources.partition=gpu_p2l"]
    )
    d = _sbatch_directives(render_sbatch(s, array="0-2"))
    assert d["partition"] == "gpu_p2l" and "constraint" not in d
    assert d["array"] == "0-2" and d["output"] == "logs/%x-%A_%a.out"


HOSTILE = [
    'x"; touch PWNED; echo "',
    "$(touch PWNED)",
    "`touch PWNED`",
    "a'b; touch PWNED #",
    "semi;colon && touch PWNED",
    "back\\slash $HOME",
]


@pytest.mark.parametrize("hostile", HOSTILE)
def test_sbatch_quote_round_trips_through_sbatch_parsing(hostile: str) -> None:
    script = f"#SBATCH --job-name={sbatch_quote(hostile)}\n"
    assert _sbatch_directives(script)["job-name"] == hostile


@pytest.mark.parametrize("bad", ["a\nb", "a\rb", "a\x00b"])
def test_control_characters_never_reach_an_sbatch_line(bad: str) -> None:
    with pytest.raises(RenderError, match="control character"):
        sbatch_quote(bad)


def _stub_bin(tmp: Path) -> Path:
    """srun/module/scontrol stand-ins that record what the script asked for."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(
        '#!/bin/bash\nfor a in "$@"; do printf "%s\\0" "$a"; done > "$JZK_TEST_RECORD"\n'
    )
    (bin_dir / "module").write_text('#!/bin/bash\nprintf "%s\\n" "$*" >> "$JZK_TEST_MODULES"\n')
    # The batch shell's own Python (the health gate's decision): its words, a line a call.
    (bin_dir / "python").write_text(
        '#!/bin/bash\ncat > /dev/null\nfor a in "$@"; do printf "%s\\0" "$a"; done'
        ' >> "$JZK_TEST_RECORD.python"\necho >> "$JZK_TEST_RECORD.python"\n'
    )
    # A big job's host list (20000 names, more than a pipe holds): a reader that stops at
    # the first line would kill scontrol with SIGPIPE, and `set -o pipefail` the script.
    (bin_dir / "scontrol").write_text('#!/bin/bash\nfor i in $(seq 1 20000); do echo "n$i"; done\n')
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    return bin_dir


def _run_script(
    script: str, tmp: Path, extra: dict[str, str] | None = None
) -> tuple[list[str], str]:
    bin_dir = _stub_bin(tmp)
    work = tmp / "work"
    work.mkdir()
    (work / "job.sbatch").write_text(script)
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "SLURM_JOB_ID": "42",
        "SLURM_NNODES": "2",
        "SLURM_JOB_NODELIST": "n[1-2]",
        "JZK_TEST_RECORD": str(tmp / "srun.argv"),
        "JZK_TEST_MODULES": str(tmp / "modules.txt"),
        "HOME": str(tmp),
        **(extra or {}),
    }
    subprocess.run(["bash", "job.sbatch"], cwd=work, env=env, check=True, timeout=30)
    argv = (tmp / "srun.argv").read_text().split("\0")[:-1]
    modules = (tmp / "modules.txt").read_text() if (tmp / "modules.txt").exists() else ""
    return argv, modules


def _no_pwned(tmp: Path) -> None:
    assert not list(tmp.rglob("PWNED")), "a hostile string ran as a command"


@pytest.mark.parametrize("hostile", HOSTILE)
def test_hostile_values_stay_data_when_the_script_runs(hostile: str, tmp_path: Path) -> None:
    cfg = compose_config(["cluster=generic_slurm"])
    cfg["job"]["name"] = hostile
    cfg["job"]["run_dir"] = f"outputs/{hostile}"
    cfg["job"]["log_dir"] = f"logs {hostile}"
    cfg["job"]["entry"] = "-m " + shlex.quote(f"pkg.{hostile}")
    cfg["job"]["entry_kind"] = "toolkit"  # a Hydra application given the frozen config
    cfg["cluster"]["env"] = {"JZK_HOSTILE": hostile}
    cfg["cluster"]["modules"] = [hostile]
    # A free-text field of the schema carries it into the frozen config.
    cfg["cluster"]["description"] = hostile + "\n${oc.env:HOME}\nJZK_CONFIG_0"
    spec = build_job_spec(cfg)
    script = render_sbatch(spec, rendered_by=[f"job.name={hostile}", "x=1\ntouch PWNED"])
    argv, modules = _run_script(script, tmp_path)
    _no_pwned(tmp_path)

    assert _sbatch_directives(script)["job-name"] == hostile
    log_dir = f"logs {hostile}"
    assert argv == [
        "--kill-on-bad-exit=1",
        "python",
        "-m",
        f"pkg.{hostile}",
        f"--config-dir={log_dir}",
        "--config-name=jzk-config-42",
        hydra_override("hydra.run.dir", f"outputs/{hostile}"),
    ]
    # The health gate's decision, outside srun, gets the run directory as one word too.
    (gate,) = (tmp_path / "srun.argv.python").read_text().splitlines()
    assert gate.split("\0")[:-1] == [
        "-m", "jeanzay_kit.node.health", "gate", f"--run-dir=outputs/{hostile}"
    ]  # fmt: skip
    assert not spec.cluster.module_purge  # generic_slurm: no `module purge` line
    assert modules.splitlines() == [f"load {hostile}"]
    # The frozen config reads back to exactly the validated values, "${" left alone.
    frozen = OmegaConf.load(tmp_path / "work" / log_dir / "jzk-config-42.yaml")
    assert OmegaConf.to_container(frozen, resolve=True) == spec.config


@pytest.mark.parametrize("hostile", HOSTILE)
def test_hostile_script_arguments_reach_the_script_as_data(hostile: str, tmp_path: Path) -> None:
    cfg = compose_config(["cluster=generic_slurm"])
    cfg["job"]["entry"] = shlex.quote(f"my {hostile}.py")
    cfg["job"]["args"] = [hostile, "--run", f"outputs/{hostile}"]
    spec = build_job_spec(cfg)
    argv, _modules = _run_script(render_sbatch(spec), tmp_path)
    _no_pwned(tmp_path)
    assert argv == [
        "--kill-on-bad-exit=1",
        "python",
        "-m",
        "jeanzay_kit.node.script_task",
        f"--run-dir={spec.checkpoint.run_dir}",
        "--stall-seconds=300",
        "--heartbeat-seconds=2",
        "--after-signal-seconds=60",
        f"--settings={to_env(from_spec(spec))}",
        "--",
        "python",
        f"my {hostile}.py",
        hostile,
        "--run",
        f"outputs/{hostile}",
    ]


def test_torchrun_script_rendezvous_on_the_first_node(tmp_path: Path) -> None:
    overrides = GOLDEN_CASES["h100_torchrun_2x4"]
    argv, modules = _run_script(render_sbatch(_spec(overrides)), tmp_path)
    assert modules.splitlines() == ["purge", "load arch/h100"]
    port = 10000 + 42 % 22768
    assert argv[:9] == [
        "--kill-on-bad-exit=1",
        "python",
        "-m",
        "jeanzay_kit.node.torchrun_agent",
        "--nnodes=2",
        "--nproc-per-node=4",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=n1:{port}",
        "--rdzv-id=42",
    ]
    # torchrun's -m: each worker runs the installed entry point as a module.
    assert argv[9:13] == [
        "-m",
        "jeanzay_kit.train_app",
        "--config-dir=logs",
        "--config-name=jzk-config-42",
    ]
    assert re.fullmatch(r"hydra.run.dir='outputs/jzk-[0-9a-f]{8}'", argv[13])
    assert len(argv) == 14


@pytest.mark.parametrize(
    "value",
    ["plain", "a b", "it's", "new\nline", "tab\tand\\back", "$(id) `id` ;", "k='v' !x", "'$x'"],
)
def test_shell_word_is_one_word_meaning_exactly_the_value(value: str) -> None:
    word = shell_word(value)
    assert "\n" not in word
    out = subprocess.run(
        ["bash", "-c", f"printf %s {word}"], capture_output=True, text=True, check=True, timeout=10
    ).stdout
    assert out == value


def test_rendered_scripts_are_valid_bash() -> None:
    for overrides in GOLDEN_CASES.values():
        script = render_sbatch(_spec(overrides), rendered_by=overrides)
        subprocess.run(["bash", "-n"], input=script, text=True, check=True, timeout=10)


@pytest.mark.parametrize("value", [*HOSTILE, "plain/path", "a\\'b", "${oc.env:HOME}", "x\\"])
def test_hydra_override_reads_back_as_the_value(value: str) -> None:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    override = OverridesParser.create().parse_override(hydra_override("hydra.run.dir", value))
    # What a job sees: the parsed value, stored in the config and resolved by OmegaConf.
    resolved = OmegaConf.to_container(OmegaConf.create({"v": override.value()}), resolve=True)
    assert resolved["v"] == value


def test_the_site_pytorch_module_loads_after_the_architecture_module() -> None:
    spec = _spec(
        [
            "cluster=jeanzay_h100",
            "cluster.account=abc@h100",
            "cluster.pytorch_module=pytorch-gpu/py3/2.9.0",
        ]
    )
    loads = [line for line in render_sbatch(spec).splitlines() if line.startswith("module ")]
    assert loads == ["module purge", "module load arch/h100", "module load pytorch-gpu/py3/2.9.0"]


@pytest.mark.parametrize("hostile", HOSTILE)
def test_each_array_task_gets_its_own_run_dir_whatever_the_path(
    hostile: str, tmp_path: Path
) -> None:
    """`--array`: the run directory (the batch shell's check, srun's hydra.run.dir) is
    <job.run_dir>/task-<id>, the id expanded by bash, the rest staying data."""
    cfg = compose_config(["cluster=generic_slurm"])
    cfg["job"]["run_dir"] = f"outputs/{hostile}"
    spec = build_job_spec(cfg)
    script = render_sbatch(spec, array="0-3%2")
    for task in ("0", "3"):
        work = tmp_path / task
        work.mkdir()
        argv, _ = _run_script(script, work, {"SLURM_ARRAY_TASK_ID": task})
        _no_pwned(tmp_path)
        assert argv[-1] == hydra_override("hydra.run.dir", f"outputs/{hostile}/task-{task}")
        assert (work / "work" / "outputs" / hostile / f"task-{task}").is_dir()


@pytest.mark.parametrize("value", ["plain", "a b", "it's", "new\nline", "'$x'"])
def test_the_array_task_id_joins_any_quoting(value: str) -> None:
    word = shell_word(f"{value}/task-{ARRAY_TASK}/{value}")
    out = bash_prints(word, {"SLURM_ARRAY_TASK_ID": "7", "PATH": "/usr/bin:/bin"})
    assert out == f"{value}/task-7/{value}"
