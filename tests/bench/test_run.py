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


def assert_every_figure_measured(name: str, result: dict) -> None:
    """Each figure bench/run.py reads from the bench `name`'s result is a positive
    number (the Slurm and laptop-mode tests run those benches on their own cluster)."""
    bench = next(b for b in load_run_module().BENCHES if b.name == name)
    figures = {f.key: f.value for f in bench.figures(result)}
    assert sorted(figures) == sorted(bench.keys), figures
    assert all(isinstance(v, int | float) and v > 0 for v in figures.values()), figures


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


@pytest.mark.timeout(900)
def test_every_bench_measures_its_figures_on_tiny_sizes(tmp_path: Path) -> None:
    """Every bench script that needs no Slurm cluster, SSH server or GPU, one round of
    its smallest sizes (bench/run.py --tiny): each of its figures comes out a number, so
    none silently stops being measured (no value is judged here). bench_slurm runs on
    the Slurm tests' cluster (tests/slurm/test_bench_slurm.py), bench_remote's
    measurement on the laptop-mode tests' sshd (tests/slurm/test_remote.py, last), both
    through assert_every_figure_measured; bench_gpu* need a GPU; bench_rehearse's figures are read
    from tests/distributed/test_rehearse.py's rehearsal (a fault schedule is shared with
    its neighbours). bench_app_sweep submits through a stand-in sbatch: it runs here."""
    bench = load_run_module()
    apart = ("slurm", "remote", "rehearse")
    here = [b for b in bench.BENCHES if b.name not in apart and not b.gpu]
    docs = tmp_path / "performance.md"
    docs.write_text("# Performance\n\nIntro.\n\n## Older section\n\nkept\n")
    keys = [k for b in here for k in b.keys]
    argv = [
        sys.executable, str(RUN), "--tiny", "--only", *keys,
        "--out", str(tmp_path / "results.json"), "--docs", str(docs),
        "--png", str(tmp_path / "ratios.png"),
    ]  # fmt: skip
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=880)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["skipped"] == {}, results["skipped"]
    missing = [k for k in keys if not isinstance(results[k], int | float)]
    assert not missing, f"not measured: {missing}\n{done.stdout[-3000:]}"
    figure = results["figures"]["ttfs_vs_bare"]
    assert figure["n_rounds"] == 1 and figure["spread"] == [figure["value"]] * 2
    assert results["machine"]["cores"] and results["machine"]["torch"]
    # Written again, the generated section is replaced, not added.
    begin = docs.read_text().index(bench.BEGIN)
    section = docs.read_text()[begin:].split(bench.END)[0] + bench.END
    bench.write_docs(docs, section)
    text = docs.read_text()
    assert text.count("bench/run.py: begin") == 1 and "kept" in text and "Intro." in text
    assert "| `ttfs_vs_bare` |" in text and "| `ckpt_write_vs_dd` |" in text
    assert (tmp_path / "ratios.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_results_json_keeps_every_key_even_when_skipped() -> None:
    run = load_run_module()
    fig = run.Figure("ttfs_vs_bare", "w", 1.25, [1.2, 1.3])
    out = run.results_json([fig], {"sweep_submit_vs_hsl": "needs root"}, {"date": "d"})
    assert out["ttfs_vs_bare"] == 1.25 and out["sweep_submit_vs_hsl"] is None
    assert out["skipped"] == {"sweep_submit_vs_hsl": "needs root"}
    assert out["figures"]["ttfs_vs_bare"]["spread"] == [1.2, 1.3]


def test_merge_keeps_what_this_run_did_not_measure_marked_with_its_run() -> None:
    run = load_run_module()
    earlier = run.results_json(
        [run.Figure("a", "w", 1.1, [1.0, 1.2], ci=[1.0, 1.2]), run.Figure("b", "w", 2.0, [2.0])],
        {"c": "needs root"},
        {"date": "2026-01-01", "command": "python bench/run.py"},
    )
    kept, skipped = run.earlier_figures(json.loads(json.dumps(earlier)), {"b"})
    assert [f.key for f in kept] == ["a"] and kept[0].rounds == [1.0, 1.2]
    assert kept[0].ci == [1.0, 1.2] and skipped == {"c": "needs root"}
    assert kept[0].measured == "2026-01-01, `python bench/run.py`"
    assert "(measured 2026-01-01" in run.table(kept, {}, ["a"])[-1]


def test_paired_rounds_give_the_median_ratio_and_an_interval_around_it() -> None:
    sys.path.insert(0, str(RUN.parent))
    from common import paired

    ours = [1.01, 1.02, 1.00, 1.03, 1.01, 1.02, 1.01, 1.02]
    out = paired(ours, [1.0] * 8)
    low, high = out["ratio_ci"]
    assert out["ratios"] == ours and low <= out["ratio_median"] <= high
    assert low >= 1.0 and high <= 1.03 and out["ratio_ci_half_width"] == (high - low) / 2
    assert paired(ours, [1.0] * 8) == out  # seeded: the same rounds, the same interval


def test_lockstep_pairs_each_step_with_the_baseline_step_just_before_it(monkeypatch) -> None:
    sys.path.insert(0, str(RUN.parent))
    import common

    clock = [0.0]  # one fake clock for wall and CPU time: each side advances it by its cost
    monkeypatch.setattr(common.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(common.time, "process_time", lambda: clock[0])

    def baseline() -> None:
        clock[0] += 1.0

    lock = common.Lockstep(baseline)
    for cost in (9.0, 3.0, 2.0, 2.0, 50.0):  # the loop under test's steps; 50: its last
        lock.switch()
        clock[0] += cost
    # The last step has no switch after it, so it is not timed; the first is warm-up.
    assert lock.ours == [(9.0, 9.0), (3.0, 3.0), (2.0, 2.0), (2.0, 2.0)]
    assert len(lock.theirs) == 5
    assert lock.means(1) == ((7 / 3, 7 / 3), (1.0, 1.0))
    with pytest.raises(RuntimeError, match="no step after the 4 warm-up steps"):
        lock.means(4)


# The bench scripts bench/run.py does not run (their figures live in docs/performance.md's
# hand-written sections), each on its smallest sizes; their helpers (common.py, drift.py,
# gpt_hand_loop.py...) are imported by them. bench_gpu*.py need a GPU; bench_tune.py
# needs a Slurm cluster and the venv of Hydra's Optuna sweeper: it runs on the Slurm
# tests' cluster (NEEDS_A_CLUSTER: tests/slurm/test_bench_slurm.py).
OTHER_SCRIPTS = {
    "bench_cli.py": ["--rounds", "1"],
    "bench_flight_recorder.py": ["--calls", "100", "--rounds", "1", "--size-kb", "16"],
    "bench_status.py": ["--sizes", "10", "--rounds", "1"],
    "bench_watchdog.py": ["--steps", "3", "--warmup", "1", "--rounds", "1"],
    "bench_checkpoint_parts.py": ["--rounds", "1"],
    "bench_fit.py": ["pipeline"],
    "bench_pruning.py": ["--trials", "1", "--steps", "20"],
}


NEEDS_A_CLUSTER = {"bench_tune.py"}


def test_every_bench_script_is_run_by_a_test() -> None:
    bench = load_run_module()
    covered = {b.script for b in bench.BENCHES} | set(OTHER_SCRIPTS) | NEEDS_A_CLUSTER
    scripts = {p.name for p in RUN.parent.glob("bench_*.py")}
    assert scripts - covered == set(), "add it to OTHER_SCRIPTS or bench/run.py's BENCHES"


@pytest.mark.timeout(400)
@pytest.mark.parametrize("script", sorted(OTHER_SCRIPTS))
def test_the_other_bench_scripts_run_on_tiny_sizes(script: str, tmp_path: Path) -> None:
    argv = [sys.executable, str(RUN.parent / script), *OTHER_SCRIPTS[script]]
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=380)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert done.stdout.strip(), "it printed no figure"
