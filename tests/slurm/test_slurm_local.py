"""The real thing: a local Slurm cluster (scripts/slurm-local), a rendered script, sbatch.

Needs root (daemons, /etc/hosts, device nodes); CI runs as root. The cluster is started
once for the session and stopped at the end.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.slurm.cluster import JZK, PYTHON, REPO, run, sacct_states, sbatch, wait_for


@pytest.mark.slurm
@pytest.mark.timeout(300)
def test_rendered_script_runs_ddp_on_two_nodes(slurm, tmp_path: Path) -> None:
    hostile = 'ddp "2x2" #1 $(touch PWNED)'
    overrides = [
        "cluster=slurm_local",
        "resources.nodes=2",
        "resources.gpus_per_node=2",
        "resources.time=00:05:00",
        f"job.name='{hostile}'",
        "train.steps=20",
        "train.log_every=5",
        f"job.python={sys.executable}",
        f"job.entry={REPO / 'train.py'}",
        "job.entry_kind=toolkit",  # train.py is the toolkit's Hydra app
    ]
    # As a user would: render in the project directory, submit with plain sbatch from
    # another directory where nothing was prepared (no logs/ folder made by hand).
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    subprocess.run(
        [JZK, "render", "-o", str(tmp_path / "scripts"), *overrides],
        cwd=project,
        check=True,
        capture_output=True,
        timeout=120,
    )
    script = tmp_path / "scripts" / f"{hostile}.sbatch"
    sub = subprocess.run(
        ["sbatch", "--parsable", str(script)],
        cwd=elsewhere,
        env=slurm,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert sub.returncode == 0, sub.stderr
    job_id = sub.stdout.strip().split(";")[0]
    shown = subprocess.run(
        ["scontrol", "show", "job", job_id], env=slurm, capture_output=True, text=True, timeout=30
    ).stdout
    assert f"JobName={hostile}" in shown  # sbatch read the quoted #SBATCH value exactly
    wait_for(job_id, slurm)
    assert not list(tmp_path.rglob("PWNED"))
    assert sacct_states(job_id, slurm) == ["COMPLETED"]
    assert list(elsewhere.iterdir()) == []  # the job ran in the project directory

    out = (project / "logs" / f"{hostile}-{job_id}.out").read_text()
    err = (project / "logs" / f"{hostile}-{job_id}.err").read_text()
    assert "done: 20 steps" in out, err[-3000:]
    tasks = re.findall(
        r"jzk: rank (\d)/4 local_rank (\d)/2 node (\d)/2 master (\S+):(\d+) "
        r"launcher srun host (\S+)",
        out,
    )
    assert sorted((int(r), int(lr), int(n), h) for r, lr, n, _, _, h in tasks) == [
        (0, 0, 0, "n1"),
        (1, 1, 0, "n1"),
        (2, 0, 1, "n2"),
        (3, 1, 1, "n2"),
    ]
    assert {(m, int(p)) for _, _, _, m, p, _ in tasks} == {("n1", 10000 + int(job_id) % 22768)}

    # Two Slurm nodes x 2 tasks train exactly what 4 local workers train.
    local = subprocess.run(
        [
            sys.executable,
            "train.py",
            "resources.gpus_per_node=4",
            "train.steps=20",
            "train.log_every=5",
            f"hydra.run.dir={tmp_path / 'local'}",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert local.returncode == 0, local.stderr[-2000:]
    slurm_digest = re.search(r"model digest (\w+)", out).group(1)
    assert slurm_digest == (tmp_path / "local" / "model_final.sha256").read_text().strip()


def render_and_submit(overrides: list[str], tmp_path: Path, env: dict[str, str], edit=None):
    """`jzk render` a script in tmp_path (the project directory; optionally edit it), sbatch
    it from an empty directory, wait; return (id, out, err)."""
    rendered = subprocess.run(
        [JZK, "render", "-o", str(tmp_path), *overrides],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert rendered.returncode == 0, rendered.stderr
    script = next(tmp_path.glob("*.sbatch"))
    if edit:
        script.write_text(edit(script.read_text()))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(exist_ok=True)
    job_id = sbatch(script, env, elsewhere)
    wait_for(job_id, env, timeout=240)
    name = script.stem
    out = (tmp_path / "logs" / f"{name}-{job_id}.out").read_text()
    err = (tmp_path / "logs" / f"{name}-{job_id}.err").read_text()
    return job_id, out, err


@pytest.mark.slurm
@pytest.mark.timeout(300)
def test_pipeline_ddp_across_two_nodes_matches_one_process(slurm, tmp_path: Path) -> None:
    training = ["train.steps=6", "train.log_every=1", "train.eval_every=0"]
    job_id, out, err = render_and_submit(
        [
            "cluster=slurm_local",
            "parallel=pipeline_ddp",
            "parallel.pipeline_stages=2",
            "resources.nodes=2",
            "resources.gpus_per_node=2",
            "job.name=ppdp",
            *training,
            f"job.python={PYTHON}",
            f"job.entry={REPO / 'train.py'}",
            "job.entry_kind=toolkit",  # train.py is the toolkit's Hydra app
        ],
        tmp_path,
        slurm,
    )
    assert "done: 6 steps" in out, err[-3000:]
    assert sacct_states(job_id, slurm) == ["COMPLETED"]
    # 2 pipeline stages x 2 replicas, one stage per node pair: ranks on both hosts.
    hosts = set(re.findall(r"launcher srun host (\S+)", out))
    assert hosts == {"n1", "n2"}

    single = tmp_path / "single"
    local = subprocess.run(
        [PYTHON, "train.py", "resources.gpus_per_node=1", *training, f"hydra.run.dir={single}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert local.returncode == 0, local.stderr[-2000:]
    import torch

    (run_dir,) = (tmp_path / "outputs").glob("ppdp-*")  # outputs/<job.name>-<config hash>
    ours = torch.load(run_dir / "model_final.pt", weights_only=True)
    reference = torch.load(single / "model_final.pt", weights_only=True)
    assert ours.keys() == reference.keys()
    # 2 replicas averaging half batches against one full batch: the summation order
    # differs, ~1e-7 here. On a mismatch say how far, and how the job ran (its starts).
    far = {
        name: float((ours[name] - tensor).abs().max())
        for name, tensor in reference.items()
        if not torch.allclose(ours[name], tensor, rtol=1e-5, atol=1e-6)
    }
    if far:  # how the job ran: every record of it (a requeue?), its starts, both logs
        records = sacct_states(job_id, slurm, duplicates=True)
        starts = [x for x in out.splitlines() if x.startswith("jzk: start")]
        pytest.fail(
            f"max |difference| {far}; sacct -D {records}; {starts}\n"
            f"{out[-3000:]}\n--- one process:\n{local.stdout[-2000:]}"
        )
    for name, tensor in reference.items():  # shapes and dtypes too
        torch.testing.assert_close(ours[name], tensor, rtol=1e-5, atol=1e-6)


@pytest.mark.slurm
@pytest.mark.timeout(300)
def test_a_task_layout_mismatch_fails_in_seconds(slurm, tmp_path: Path) -> None:
    """A script edited to start 1 task per node for a 2 x 2 config: a clear error, no hang."""
    job_id, out, err = render_and_submit(
        [
            "cluster=slurm_local",
            "resources.nodes=2",
            "resources.gpus_per_node=2",
            "job.name=mismatch",
            f"job.python={PYTHON}",
            f"job.entry={REPO / 'train.py'}",
            "job.entry_kind=toolkit",  # train.py is the toolkit's Hydra app
        ],
        tmp_path,
        slurm,
        edit=lambda text: text.replace("--ntasks-per-node=2", "--ntasks-per-node=1"),
    )
    assert sacct_states(job_id, slurm) == ["FAILED"]
    assert "this job has 2 tasks (srun) but the config asks for world size 4" in err
    elapsed = subprocess.run(
        ["sacct", "-X", "-n", "-P", "-j", job_id, "-o", "ElapsedRaw"],
        env=slurm,
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout.split()
    assert int(elapsed[0]) < 30, f"took {elapsed[0]} s to fail"
    assert "done:" not in out


@pytest.mark.slurm
@pytest.mark.timeout(120)
def test_validate_slurm_and_submit_test_only_ask_slurm_and_submit_nothing(
    slurm, tmp_path: Path
) -> None:
    request = ["cluster=slurm_local", "resources.nodes=2", "resources.gpus_per_node=2"]
    ok = run([JZK, "validate", "--slurm", *request], slurm, tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert re.search(
        r"Slurm accepts it \(sbatch --test-only\): .*to start at .* on nodes "
        r"n\[1-2\] in partition debug",
        ok.stdout,
    ), ok.stdout
    # generic_slurm's partition "gpu" passes our profile but not this cluster: Slurm's
    # refusal, with the key to change.
    bad = run([JZK, "submit", "--test-only", "cluster=generic_slurm"], slurm, tmp_path)
    assert bad.returncode == 2, bad.stdout
    assert "Slurm refuses this request (sbatch --test-only)" in bad.stderr
    assert "partition" in bad.stderr and "HINT: change resources.partition" in bad.stderr
    assert list(tmp_path.iterdir()) == []  # nothing written, nothing submitted


@pytest.mark.slurm
@pytest.mark.timeout(240)
def test_doctor_submitted_on_two_nodes_prints_four_ranks(slurm, tmp_path: Path) -> None:
    # From a directory where nothing was prepared: the doctor needs no train.py.
    result = run(
        [
            JZK,
            "doctor",
            "--submit",
            "--wait",
            "--size-mb=1",
            "cluster=slurm_local",
            "resources.nodes=2",
            "resources.gpus_per_node=2",
            f"job.python={sys.executable}",
        ],
        slurm,
        tmp_path,
        timeout=200,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("RANK"))
    rows = [line.split() for line in lines[header + 1 : header + 5]]
    assert [r[0] for r in rows] == ["0", "1", "2", "3"]
    assert [(r[1], r[2], r[3]) for r in rows] == [
        ("n1", "0", "0"),
        ("n1", "1", "0"),
        ("n2", "0", "1"),
        ("n2", "1", "1"),
    ]  # host, local rank, node rank: two tasks on each node
    assert len({r[8] for r in rows}) == 1  # one master address and port for all
    assert "every rank answered" in result.stdout
    # The script it submitted is a plain sbatch file the user can read and submit again.
    script = (tmp_path / "logs" / "jzk-doctor.sbatch").read_text()
    assert "-m jeanzay_kit.doctor" in script and "# Re-render: jzk doctor --submit" in script
