"""When a streaming dataset resumes from its saved place, and why not. Pure.

train/stream.py saves every data-parallel rank's place in its stream with each
checkpoint; `stream_restore` decides, from loader.stream_resume and what the checkpoint
holds, whether this rank restores it, starts the stream again, or refuses the resume
with the reason and the options.
"""

from __future__ import annotations

from collections.abc import Mapping

from jeanzay_kit.errors import ResumeError


def stream_restore(
    mode: str,
    saved: Mapping[str, object] | None,
    saved_dp: int,
    *,
    dp_size: int,
    dp_rank: int,
    workers: int,
    folder: str,
    data_key: str,
) -> Mapping[str, object] | None:
    """Which saved stream position this rank resumes from: `saved`, or None to start the
    stream again (restart); ResumeError naming the reason and the options. Pure."""
    if mode == "restart":
        return None
    options = (
        "HINT: for an exact resume give the dataset state_dict() and load_state_dict() "
        "(torchdata's Stateful protocol) and resume on the same number of ranks and "
        "loader workers; loader.stream_resume=replay re-reads and drops what each rank "
        "already trained on (exact for a stream that repeats itself, costs the reading); "
        "loader.stream_resume=restart starts the stream again from its beginning (samples "
        "are seen twice); resume=never starts a fresh run"
    )
    if saved_dp != dp_size:
        raise ResumeError(
            f"{folder} was saved by {saved_dp} data-parallel rank(s), each at its own place "
            f"in its own share of the stream ({data_key}); this run has {dp_size}: a "
            f"stream's position cannot be shared out again. {options}"
        )
    if saved is None:
        raise ResumeError(
            f"{folder} holds no stream position for data-parallel rank {dp_rank} "
            f"({data_key}): it was saved by a run that did not stream. {options}"
        )
    if not saved.get("stateful") and mode == "exact":
        raise ResumeError(
            f"{data_key} is an IterableDataset without state_dict()/load_state_dict(): "
            f"where it stood at {folder} is unknown (loader.stream_resume=exact). {options}"
        )
    if saved.get("workers", -1) != workers:
        raise ResumeError(
            f"{folder} was saved with loader.num_workers={saved.get('workers')}; this run "
            f"reads the stream with {workers}: each worker holds its own part of the "
            f"stream's position ({data_key}). HINT: resume with "
            f"loader.num_workers={saved.get('workers')}, or loader.stream_resume=restart"
        )
    return saved
