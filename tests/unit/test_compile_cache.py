"""Which of torch's caches keeps a run's compiled graphs (runtime/compile_cache.py)."""

from __future__ import annotations

import pytest

from jeanzay_kit.runtime.compile_cache import kind_for, users_folder


@pytest.mark.parametrize(
    ("device", "folder", "kind"),
    [
        ("cuda", None, "artifacts"),  # one file on the shared filesystem
        ("cpu", None, "folder"),  # the C++ kernels are files the artifacts lack
        ("cuda", "/scratch/me/inductor", "theirs"),
        ("cpu", "/scratch/me/inductor", "theirs"),
    ],
)
def test_the_cache_kept_by_device(device: str, folder: str | None, kind: str) -> None:
    assert kind_for(device, folder) == kind


def test_torchs_own_default_written_back_is_not_a_users_choice() -> None:
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    assert users_folder(default_cache_dir()) is None
    assert users_folder("") is None and users_folder(None) is None
    assert users_folder("/scratch/me/inductor") == "/scratch/me/inductor"
