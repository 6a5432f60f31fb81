"""`jzk report`'s PNGs keep a sweep's long legend inside the figure (analysis/plots.py)."""

from __future__ import annotations

import warnings
from pathlib import Path

from jeanzay_kit.analysis.plots import wrap_label, write_plots
from jeanzay_kit.analysis.summary import RunSeries


def _runs(count: int) -> list[RunSeries]:
    long = "data.path=/gpfs/scratch/project/abc/a_long_dataset_folder_name/shard-{:04d}.bin"
    return [
        RunSeries(
            f"run{i}",
            (f"optim.lr={10**-i}", long.format(i), "model.hidden=1024"),
            loss=[(1, 1.0), (2, 0.5)],
            eval_loss=[(2, 0.6)],
            throughput=[(1, 10.0)],
            step_time=[(1, 0.1)],
        )
        for i in range(count)
    ]


def test_a_long_legend_is_wrapped_and_drawn_without_a_layout_warning(tmp_path: Path) -> None:
    with warnings.catch_warnings():
        # matplotlib warns "constrained_layout not applied" when the legend squeezes the
        # plot to nothing (what happened before: the legend was cut off).
        warnings.simplefilter("error")
        written = write_plots(_runs(6), tmp_path)
    assert [p.name for p in written] == [
        "loss.png",
        "throughput.png",
        "step_time.png",
        "data_wait.png",
    ]
    from matplotlib.image import imread

    heights = [imread(p).shape[0] for p in written]
    assert heights[0] > heights[1] > 500  # the figure grows with its legend (2 lines a run)


def test_labels_are_wrapped_between_overrides() -> None:
    label = " ".join(f"key{i}=value{i}" for i in range(20))
    lines = wrap_label(label, 40).splitlines()
    assert len(lines) > 3 and all(len(line) <= 40 for line in lines)
    assert " ".join(lines) == label


def test_runs_that_report_mfu_get_an_mfu_plot_from_their_records(tmp_path: Path) -> None:
    from jeanzay_kit.analysis.summary import run_series

    records = [
        {"step": s, "loss": 1.0 / s, "samples_per_s": 10.0, "step_time_s": 0.1, "mfu": m}
        for s, m in ((10, 0.41), (20, 0.45))
    ]
    on_gpu = run_series("gpu", ("train.compile=true",), records)
    assert on_gpu.mfu == [(10, 0.41), (20, 0.45)]
    on_cpu = run_series("cpu", (), [{k: v for k, v in r.items() if k != "mfu"} for r in records])
    assert on_cpu.mfu == []
    assert "mfu.png" not in [p.name for p in write_plots([on_cpu], tmp_path / "cpu")]
    written = write_plots([on_gpu, on_cpu], tmp_path / "both")
    assert written[-1].name == "mfu.png" and written[-1].stat().st_size > 0


def test_a_run_that_logged_nothing_gets_no_empty_plots(tmp_path: Path, capsys) -> None:
    """A script run writes no metrics.jsonl records: `jzk report` says so and draws no
    empty axes (a user trial found four blank PNGs)."""
    import json

    from jeanzay_kit.cli import main

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "metrics.jsonl").write_text("")
    (tmp_path / "manifest.jsonl").write_text(
        json.dumps({"job_id": "local", "run_dir": str(run_dir), "overrides": []}) + "\n"
    )
    assert main(["report", str(tmp_path), "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "no metrics yet" in out and "(no plots)" in out, out
    assert not list((tmp_path / "out").glob("*.png"))
    assert (tmp_path / "out" / "summary.csv").is_file()


def test_a_scripts_own_run_is_reported_and_a_refused_report_leaves_nothing(
    tmp_path: Path, capsys
) -> None:
    """A script of its own writes no metrics.jsonl: `jzk report <its run dir>` reports it
    (no curves) instead of refusing the folder the hint itself asks for (a user trial);
    a report refused leaves no report/ folder behind (it made that run the newest)."""
    import subprocess
    import sys

    from jeanzay_kit.cli import main

    (tmp_path / "s.py").write_text("print('epoch 1 loss 0.5', flush=True)\n")
    run_dir = tmp_path / "outputs" / "run"
    argv = [sys.executable, "-m", "jeanzay_kit.cli", "train", "job.entry=s.py"]
    argv += ["resources.gpus_per_node=1", f"job.run_dir={run_dir}"]
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    assert not (run_dir / "metrics.jsonl").exists()
    assert main(["report", str(run_dir)]) == 0
    assert "(no plots)" in capsys.readouterr().out
    assert (run_dir / "report" / "summary.csv").is_file()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["report", str(empty)]) == 2
    assert list(empty.iterdir()) == []
