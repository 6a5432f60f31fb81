"""Render a JobSpec as a standalone sbatch script a user can read, keep and `sbatch`. Pure.

Two kinds of quoting, because two different parsers read the script:

* `#SBATCH` lines are parsed by sbatch itself, never by a shell. sbatch understands
  double quotes and backslash escapes, and treats an unquoted `#` as a comment
  (src/sbatch/opt.c, _get_argument). Every value is written in double quotes with `"`
  and `\\` escaped. A newline would end the directive and start a shell line, so
  values with control characters are refused.
* The script body is bash: every value goes through `shlex.quote`, so spaces, quotes,
  `$(...)`, backticks and `;` stay data.

The resolved config is embedded in a quoted here-document (no expansion inside) and
written next to the logs when the job starts, so the job runs exactly the config that
was validated, whatever happens to conf/ afterwards.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import replace

import yaml

from jeanzay_kit.config.collector import CONTROL as _CONTROL
from jeanzay_kit.config.runtime_settings import from_spec as runtime_settings
from jeanzay_kit.config.runtime_settings import to_env as settings_text
from jeanzay_kit.config.schema import SCRIPT_OUTPUTS
from jeanzay_kit.config.spec import JobSpec
from jeanzay_kit.distributed.ranks import PORT_BASE, PORT_SPAN
from jeanzay_kit.distributed.script_env import script_argv
from jeanzay_kit.errors import RenderError
from jeanzay_kit.rundir import run_layout as layout
from jeanzay_kit.slurm.container import CONTAINER_WORD, container_lines, requeue_request_lines
from jeanzay_kit.slurm.flags import sbatch_flags
from jeanzay_kit.slurm.offline_env import offline_exports
from jeanzay_kit.slurm.shell_words import ARRAY_TASK, ARRAY_TASK_DIR, expanding_word, shell_word

__all__ = ["ARRAY_TASK", "ARRAY_TASK_DIR", "render_sbatch", "shell_word", "sbatch_quote"]

# Values made only of these characters read the same to sbatch with or without quotes.
# The line each start of a job begins its logs with (launch/log_rules.py splits on it).
START_MARK = "jzk: start "
_SBATCH_SAFE = re.compile(r"^[A-Za-z0-9_.:@%/+=,-]+$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def sbatch_quote(value: object) -> str:
    """Quote a value for an #SBATCH line, the way sbatch parses it."""
    text = str(value)
    if _CONTROL.search(text):
        raise RenderError(f"refusing to write {text!r} into an #SBATCH line: control character")
    if _SBATCH_SAFE.match(text):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def hydra_override(key: str, value: str) -> str:
    """key='value' in Hydra's override grammar, reading back as exactly `value`.

    Inside quotes Hydra treats backslashes as escapes only before a quote or at the end,
    so those runs are doubled; quotes are escaped; `${` is escaped so that neither Hydra
    nor OmegaConf resolves it.
    """
    text = re.sub(r"(\\+)(?='|$)", lambda m: m.group(1) * 2, str(value))
    text = text.replace("'", "\\'").replace("${", "\\${")
    return f"{key}='{text}'"


def slurm_pattern_literal(path: str) -> str:
    """Escape `%` so Slurm's filename patterns (%j, %x...) leave the user's path alone."""
    return path.replace("%", "%%")


def directive(flag: str, value: object | None = None) -> str:
    return f"#SBATCH --{flag}" if value is None else f"#SBATCH --{flag}={sbatch_quote(value)}"


def frozen_config_yaml(config: Mapping[str, object]) -> str:
    """The resolved config as YAML that OmegaConf reads back to the same values."""
    text: str = yaml.safe_dump(
        _escape_interpolations(config),
        sort_keys=False,
        default_flow_style=False,
        allow_unicode=True,
    )
    return text


def _escape_interpolations(value: object) -> object:
    # The config is already resolved; a literal "${" left in a string must not be
    # resolved a second time when the job loads the file.
    if isinstance(value, Mapping):
        return {str(k): _escape_interpolations(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_escape_interpolations(v) for v in value]
    if isinstance(value, str):
        return value.replace("${", "\\${")
    return value


def _heredoc_delimiter(body: str) -> str:
    tag = "JZK_CONFIG_" + hashlib.sha256(body.encode()).hexdigest()[:12].upper()
    if tag in body.splitlines():  # cannot happen for a hash of the body, but be certain
        raise RenderError("the config contains its own here-document delimiter")
    return tag


def is_plain(value: object) -> bool:
    """True when sbatch (and shlex) read `value` the same with or without quotes."""
    return bool(_SBATCH_SAFE.match(str(value)))


def setup_lines(spec: JobSpec, code_dir: str | None = None) -> list[str]:
    """What a job runs before srun: the profile's modules, thread counts, its env, and
    the snapshot of the project's code every task imports from (code_dir).

    Shared by the rendered script and the jeanzay launcher's submitit jobs."""
    lines = [
        "# Each start of the job marked in both logs, which a requeued job appends to",
        "# (`jzk logs --attempt K` reads them)",
        f'jzk_start="{START_MARK}$(( ${{SLURM_RESTART_COUNT:-0}} + 1 )) of job '
        '$SLURM_JOB_ID on $(hostname) at $(date +%Y-%m-%dT%H:%M:%S)"',
        'echo "$jzk_start"',
        'echo "$jzk_start" >&2',
        "",
    ]
    modules = spec.loaded_modules
    if spec.cluster.module_purge or modules:
        lines.append("# Modules from the cluster profile")
        if spec.cluster.module_purge:
            lines.append("module purge")
        for module in modules:
            lines.append(f"module load {shell_word(module)}")
        lines.append("")
    lines.append("# CPU threads of each training process: its share of the task's CPUs")
    lines.append(f"export OMP_NUM_THREADS={spec.omp_num_threads}")
    lines.append("# Since Slurm 22.05 srun no longer inherits --cpus-per-task from sbatch")
    lines.append(f"export SRUN_CPUS_PER_TASK={spec.resources.cpus_per_task}")
    lines.extend(_library_env_lines(spec))
    for name, value in spec.cluster.env.items():
        if not _ENV_NAME.match(name):
            raise RenderError(f"cluster.env key {name!r} is not a shell variable name")
        lines.append(f"export {name}={shell_word(value)}")
    if code_dir:
        lines.append("# The project's code as it was at submission: every task imports from it")
        lines.append(f"export JZK_CODE_DIR={shell_word(code_dir)}")
    return lines


def _library_env_lines(spec: JobSpec) -> list[str]:
    """The libraries' caches (cluster.cache_dir) and, on nodes without internet, their
    offline switches (slurm/offline_env.py; docs/offline.md)."""
    cluster = spec.cluster
    exports = offline_exports(cluster.compute_internet, cluster.cache_dir, cluster.env)
    if not exports:
        return []
    why = (
        [
            "# No internet on the compute nodes (cluster.compute_internet=false): the",
            "# libraries read only their caches (`jzk prefetch` fills them), failing at once",
        ]
        if not cluster.compute_internet
        else ["# The libraries' caches (cluster.cache_dir), where `jzk prefetch` filled them"]
    )
    return [*why, *(f"export {k}={expanding_word(v)}" for k, v in exports.items())]


def run_dir_check_lines(run_dir: str, mark_start: bool = True) -> list[str]:
    """Refuse an unwritable run directory in the batch script, in seconds, before the job
    step starts (exit 2: the requeue logic leaves a refusal alone). mark_start: the
    start marked in its train.log too, so that how an attempt ended is read from its own
    lines (ending/endings.py attempt_log), never an earlier job's: a NaN or a full disk
    of the job before called a later kill the same, and it was not retried. A study's
    folder (jzk tune) holds its trials' run directories, not a train.log to mark."""
    probe = f'"$JZK_RUN_DIR/{layout.WRITE_PROBE}"'
    return [
        "# The run directory must take writes before the job step starts: a read-only",
        "# filesystem or a folder of someone else's fails the job here, not in a worker.",
        f"JZK_RUN_DIR={shell_word(run_dir)}",
        f'if ! {{ mkdir -p -- "$JZK_RUN_DIR" && : > {probe}; }} 2>/dev/null; then',
        '    echo "train.py: error: job.run_dir=$JZK_RUN_DIR cannot be written on $(hostname)."'
        ' "HINT: set job.run_dir to a directory you can write (on Jean Zay: under \\$WORK'
        ' or \\$SCRATCH)" >&2',
        "    exit 2",
        "fi",
        f"rm -f -- {probe}",
        # A full disk here is the job's to meet and say, not this line's (set -e).
        *(
            [f'echo "$jzk_start" >> "$JZK_RUN_DIR/{layout.TRAIN_LOG}" 2>/dev/null || true']
            if mark_start
            else []
        ),
    ]


def signal_trap_lines() -> list[str]:
    """The batch shell's traps. Slurm may signal this shell alone (`--signal=B:USR1@120`,
    `scancel --batch`): it notes the signal in the run directory, where every task reads
    it and passes it on once (ending/signal_rules.py). SIGTERM means Slurm is ending the
    job (scancel, a preemption, a requeue the script asked for itself): nothing is
    requeued from here then. Without traps bash would die of either."""
    note = f'"$JZK_RUN_DIR/{layout.STOP_NOTE}"'
    return [
        "# Slurm may signal this shell alone (--signal=B:..., scancel --batch): the note",
        "# reaches every task, which passes the signal on once. SIGTERM: Slurm is ending",
        "# the job (scancel, preemption, a requeue): nothing is requeued from here.",
        'jzk_ending=""',
        f"trap 'echo USR1 > {note} || true' USR1",
        f"trap 'echo USR2 > {note} || true' USR2",
        "trap 'jzk_ending=1' TERM",
    ]


def render_sbatch(
    spec: JobSpec,
    command: Sequence[str] | None = None,
    *,
    array: str | None = None,
    rendered_by: Sequence[str] = (),
    workdir: str | None = None,
    rerender: str = "jzk render",
    code_dir: str | None = None,
    tune: bool = False,
) -> str:
    """The whole sbatch script for `spec`.

    command: what each task runs after the Python interpreter, e.g. ["train.py"] or
    ["-m", "mypkg.train"]; default: job.entry. The frozen config is passed to it as
    Hydra's --config-dir/--config-name.
    array: a Slurm array range such as "0-9%4"; logs then use %A_%a.
    rendered_by: the overrides that produced the spec, recorded in the header so the
    script can be rendered again.
    workdir: the job's working directory (#SBATCH --chdir), an absolute path: job.workdir,
    or the directory `jzk render` ran in. Relative paths of the script (logs, run
    directory, entry point) then mean what they meant there, whatever directory `sbatch`
    is run from. None writes no --chdir (the job runs where sbatch is run).
    rerender: the command the header names to render the script again.
    code_dir: the snapshot of the project's code (project/snapshot.py), exported as
    JZK_CODE_DIR; None: the tasks import the project's live tree.
    tune: each array task is a task of `jzk tune`'s study (tune_step_lines).
    """
    runs_script = command is None and spec.job.runs_script
    if array and not tune:
        spec = per_array_task(spec)
    lines = header_lines(spec, rendered_by, rerender, workdir)
    lines += directive_lines(spec, array, workdir)
    lines += ["", "set -eo pipefail", ""]
    lines += setup_lines(spec, code_dir)
    lines.append("")
    lines += run_dir_check_lines(spec.tune.dir if tune else spec.checkpoint.run_dir, not tune)
    lines.append("")
    lines += frozen_config_lines(spec)
    lines.append("")
    if tune:
        if spec.job.container is not None:
            raise RenderError(
                "job.container: a study's task (jzk tune) starts its trials with srun from "
                "the batch shell, which the container wiring does not cover yet. HINT: run "
                "the study without job.container.image, or submit single runs with jzk submit"
            )
        return "\n".join(lines + tune_step_lines(spec)) + "\n"
    if spec.job.container is not None:
        lines += [*container_lines(spec, workdir, code_dir), ""]
    if spec.layout.launcher == "torchrun":
        lines += torchrun_rendezvous_lines()
    if spec.watchdog.health_gate:
        lines += health_gate_lines(spec)
    program = in_container(spec, task_command(spec, command, runs_script))
    if not spec.preemption.requeue:
        lines += [*KILL_NOTE, srun_prefix(spec) + " ".join(program)]
    else:
        lines += requeue_step_lines(spec, program, runs_script)
    return "\n".join(lines) + "\n"


def per_array_task(spec: JobSpec) -> JobSpec:
    """The spec of one task of a job array: its own run directory,
    <job.run_dir>/task-<SLURM_ARRAY_TASK_ID>, so no two tasks write the same checkpoints."""
    run_dir = f"{spec.checkpoint.run_dir.rstrip('/')}/{ARRAY_TASK_DIR}"
    return replace(spec, checkpoint=replace(spec.checkpoint, run_dir=run_dir))


def array_run_dir(spec: JobSpec) -> str:
    """An array task's run directory as a reader sees it (`jzk render` prints it)."""
    return per_array_task(spec).checkpoint.run_dir.replace(ARRAY_TASK, "<task id>")


def header_lines(
    spec: JobSpec, rendered_by: Sequence[str], rerender: str, workdir: str | None
) -> list[str]:
    """The comments on top: where it came from, how to render it again, what it runs."""
    lines = [
        "#!/bin/bash",
        f"# Rendered by jeanzay_kit for cluster={spec.cluster.name}; submit: sbatch <file>",
        f"# Re-render: {rerender} " + " ".join(shell_word(o) for o in rendered_by),
        "# " + shape_line(spec),
    ]
    if ARRAY_TASK in spec.checkpoint.run_dir:
        lines.append(
            "# Each array task has its own run directory: "
            + spec.checkpoint.run_dir.replace(ARRAY_TASK, "${SLURM_ARRAY_TASK_ID}")
        )
    if workdir:
        lines.append(
            "# Slurm opens the logs before the script runs and creates no folder: "
            f"`jzk render` made {shell_word(spec.job.log_dir)}"
        )
    else:
        lines.append(
            f"# Slurm does not create log folders: mkdir -p {shell_word(spec.job.log_dir)}"
        )
    return lines


def shape_line(spec: JobSpec) -> str:
    """What the job is, in one line: the toolkit loop's layout and batch, or, for a
    script task, its processes (the loop's settings mean nothing to a script)."""
    lay, res, tset = spec.layout, spec.resources, spec.train
    gpus = "CPU partition" if res.partition.cpu_only else f"{res.gpus_per_node} GPU(s)"
    if spec.job.runs_script:
        return (
            f"{res.nodes} node(s) x {gpus}: your command {spec.job.entry}, "
            f"{lay.world_size} processes with torchrun's variables (RANK, WORLD_SIZE, ...)"
        )
    return (
        f"{res.nodes} node(s) x {gpus}, parallel.mode={lay.mode}, "
        f"world size {lay.world_size}, {lay.dp_size} data-parallel x {lay.pp_size} pipeline; "
        f"global batch {tset.global_batch_size} = {lay.dp_size} x {tset.micro_batch_size} "
        f"x {tset.grad_accum_steps} accumulation step(s)"
        + (
            " at most (train.micro_batch_size=auto: measured at start)"
            if tset.micro_batch_auto
            else ""
        )
    )


def directive_lines(spec: JobSpec, array: str | None, workdir: str | None) -> list[str]:
    """The #SBATCH lines: what the job asks of Slurm (slurm/flags.py, shared with the
    launcher), with this script's own options in their places: --chdir after the name,
    the array and the log files before the preemption options."""
    log_pattern = "%x-%A_%a" if array else "%x-%j"
    log_dir = slurm_pattern_literal(spec.job.log_dir.rstrip("/") or "/")
    lines = []
    for flag in sbatch_flags(spec):
        if flag.name == "signal":
            if array:
                lines.append(directive("array", array))
            lines.append(directive("output", f"{log_dir}/{log_pattern}.out"))
            lines.append(directive("error", f"{log_dir}/{log_pattern}.err"))
        lines.append(directive(flag.name, flag.value))
        if flag.name == "job-name" and workdir:
            # Logs, run directory and entry point are relative to this directory, so the
            # script works the same from wherever it is submitted.
            lines.append(directive("chdir", workdir))
    # Requeued runs append to the same log instead of truncating it.
    lines.append(directive("open-mode", "append"))
    return lines


def frozen_config_lines(spec: JobSpec) -> list[str]:
    """The config validated at render time, written by the job where Hydra reads it."""
    body = frozen_config_yaml(spec.config)
    tag = _heredoc_delimiter(body)
    return [
        "# The config validated at render time, frozen into this script. A job step run by",
        "# `jzk train` inside an allocation tags it (JZK_STEP_TAG): two in one allocation",
        "# never read each other's config.",
        f"JZK_CONFIG_DIR={shell_word(spec.job.log_dir)}",
        'JZK_CONFIG_NAME="jzk-config-${SLURM_JOB_ID}${JZK_STEP_TAG:+-$JZK_STEP_TAG}"',
        'mkdir -p -- "$JZK_CONFIG_DIR"',
        f"cat > \"$JZK_CONFIG_DIR/$JZK_CONFIG_NAME.yaml\" <<'{tag}'",
        body.rstrip("\n"),
        tag,
    ]


def torchrun_rendezvous_lines() -> list[str]:
    return [
        "# torchrun starts one worker per GPU on each node; rendezvous on the first node",
        # sed reads the whole list: `head -n 1` would leave scontrol writing into a closed
        # pipe on a big job, and SIGPIPE + pipefail would end the script here.
        'MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n 1p)"',
        f"MASTER_PORT=$(( {PORT_BASE} + SLURM_JOB_ID % {PORT_SPAN} ))",
    ]


def task_command(spec: JobSpec, command: Sequence[str] | None, runs_script: bool) -> list[str]:
    """What srun starts on each task, as shell words."""
    program = [shell_word(spec.job.python)]
    if spec.layout.launcher == "torchrun":
        # torch.distributed.run, with the preemption signals passed on to the workers
        # (node/torchrun_agent.py: plain torchrun dies of SIGUSR1).
        program += [
            "-m",
            "jeanzay_kit.node.torchrun_agent",
            '--nnodes="$SLURM_NNODES"',
            f"--nproc-per-node={spec.resources.gpus_per_node}",
            "--rdzv-backend=c10d",
            '--rdzv-endpoint="$MASTER_ADDR:$MASTER_PORT"',
            '--rdzv-id="$SLURM_JOB_ID"',
        ]
    if runs_script:
        return program + script_task_words(spec)
    argv = list(command) if command is not None else shlex.split(spec.job.entry)
    program += [shell_word(a) for a in argv]
    program += ['--config-dir="$JZK_CONFIG_DIR"', '--config-name="$JZK_CONFIG_NAME"']
    # The run directory comes from the job's identity (job.run_dir), so a requeued job
    # finds its checkpoints; the frozen config has no `hydra` section to carry it.
    program.append(shell_word(hydra_override("hydra.run.dir", spec.checkpoint.run_dir)))
    return program


def script_task_words(spec: JobSpec) -> list[str]:
    """Your own command, with exactly job.args: node/script_task.py adds torchrun's
    variables (and JZK_RUN_DIR) and becomes it, so Slurm's signals reach it."""
    stall, beat, after_signal = spec.script_watch  # as a sweep's tasks watch it too
    return [
        "-m",
        "jeanzay_kit.node.script_task",
        shell_word(f"--run-dir={spec.checkpoint.run_dir}"),
        *(shell_word(f"--resume-arg={a}") for a in spec.job.resume_args),
        *(shell_word(f"--may-change={a}") for a in spec.job.args_may_change),
        # job.script_outputs, when not the default the task knows.
        *script_outputs_words(spec.job.script_outputs),
        f"--stall-seconds={stall:g}",
        f"--heartbeat-seconds={beat:g}",
        f"--after-signal-seconds={after_signal:g}",
        # The job's settings for a session the script opens (config/runtime_settings.py).
        shell_word(f"--settings={settings_text(runtime_settings(spec))}"),
        "--",
        *(shell_word(a) for a in script_argv(spec.job.python, spec.job.entry, spec.job.args)),
    ]


def script_outputs_words(outputs: Sequence[str]) -> list[str]:
    """`--outputs=JSON` for a job.script_outputs other than the default, else nothing."""
    if tuple(outputs) == SCRIPT_OUTPUTS:
        return []
    return [shell_word("--outputs=" + json.dumps(list(outputs)))]


def in_container(spec: JobSpec, words: list[str]) -> list[str]:
    """`words` run inside job.container's image (slurm/container.py), or as they are."""
    return [CONTAINER_WORD, *words] if spec.job.container is not None else words


def srun_prefix(spec: JobSpec) -> str:
    """`srun --kill-on-bad-exit=1 [job.srun_args] ` (each option one quoted word)."""
    return " ".join(["srun", "--kill-on-bad-exit=1", *map(shell_word, spec.job.srun_args)]) + " "


def health_gate_lines(spec: JobSpec, run_dir_word: str | None = None) -> list[str]:
    """Before any training, one task per node checks its GPUs and folders
    (node/health.py); the batch shell's `gate` leaves a failed node out and requeues the
    job, or lets it train. A probe that dies is a node without an answer, so the step's
    own status is not the gate's. run_dir_word: the option as a shell word, when the run
    directory is the shell's to pick (array_gate_lines)."""
    run_dir = run_dir_word or shell_word(f"--run-dir={spec.checkpoint.run_dir}")
    python = shell_word(spec.job.python)
    # A job on a CPU partition asks Slurm for no GPU (total_gpus 0): expect none.
    gpus = spec.resources.gpus_per_node if spec.resources.total_gpus else 0
    probe = in_container(spec, [python, "-m", "jeanzay_kit.node.health", "probe", run_dir,
                                f"--expect-gpus={gpus}",
                                f"--device={shell_word(spec.cluster.device)}"])  # fmt: skip
    decide = in_container(spec, [python, "-m", "jeanzay_kit.node.health", "gate", run_dir])
    step = [
        "srun",
        '--nodes="$SLURM_JOB_NUM_NODES"',
        '--ntasks="$SLURM_JOB_NUM_NODES"',
        "--ntasks-per-node=1",
        "--kill-on-bad-exit=0",
    ]
    # In a container the gate asks the batch shell for the requeue (no scontrol inside).
    ending = requeue_request_lines() if spec.job.container is not None else []
    return [
        "# The health gate (watchdog.health_gate): on every node, before any training,",
        "# the GPUs Slurm gave run a kernel with their memory free and the run directory",
        "# and scratch folders take writes; a node that fails is left out and the job",
        "# requeued (exit 3), no restart spent",
        "jzk_health=0",
        f"{{ {' '.join(step + probe)} || true; }} | {' '.join(decide)} || jzk_health=$?",
        'if [ "$jzk_health" -ne 0 ]; then',
        *("  " + line for line in ending),
        '  exit "$jzk_health"',
        "fi",
        "",
    ]


def array_gate_lines(spec: JobSpec, run_dirs: Sequence[str]) -> list[str]:
    """The health gate in the batch script of a job array that submitit writes (the
    jeanzay launcher's sweeps, `setup` lines before its srun): array task i runs the i-th
    point (submitit's map_array), whose run directory records the gate's endings."""
    words = " ".join(shell_word(d) for d in run_dirs)
    return [
        "# Each array task's run directory, in submitit's map_array order",
        f"jzk_run_dirs=({words})",
        'jzk_gate_dir="${jzk_run_dirs[${SLURM_ARRAY_TASK_ID:-0}]}"',
        *health_gate_lines(spec, '--run-dir="$jzk_gate_dir"'),
    ]


KILL_NOTE = [
    "# --kill-on-bad-exit: one failed task ends the step instead of leaving the",
    "# others blocked in a collective until the time limit",
]


def tune_step_lines(spec: JobSpec) -> list[str]:
    """A study's task (jeanzay_kit/tune/task.py) in the batch shell: it asks for a trial
    and runs it as a job step of this allocation (srun), then asks again. A trial's ranks
    take Slurm's signals as any run's do, save, and requeue this array task, which takes
    the same trial again when it restarts; the note of a signal sent to this shell alone
    is in the task's own folder, where the task reads it and passes it on."""
    task = [
        shell_word(spec.job.python),
        "-m",
        "jeanzay_kit.tune.task",
        '--task="task-${SLURM_ARRAY_TASK_ID:-0}"',
        "--launcher=srun",
        f'--stop-note="$JZK_RUN_DIR/{layout.STOP_NOTE}"',
        '--config-dir="$JZK_CONFIG_DIR"',
        '--config-name="$JZK_CONFIG_NAME"',
    ]
    return [
        "# This task's own folder in the study's: its signal note.",
        'JZK_RUN_DIR="$JZK_RUN_DIR/task-${SLURM_ARRAY_TASK_ID:-0}"',
        'mkdir -p -- "$JZK_RUN_DIR"',
        f'rm -f -- "$JZK_RUN_DIR/{layout.STOP_NOTE}"',
        "status=0",
        *signal_trap_lines(),
        " ".join(task) + " &",
        "jzk_step=$!",
        "# wait returns at each trapped signal: wait again until the task has ended",
        "while :; do",
        '  wait "$jzk_step" && status=0 || status=$?',
        '  kill -0 "$jzk_step" 2>/dev/null || break',
        "done",
        'exit "$status"',
    ]


def requeue_step_lines(spec: JobSpec, program: list[str], runs_script: bool) -> list[str]:
    """The step in the background (the batch shell takes Slurm's signals), then, after a
    failure, the restart step that requeues from the newest checkpoint."""
    marks = [f'"$JZK_RUN_DIR/{layout.STOP_NOTE}"']
    if runs_script:
        marks.insert(0, f'"$JZK_RUN_DIR/{layout.REQUEUE_MARK}"')  # a task whose script exited 3
    lines = ["status=0", "rm -f -- " + " ".join(marks), *signal_trap_lines()]
    # The step's start: a step failing before any progress is not requeued; a script
    # task's files older than it are an earlier attempt's (its resume arguments apply).
    lines.append("export JZK_STEP_START=$(date +%s)")
    lines += KILL_NOTE
    lines += [
        srun_prefix(spec) + " ".join(program) + " &",
        "jzk_step=$!",
        "# wait returns at each trapped signal: wait again until the step has ended",
        "while :; do",
        '  wait "$jzk_step" && status=0 || status=$?',
        '  kill -0 "$jzk_step" 2>/dev/null || break',
        "done",
        "# After a hang (the watchdog's exit 4), a crashed rank or a lost node: requeue",
        "# from the newest checkpoint while preemption.max_restarts allows",
    ]
    restart = in_container(
        spec,
        [
            shell_word(spec.job.python),
            "-m",
            "jeanzay_kit.node.restart_job",
            shell_word(f"--run-dir={spec.checkpoint.run_dir}"),
            '--status="$status"',
            f"--max-restarts={spec.preemption.max_restarts}",
            '--since="$JZK_STEP_START"',
        ],
    )
    if runs_script:
        restart.append("--script")  # exit 3 asks for a requeue; progress: files written
        lines.append(
            f'if [ -z "$jzk_ending" ] && {{ [ "$status" -ne 0 ] || '
            f'[ -e "$JZK_RUN_DIR/{layout.REQUEUE_MARK}" ]; }}; then'
        )
    else:
        lines.append('if [ -z "$jzk_ending" ] && [ "$status" -ne 0 ]; then')
    lines += ["  " + " ".join(restart) + " || true", "fi"]
    if spec.job.container is not None:
        lines += requeue_request_lines()
    return [*lines, 'exit "$status"']
