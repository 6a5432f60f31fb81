"""Compute nodes without internet, the pure parts (issue 68; docs/offline.md): an access
named by its library and the user's line, retries as one row, the refusal in one line;
what a job exports; the prefetch job's script."""

from __future__ import annotations

import pytest

from jeanzay_kit.launch.request import spec_of
from jeanzay_kit.offline.network_rules import Frame, describe, refusal, report_lines, unique
from jeanzay_kit.slurm.offline_env import OFFLINE_SWITCHES, offline_exports
from jeanzay_kit.slurm.prefetch_script import render_prefetch

STACK = [
    Frame("train.py", 40, "__main__", "project"),
    Frame(
        "/venv/site-packages/jeanzay_kit/train/parts.py", 9, "jeanzay_kit.train.parts", "toolkit"
    ),
    Frame("hubnet.py", 13, "hubnet", "project"),
    Frame(
        "/venv/site-packages/transformers/modeling_utils.py", 1, "transformers.modeling", "library"
    ),
    Frame(
        "/venv/site-packages/huggingface_hub/file_download.py", 2, "huggingface_hub.x", "library"
    ),
    Frame("/usr/lib/python3.11/socket.py", 3, "socket", "stdlib"),
]


def test_the_library_called_and_the_users_innermost_line_are_named() -> None:
    a = describe("huggingface.co", 443, "https://huggingface.co/gpt2/resolve/main/x", STACK)
    assert (a.library, a.user_line) == ("transformers", "hubnet.py:13")
    assert (
        a.line() == "https://huggingface.co/gpt2/resolve/main/x  by transformers, from hubnet.py:13"
    )
    stdlib_only = describe("example.org", 80, None, [STACK[0], STACK[-1]])
    assert (stdlib_only.library, stdlib_only.line()) == (
        "socket",
        "example.org:80  by socket, from train.py:40",
    )


def test_retries_and_a_lookup_before_its_connection_are_one_row() -> None:
    url = "https://huggingface.co/gpt2/resolve/main/x"
    rows = [
        describe("huggingface.co", 443, None, STACK),  # the name lookup
        describe("huggingface.co", 443, url, STACK),
        describe("huggingface.co", 443, url, STACK),  # a retry
        describe("example.org", 80, None, STACK),
    ]
    assert [(r.host, r.url) for r in unique(rows)] == [
        ("huggingface.co", url),
        ("example.org", None),
    ]


def test_the_refusal_is_one_line_naming_the_key_the_access_and_the_way_out() -> None:
    found = unique([describe("huggingface.co", 443, None, STACK), describe("a.org", 1, None, [])])
    text = refusal(found, "jeanzay_h100")
    assert "\n" not in text and text.startswith("cluster.compute_internet: jeanzay_h100")
    assert "huggingface.co (transformers, from hubnet.py:13) and 1 more" in text
    assert "jzk prefetch" in text and "--allow-network" in text
    assert report_lines([], offline=True)[0].startswith("network: no access")


@pytest.mark.parametrize(
    ("internet", "cache_dir", "user_env", "expected"),
    [
        (True, None, {}, {}),
        (True, "$WORK/.cache", {}, {"HF_HOME": "$WORK/.cache/huggingface"}),
        (False, None, {}, dict(OFFLINE_SWITCHES)),
        (False, None, {"HF_HUB_OFFLINE": "0"}, {"TRANSFORMERS_OFFLINE": "1"}),
    ],
)
def test_what_a_job_exports(
    internet: bool, cache_dir: str | None, user_env: dict[str, str], expected: dict[str, str]
) -> None:
    got = offline_exports(internet, cache_dir, user_env)
    assert expected.items() <= got.items()
    assert not set(user_env) & set(got)  # the profile's own cluster.env wins
    assert ("HF_HUB_OFFLINE" in got) == (not internet and "HF_HUB_OFFLINE" not in user_env)


def test_the_jean_zay_job_reads_its_caches_offline_and_prefetch_runs_on_prepost() -> None:
    from jeanzay_kit.slurm.sbatch import render_sbatch

    spec = spec_of(["cluster=jeanzay_h100", "cluster.account=abc@h100"], None)
    script = render_sbatch(spec)
    assert 'export HF_HOME="$WORK/.cache/huggingface"' in script
    assert "export HF_HUB_OFFLINE=1" in script
    prefetch = render_prefetch(spec, "/work/p", ["python", "-m", "x", "check", "a=b c"])
    assert "#SBATCH --partition=prepost" in prefetch and "#SBATCH --account=abc@h100" in prefetch
    assert "HF_HUB_OFFLINE" not in prefetch  # the network is on there
    assert "#SBATCH --time=02:00:00" in prefetch  # prepost's default: not in the profile
    local = spec_of(["cluster=slurm_local", "cluster.prefetch_partition=debug"], None)
    assert "#SBATCH --time=01:00:00" in render_prefetch(local, "/p", ["x"])  # debug's limit
    assert "cd /work/p\npython -m x check 'a=b c'\n" in prefetch
