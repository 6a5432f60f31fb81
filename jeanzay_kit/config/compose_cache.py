"""Hydra's compositions kept between commands, so a login-node command starts fast.

Composing the config tree with Hydra takes ~0.3-0.4 s (43 files parsed and merged): most
of `jzk validate`'s start-up. The composed config, *unresolved* (`${...}` kept), is
stored under $XDG_CACHE_HOME/jeanzay_kit/compose (else ~/.cache/...), named by a digest
of everything that can change it:

- the overrides, the config name and the primary config folder;
- every YAML file of the config roots (project `conf/`, the user's folder, the package's
  or `--config-dir`'s tree): path, size and modification time;
- the code that declares the schemas and the search path (jeanzay_kit/config/*.py,
  hydra_plugins/), and the versions of hydra-core and omegaconf.

Interpolations are resolved after loading, every time: `${oc.env:...}` sees this
shell's variables, never the ones of the command that filled the cache. A failed
composition is never stored. JZK_COMPOSE_CACHE=0 turns the cache off. Edge module
(files, the environment it is given).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

ENV_SWITCH = "JZK_COMPOSE_CACHE"
KEEP = 256  # entries kept; the oldest go first (a few KB each)
_PACKAGE = Path(__file__).resolve().parents[1]
_CODE = (_PACKAGE / "config", _PACKAGE.parent / "hydra_plugins")


def cache_folder(env: Mapping[str, str]) -> Path | None:
    """Where compositions are kept, or None when the cache is off."""
    if env.get(ENV_SWITCH, "1") == "0":
        return None
    base = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME", "~")).expanduser() / ".cache")
    return Path(base) / "jeanzay_kit" / "compose"


def _stats(folder: Path, pattern: str) -> list[tuple[str, int, int]]:
    out = []
    for path in sorted(folder.rglob(pattern)) if folder.is_dir() else []:
        try:
            st = path.stat()
        except OSError:
            continue
        out.append((str(path), st.st_size, st.st_mtime_ns))
    return out


def composition_key(
    overrides: Sequence[str], config_name: str, primary: Path, roots: Sequence[Path]
) -> str:
    """The digest of all a composition depends on (the module's docstring lists it)."""
    versions = [metadata.version(name) for name in ("hydra-core", "omegaconf")]
    parts: dict[str, Any] = {
        "overrides": list(overrides),
        "config_name": config_name,
        "primary": str(primary),
        "trees": [_stats(root, "*.yaml") for root in roots],
        "code": [_stats(folder, "*.py") for folder in _CODE],
        "versions": versions,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


def load(folder: Path, key: str) -> dict[str, Any] | None:
    try:
        value = json.loads((folder / f"{key}.json").read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def store(folder: Path, key: str, composed: dict[str, Any]) -> None:
    """Written aside and renamed (a reader never sees half a file); a cache that
    cannot be written is no error."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{key}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(composed))
        os.replace(tmp, folder / f"{key}.json")
        entries = sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime_ns)
        for old in entries[:-KEEP]:
            old.unlink(missing_ok=True)
    except OSError:
        return
