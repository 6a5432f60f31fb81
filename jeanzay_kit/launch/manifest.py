"""`manifest.jsonl`: which Slurm job runs which sweep point, and where it writes.

One JSON object per run, at least `job_id`, `overrides` and `run_dir`. The launcher
writes `<sweep_dir>/manifest.jsonl`; `jzk submit` writes `<run_dir>/manifest.jsonl`;
`jzk status` reads either. Written aside and renamed, so a reader never sees half a file.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from jeanzay_kit.durable_io import write_durably
from jeanzay_kit.errors import JzkError
from jeanzay_kit.rundir.run_directory import RunDir


def write_manifest(directory: RunDir, records: Iterable[Mapping[str, Any]]) -> Path:
    directory.root.mkdir(parents=True, exist_ok=True)
    path = directory.manifest
    text = "".join(json.dumps(dict(record), sort_keys=True) + "\n" for record in records)
    write_durably(path, text.encode())
    return path


def job_record(
    job_id: str,
    overrides: Sequence[str],
    run_dir: RunDir,
    files: tuple[Path, Path],
    cluster: str,
) -> dict[str, Any]:
    """One job's record (`jzk submit`, `jzk tune`): files is (its script, its log)."""
    import datetime

    script, log = files
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    return {
        "job_id": job_id,
        "overrides": list(overrides),
        "run_dir": str(run_dir.root.resolve()),
        "script": str(script.resolve()),
        "log": str(log.resolve()),
        "cluster": cluster,
        "submitted_at": now,
    }


def append_manifest(directory: RunDir, record: Mapping[str, Any]) -> Path:
    """Add one run (a resubmission keeps the history of earlier job ids)."""
    path = directory.manifest
    records = read_manifest(path) if path.exists() else []
    return write_manifest(directory, [*records, record])


def read_manifest(path: Path) -> list[dict[str, Any]]:
    records = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise JzkError(f"{path}:{number}: not JSON ({err})") from err
        # A null or empty id would be asked of sacct as "None" (jzk status, jzk report).
        if not isinstance(record, dict) or record.get("job_id") in (None, ""):
            raise JzkError(
                f"{path}:{number}: a manifest line needs a job_id (the id sbatch printed). "
                "HINT: jzk submit writes these lines; fix or remove the line"
            )
        records.append(record)
    return records
