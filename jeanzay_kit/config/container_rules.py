"""job.container: the image every task runs in, checked before anything is submitted. Pure.

What is checked here is what would otherwise fail on the nodes, after the wait in the
queue: a `$(...)` the node would run, a bind spec the runtime splits wrongly, an option
that empties the environment the tasks need (SLURM_* and JZK_* variables), a profile that
runs no Slurm job. The render side is slurm/container.py.
"""

from __future__ import annotations

from collections.abc import Mapping

from jeanzay_kit.config.clusters import ClusterProfile
from jeanzay_kit.config.collector import CONTROL, Collector, only_variables
from jeanzay_kit.config.sections import ContainerSettings

RUNTIMES = ("singularity", "apptainer")
# Options that start the tasks without the host's environment: no SLURM_* variable, no
# rank, no JZK_* setting inside (singularity(1), apptainer(1): exec --cleanenv, -e,
# --containall, -C).
_EMPTY_ENV = ("--cleanenv", "-e", "--containall", "-C")


def check_container(
    c: Collector, node: Mapping[str, object] | None, cluster: ClusterProfile, pytorch_module: bool
) -> ContainerSettings | None:
    """job.container.*: None when no image is set (the other keys then do nothing)."""
    node = node or {}
    image = node.get("image")
    if image is None or image == "":
        return None
    key = "job.container.image"
    if not isinstance(image, str) or not only_variables(image):
        c.add(
            key,
            image,
            "must be a path where only $NAME or ${NAME} is expanded (on the node)",
            "use e.g. job.container.image='$SINGULARITY_ALLOWED_DIR/pytorch.sif'",
        )
    elif not image.endswith(".sif"):
        c.add(
            key,
            image,
            "is not a .sif image (a docker:// or library:// URI would be pulled by every "
            "task of every node)",
            "build it once: apptainer build pytorch.sif docker://<image>, then "
            "job.container.image=/path/to/pytorch.sif",
        )
    if not cluster.is_slurm:
        c.add(
            key,
            image,
            f"is for the tasks of a Slurm job; cluster={cluster.name} starts its workers "
            "on this machine",
            "run the toolkit inside the container yourself (singularity exec img.sif jzk "
            "train ...), or use a Slurm profile",
        )
    if pytorch_module:
        c.add(
            "cluster.pytorch_module",
            "set",
            "and job.container.image both bring torch: the module would load outside the "
            "container and go unused",
            "set cluster.pytorch_module=null with a container",
        )
    runtime = node.get("runtime") or cluster.container_runtime
    if runtime not in RUNTIMES:
        c.add(
            "job.container.runtime",
            runtime,
            f"is not one of {', '.join(RUNTIMES)}",
            "use job.container.runtime=apptainer (or singularity)",
        )
    binds = _binds(c, node.get("binds"))
    options = _options(c, node.get("options"))
    return ContainerSettings(image=str(image), runtime=str(runtime), binds=binds, options=options)


def _strings(c: Collector, key: str, value: object, example: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        c.add(key, value, "must be a list of strings", f"use e.g. {key}='{example}'")
        return ()
    return tuple(value)


def _binds(c: Collector, value: object) -> tuple[str, ...]:
    """Bind specs `src[:dest[:ro|rw]]`; the runtime splits a list at commas."""
    binds = _strings(c, "job.container.binds", value, '["/data:/data:ro"]')
    for spec in binds:
        if not spec or "," in spec or not only_variables(spec) or len(spec.split(":")) > 3:
            c.add(
                "job.container.binds",
                spec,
                "is not one bind spec src[:dest[:ro|rw]] (no comma; only $NAME expanded)",
                "give one item per folder, e.g. job.container.binds='[\"/data:/data:ro\"]'",
            )
    return binds


def _options(c: Collector, value: object) -> tuple[str, ...]:
    options = _strings(c, "job.container.options", value, '["--writable-tmpfs"]')
    for option in options:
        name = option.split("=", 1)[0]
        if CONTROL.search(option):
            c.add("job.container.options", option, "contains a control character")
        elif name in _EMPTY_ENV:
            c.add(
                "job.container.options",
                option,
                "starts the tasks without the job's environment (SLURM_* variables, the "
                "rank, the toolkit's settings)",
                "leave it out; set what the tasks need with cluster.env or --env=NAME=value",
            )
    return options
