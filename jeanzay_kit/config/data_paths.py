"""Which values of the `data` node name files: keys called, or ending in, path, dir, root
or file(s), e.g. `data.path`, `data.train_files`, `data.cache_dir`. Pure; run.py checks
that they exist and can be read before any worker starts, so a wrong path is one line
naming the key instead of a worker's traceback."""

from __future__ import annotations

from collections.abc import Mapping

_SUFFIXES = ("path", "paths", "dir", "root", "file", "files")


def path_values(data: Mapping[str, object], prefix: str = "data") -> list[tuple[str, str]]:
    """(key, path) for every path-like value, nested nodes included; URLs are left out."""
    found = []
    for key, value in data.items():
        full = f"{prefix}.{key}"
        if isinstance(value, Mapping):
            found += path_values(value, full)
            continue
        if not str(key).lower().endswith(_SUFFIXES):
            continue
        values = value if isinstance(value, list | tuple) else [value]
        for index, item in enumerate(values):
            if isinstance(item, str) and item and "://" not in item:
                found.append((full if len(values) == 1 else f"{full}[{index}]", item))
    return found
