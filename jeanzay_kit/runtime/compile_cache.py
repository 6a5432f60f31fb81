"""torch.compile's caches kept with the run, so a requeued compiled run starts warm.

A requeued job lands on any node, often with an empty /tmp (Jean Zay's TMPDIR is the
job's own), where torch keeps its caches by default (`<tempdir>/torchinductor_<user>`):
without this, every start compiles from scratch on every rank. Two of torch's own
mechanisms, chosen by the device:

- CUDA: torch's portable cache artifacts ("mega-cache",
  `torch.compiler.save_cache_artifacts` / `load_cache_artifacts`): Inductor's FX graphs
  with their Triton kernels bundled in, AOTAutograd's entries, autotuning and PGO
  records, serialized to ONE file in the run directory (`compile_cache.bin`, written
  aside and renamed by rank 0), and loaded by every rank at start into the node's local
  cache. One file read per rank instead of hundreds of small ones: what a parallel
  filesystem (GPFS on Jean Zay) serves well, and no two nodes writing one folder.
- CPU: Inductor's C++ kernels are shared objects the artifacts do not carry (measured:
  a start with the artifacts loaded but an empty cache folder still compiled 21.5 s of
  a cold 25.1 s), so the cache folder itself is kept in the run directory
  (`compile_cache/`, torch's TORCHINDUCTOR_CACHE_DIR; Triton's folder sits inside it),
  with Inductor's precompiled header, which torch keeps in the node's default folder.

A TORCHINDUCTOR_CACHE_DIR the user set is theirs: it is kept, and only the artifacts
file is added. The cache hits and misses of the compiling step go to metrics.jsonl
beside its time (`compile_cache`, `compile_hits`, `compile_misses`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping
from dataclasses import dataclass
from pathlib import Path

from jeanzay_kit.durable_io import write_durably
from jeanzay_kit.rundir.run_directory import RunDir

# torch's counters (torch._dynamo.utils.counters) of the caches a compile consults.
HIT_COUNTERS = (("inductor", "fxgraph_cache_hit"), ("aot_autograd", "autograd_cache_hit"))
MISS_COUNTERS = (("inductor", "fxgraph_cache_miss"), ("aot_autograd", "autograd_cache_miss"))
ENV_KEY = "TORCHINDUCTOR_CACHE_DIR"


def kind_for(device_type: str, user_folder: str | None) -> str:
    """What keeps the caches: "artifacts" (one file) on CUDA, "folder" on the CPU (its
    C++ kernels are files the artifacts lack), "theirs" where the user named a folder."""
    if user_folder:
        return "theirs"
    return "artifacts" if device_type == "cuda" else "folder"


def users_folder(value: str | None) -> str | None:
    """TORCHINDUCTOR_CACHE_DIR where the user chose it: torch writes its default back into
    the variable once it has used it (a parent process's import passes it on), and that
    is not a choice."""
    if not value:
        return None
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    return None if os.path.abspath(value) == os.path.abspath(default_cache_dir()) else value


@dataclass
class CompileCache:
    """One rank's view of the run's kept compiler caches."""

    run: RunDir
    kind: str  # "artifacts" | "folder" | "theirs"
    restored: int  # entries found at start: 0 is a cold start
    saved_bytes: int = 0  # the size of the artifacts file this rank last wrote

    @property
    def warm(self) -> bool:
        return self.restored > 0

    def keep(self, is_main: bool) -> None:
        """Rank 0 writes the artifacts compiled so far (after the compiling step and at
        the attempt's end, when later compiles, e.g. evaluation's, added some). The
        folder kinds keep themselves: Inductor writes them as it compiles."""
        if not is_main or self.kind == "folder":
            return
        import torch

        saved = torch.compiler.save_cache_artifacts()
        if saved is None or len(saved[0]) <= self.saved_bytes:
            return  # nothing compiled, or nothing new since the last write
        try:
            write_durably(self.run.compile_artifacts, saved[0])
            self.saved_bytes = len(saved[0])
        except OSError as err:  # a cache is never worth stopping training for
            print(f"WARNING: could not keep torch.compile's caches: {err}", file=sys.stderr)


def open_cache(
    run_dir: RunDir, device_type: str, env: MutableMapping[str, str] | None = None
) -> CompileCache:
    """Before the first compile of this process: point Inductor at the run's folder
    (CPU), or load the run's artifacts into the node's local cache (CUDA). env: this
    process's environment (os.environ), which torch reads its cache folder from."""
    env = os.environ if env is None else env
    run = run_dir
    kind = kind_for(device_type, users_folder(env.get(ENV_KEY)))
    if kind == "folder":
        # torch reads its cache folder from this variable only (and writes it back
        # itself, torch/_inductor/runtime/cache_dir_utils.py): set once, before compiling.
        run.compile_cache.mkdir(parents=True, exist_ok=True)
        env[ENV_KEY] = str(run.compile_cache.resolve())
        _keep_headers(run.compile_cache.resolve())
        restored = sum(1 for _ in (run.compile_cache / "fxgraph").glob("*/*"))
        return CompileCache(run, kind, restored)
    return CompileCache(run, kind, _load_artifacts(run))


def _keep_headers(folder: Path) -> None:
    """Inductor's precompiled C++ header goes to the node's default cache folder whatever
    TORCHINDUCTOR_CACHE_DIR says (torch/_inductor/codecache.py `_HEADER_DIR`, fixed at
    import), and every new process rebuilds it there before it looks for its cached
    kernels: 12 of a warm start's 16 s on this project's CPU machine. Kept with the run
    too; where a torch without those names runs, nothing changes."""
    from torch._inductor import codecache

    if hasattr(codecache, "_HEADER_DIR") and hasattr(codecache, "_HEADER_LOCK_DIR"):
        headers = folder / "precompiled_headers"
        codecache._HEADER_DIR = str(headers)
        codecache._HEADER_LOCK_DIR = str(headers / "locks")


def _load_artifacts(run: RunDir) -> int:
    """The kept artifacts loaded into the local caches; how many (0: none, or unusable)."""
    try:
        data = run.compile_artifacts.read_bytes()
    except OSError:
        return 0
    import torch

    try:
        info = torch.compiler.load_cache_artifacts(data)
    except Exception as err:  # another torch's artifacts: compile cold, say why
        print(f"note: torch.compile's kept caches not used ({err}); compiling cold", flush=True)
        return 0
    return sum(len(v) for v in info.artifacts.values()) if info is not None else 0


def cache_counts() -> tuple[int, int]:
    """(hits, misses) of Inductor's FX graph cache and AOTAutograd's cache so far in
    this process, from torch's own counters."""
    from torch._dynamo.utils import counters

    hits = sum(counters[group][name] for group, name in HIT_COUNTERS)
    misses = sum(counters[group][name] for group, name in MISS_COUNTERS)
    return hits, misses
