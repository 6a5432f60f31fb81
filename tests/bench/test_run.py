"""bench/run.py as CI runs it: its help, and one tiny figure end to end (no timings are
asserted: figures live in bench/results.json and docs/performance.md, not in tests)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RUN = REPO / "bench" / "run.py"


def load_run_module():
    spec = importlib.util.spec_from_file_location("bench_run", RUN)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(RUN.parent))
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_help_names_the_modes() -> None:
    done = subprocess.run([sys.executable, str(RUN), "--help"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "--quick" in done.stdout and "--only" in done.stdout


def test_an_unknown_figure_is_refused_naming_the_known_ones() -> None:
    done = subprocess.run(
        [sys.executable, str(RUN), "--only", "nope"], capture_output=True, text=True
    )
    assert done.returncode == 2
    assert "unknown figure(s) nope" in done.stderr and "ttfs_vs_bare" in done.stderr


@pytest.mark.timeout(300)
def test_one_tiny_figure_end_to_end(tmp_path: Path) -> None:
    docs = tmp_path / "performance.md"
    docs.write_text("# Performance\n\nIntro.\n\n## Older section\n\nkept\n")
    argv = [
        sys.executable, str(RUN), "--only", "ttfs_vs_bare", "--rounds", "1",
        "--out", str(tmp_path / "results.json"), "--docs", str(docs),
        "--png", str(tmp_path / "ratios.png"),
    ]  # fmt: skip
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    # Written again, the generated section is replaced, not added (run twice before: a
    # second bench run for what write_docs alone decides; suite time).
    bench = load_run_module()
    begin = docs.read_text().index(bench.BEGIN)
    section = docs.read_text()[begin:].split(bench.END)[0] + bench.END
    bench.write_docs(docs, section)
    results = json.loads((tmp_path / "results.json").read_text())
    assert isinstance(results["ttfs_vs_bare"], float) and results["ttfs_vs_bare"] > 0
    figure = results["figures"]["ttfs_vs_bare"]
    assert figure["n_rounds"] == 1 and figure["spread"] == [figure["value"]] * 2
    assert results["machine"]["cores"] and results["machine"]["torch"]
    text = docs.read_text()
    assert text.count("bench/run.py: begin") == 1 and "kept" in text and "Intro." in text
    assert "| `ttfs_vs_bare` |" in text
    if not results["machine"]["gpu"]:
        assert "no GPU: skipped" in text
    assert (tmp_path / "ratios.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_results_json_keeps_every_key_even_when_skipped() -> None:
    run = load_run_module()
    fig = run.Figure("ttfs_vs_bare", "w", 1.25, [1.2, 1.3])
    out = run.results_json([fig], {"sweep_submit_vs_hsl": "needs root"}, {"date": "d"})
    assert out["ttfs_vs_bare"] == 1.25 and out["sweep_submit_vs_hsl"] is None
    assert out["skipped"] == {"sweep_submit_vs_hsl": "needs root"}
    assert out["figures"]["ttfs_vs_bare"]["spread"] == [1.2, 1.3]
