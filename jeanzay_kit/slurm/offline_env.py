"""What a job exports for the libraries that download (models, datasets, weights): their
cache folders below cluster.cache_dir, where `jzk prefetch` filled them, and on compute
nodes without internet (cluster.compute_internet=false) their offline switches. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping

# The libraries' own offline switches: a forgotten access then fails at once with the
# library's message, not after a socket timeout. Sources: huggingface_hub's environment
# variables page (HF_HUB_OFFLINE, HF_HUB_DISABLE_TELEMETRY), transformers' installation
# page ("Offline mode": TRANSFORMERS_OFFLINE), datasets' loading page
# (HF_DATASETS_OFFLINE), evaluate's (HF_EVALUATE_OFFLINE).
OFFLINE_SWITCHES: Mapping[str, str] = {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_EVALUATE_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
}
# Where the libraries keep what they download, below cluster.cache_dir: the Hugging Face
# hub, datasets and timm (HF_HOME), torch.hub and torchvision's weights (TORCH_HOME),
# NLTK's data (NLTK_DATA), and the rest of what follows XDG (XDG_CACHE_HOME).
CACHE_FOLDERS: Mapping[str, str] = {
    "HF_HOME": "huggingface",
    "TORCH_HOME": "torch",
    "NLTK_DATA": "nltk_data",
    "XDG_CACHE_HOME": "",
}


def cache_env(cache_dir: str | None) -> dict[str, str]:
    """The libraries' cache folders below cache_dir (None: their own defaults, ~/.cache)."""
    if not cache_dir:
        return {}
    root = cache_dir.rstrip("/")
    return {name: f"{root}/{sub}" if sub else root for name, sub in CACHE_FOLDERS.items()}


def offline_exports(
    compute_internet: bool, cache_dir: str | None, user_env: Mapping[str, str]
) -> dict[str, str]:
    """What a training job exports for its libraries: the caches (where prefetch filled
    them) and, on nodes without internet, the offline switches; the profile's own
    cluster.env wins over both."""
    out = cache_env(cache_dir)
    if not compute_internet:
        out.update(OFFLINE_SWITCHES)
    return {k: v for k, v in out.items() if k not in user_env}
