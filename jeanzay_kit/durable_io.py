"""Writing files that survive a crash: the one place that fsyncs. Edge (file I/O).

- `write_synced(path, data)`: write and fsync, in place: for files inside a folder that is
  renamed into place afterwards (a checkpoint's `.tmp-step-N/`).
- `write_durably(path, data)`: write aside, fsync, rename over `path`, fsync the folder: a
  reader sees the old file or the new one, never a part (manifests).
- `fsync_dir(path)`: make a rename or a new entry in `path` durable.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def write_synced(path: Path, data: bytes) -> None:
    with Path(path).open("wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def write_durably(path: Path, data: bytes) -> None:
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    write_synced(tmp, data)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_json_lines(path: Path) -> list[dict[str, Any]]:
    """The records of a JSON-lines file the toolkit appends to (metrics.jsonl,
    endings.jsonl, attempts.jsonl): a missing file has none, and a line that is not a
    JSON object (being written, cut by a crash) is skipped."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return []
    records = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return records
