"""The container every task runs in (job.container), as lines of the batch script. Pure.

The batch shell builds one bash array, `jzk_container`: `<runtime> exec [--nv] --bind ...
[options] <image>`, and the training step runs `srun ... "${jzk_container[@]}" python ...`,
so every task starts inside the image. What talks to Slurm stays outside: the batch shell
itself, which traps the signals and runs `scontrol requeue` when a task asks for it by
writing the job id to $JZK_REQUEUE_FILE (there is no scontrol, munge socket or Slurm
library in an image: Lightning#21404 is that failure).

Binds. The runtime mounts a folder only when asked (and fails on a missing source), so
the script binds the folders the job reads and writes: the profile's (Jean Zay: $WORK,
$SCRATCH, $DSDIR), the working directory, and the absolute paths of the run directory, the
logs, the code snapshot and the data; each default that this node lacks is left out.
job.container.binds are the user's and always passed. Only `$NAME` is expanded in the
image and the binds (config/container_rules.py refuses anything else).
"""

from __future__ import annotations

from collections.abc import Iterable

from jeanzay_kit.config.data_paths import path_values
from jeanzay_kit.config.spec import JobSpec
from jeanzay_kit.errors import RenderError
from jeanzay_kit.slurm.shell_words import expanding_word, shell_word

# Where a task asks the batch shell for a requeue (ending/requeue.py requeue_job).
REQUEUE_REQUEST = ".jzk-requeue-request"
CONTAINER_WORD = '"${jzk_container[@]}"'


def default_binds(spec: JobSpec, workdir: str | None, code_dir: str | None) -> list[str]:
    """The folders the tasks need, as bind sources: the profile's, then the job's own
    absolute folders (relative ones are under the working directory, bound itself)."""
    own = [workdir or "$PWD", spec.checkpoint.run_dir, spec.job.log_dir, code_dir or ""]
    own += [path for _key, path in path_values(spec.data)]
    absolute = [p.rstrip("/") or "/" for p in own if p.startswith(("/", "$PWD"))]
    return _unique([*spec.cluster.container_binds, *absolute])


def gpu_options(spec: JobSpec) -> list[str]:
    """`--nv` (the host's GPU driver in the image) when the job's tasks have GPUs."""
    return ["--nv"] if spec.cluster.device != "cpu" and spec.resources.gpus_per_node > 0 else []


def container_lines(spec: JobSpec, workdir: str | None, code_dir: str | None) -> list[str]:
    """The lines that define `jzk_container` and $JZK_REQUEUE_FILE (after $JZK_RUN_DIR)."""
    container = spec.job.container
    assert container is not None
    defaults = default_binds(spec, workdir, code_dir)
    for path in defaults:
        if "," in path or ":" in path.replace("$PWD", ""):
            raise RenderError(
                f"cannot bind {path!r} into the container: the runtime splits bind specs "
                "at ',' and ':'. HINT: move the folder to a path without them"
            )
    words = [
        shell_word(container.runtime),
        "exec",
        *gpu_options(spec),
        '"${jzk_binds[@]}"',
        *(f"--bind={expanding_word(b)}" for b in container.binds),
        *(shell_word(o) for o in container.options),
        expanding_word(container.image),
    ]
    return [
        f"# Every task runs in {container.runtime}'s image (job.container); this shell, which",
        "# takes Slurm's signals and runs scontrol, stays outside it. The folders the job",
        "# uses are bound; one this node lacks (or an unset variable) is left out.",
        "jzk_binds=()",
        "for jzk_bind in " + " ".join(expanding_word(p) for p in defaults) + "; do",
        '  if [ -n "$jzk_bind" ] && [ -e "$jzk_bind" ]; then jzk_binds+=("--bind=$jzk_bind"); fi',
        "done",
        "jzk_container=(" + " ".join(words) + ")",
        "# A task asks for a requeue here (there is no scontrol in the image)",
        f'export JZK_REQUEUE_FILE="$JZK_RUN_DIR/{REQUEUE_REQUEST}"',
        'rm -f -- "$JZK_REQUEUE_FILE"',
    ]


def requeue_request_lines() -> list[str]:
    """After the step (and the restart decision): the requeue a task asked for."""
    return [
        "# A requeue asked from inside the container: scontrol runs here, outside it",
        'if [ -s "$JZK_REQUEUE_FILE" ]; then',
        '  jzk_requeue="$(cat -- "$JZK_REQUEUE_FILE")"',
        '  rm -f -- "$JZK_REQUEUE_FILE"',
        '  if scontrol requeue "$jzk_requeue"; then',
        '    echo "jzk: requeued job $jzk_requeue (asked from inside the container)"',
        "  else",
        '    echo "jzk: could not requeue job $jzk_requeue: resubmit it to resume" >&2',
        "  fi",
        "fi",
    ]


def _unique(items: Iterable[str]) -> list[str]:
    seen: dict[str, None] = {}
    for item in items:
        if item:
            seen.setdefault(item, None)
    return list(seen)
