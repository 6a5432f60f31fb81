"""What each path of a project is: code, data or an output place (project/places.py),
and what a snapshot of a user's layout holds (project/snapshot.py), on real files."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from jeanzay_kit.config.schema import SCRIPT_OUTPUTS
from jeanzay_kit.project.places import (
    Limits,
    config_paths,
    is_code_name,
    output_place,
    plan_snapshot,
    resume_paths,
    resume_values,
)
from jeanzay_kit.project.snapshot import SnapshotRules, take_snapshot
from tests.helpers import write_files


@pytest.mark.parametrize(
    ("name", "place"),
    [
        ("output/train/tiny/last.pth.tar", "output"),  # timm's output/ is out*/
        ("out-shakespeare/ckpt.pt", "out-shakespeare"),
        ("outline.txt", None),  # out*/ names folders only
        ("model.pt", "model.pt"),  # *.pt at the root
        ("pretrained/w.pt", None),  # *.pt is the root's only
        ("checkpoints/e3/w.bin", "checkpoints"),
        ("lightning_logs/version_0/hparams.yaml", "lightning_logs"),
        ("data/train.bin", None),
        ("train.py", None),
    ],
)
def test_output_places_of_the_default_patterns(name: str, place: str | None) -> None:
    assert output_place(name, SCRIPT_OUTPUTS) == place


@pytest.mark.parametrize(
    ("pattern", "name", "place"),
    [
        ("results/**/ckpt", "results/a/b/ckpt/x.pt", "results/a/b/ckpt"),
        ("**/last.ckpt", "a/last.ckpt", "a/last.ckpt"),
        ("runs/", "runs/x", "runs"),
        ("runs/", "runs", None),  # a file named runs is no folder
    ],
)
def test_output_place_globs(pattern: str, name: str, place: str | None) -> None:
    assert output_place(name, [pattern]) == place


def test_named_places_and_resume_paths() -> None:
    assert output_place("results/exp/last.pth.tar", [], ["results/exp/last.pth.tar"]) == (
        "results/exp/last.pth.tar"
    )
    assert output_place("results/exp2/x", [], ["results/exp"]) is None
    assert resume_paths(["--resume", "output/train/tiny/last.pth.tar"]) == [
        "output/train/tiny/last.pth.tar"
    ]
    assert resume_paths(["--init_from=resume", "--resume_from=ckpt.pt"]) == ["ckpt.pt"]
    assert resume_values(["--resume", "/scratch/r/last.pth.tar", "--init_from=resume"]) == [
        "/scratch/r/last.pth.tar"
    ]
    assert config_paths(["--config", "exp.conf", "--lr=1", "--cfg=a/b.x"]) == ["exp.conf", "a/b.x"]


@pytest.mark.parametrize(
    ("name", "code"),
    [
        ("train.py", True),
        ("conf/exp.yaml", True),
        ("Makefile", True),
        ("data/train.bin", False),
        ("data/meta.pkl", False),
        ("pretrained/w.pt", False),
        ("img/cat.JPG", False),
        (".env", False),  # a dot file is its name, not a suffix
    ],
)
def test_code_by_name(name: str, code: bool) -> None:
    assert is_code_name(name) is code


def test_a_plan_freezes_small_code_and_leaves_data_and_outputs() -> None:
    files = [
        ("train.py", 12_000),
        ("big_generated.py", 300_000),  # past the file limit: reached in place
        ("exp.conf", 100),  # named by --config: frozen though not a code suffix
        ("data/meta.pkl", 200),
        *((f"ann/{i}.json", 10) for i in range(5)),  # more files than the folder limit
        ("output/train/tiny/last.pth.tar", 5_000_000),
    ]
    plan = plan_snapshot(files, SCRIPT_OUTPUTS, [], ["exp.conf"], Limits(256 * 1024, 4))
    assert plan.frozen == ["train.py", "exp.conf"]
    assert plan.in_place.files == 7 and plan.outputs.files == 1
    assert "2 file(s), 12.1 KB frozen in S" in plan.summary("S")


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)


def test_a_timm_style_project_freezes_kilobytes(tmp_path: Path) -> None:
    """Issue 65's layout: a script, an image folder, pretrained weights, and an output/
    left by earlier plain runs, none of it git-ignored. The snapshot holds the script
    and its config; its diff records no checkpoint."""
    files = {
        "train.py": "print('train')\n" * 800,  # 12 KB
        "args.yaml": "lr: 0.1\n",
        "output/train/tiny/last.pth.tar": "x" * 4000,
        "output/train/tiny/args.yaml": "lr: 0.1\n",
        "output/train/tiny/summary.csv": "epoch,loss\n",
        "pretrained/resnet.pth": "w" * 8000,
    }
    files.update({f"data/train/c{c}/{i}.jpg": "j" * 3000 for c in range(2) for i in range(20)})
    write_files(tmp_path, files)
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "train.py")
    _git(tmp_path, "-c", "user.name=u", "-c", "user.email=u@x", "commit", "-q", "-m", "one")
    rules = SnapshotRules(
        "logs", ["**/*.py"], "outputs/jzk-1", resume_args=("--resume", "output/x.pth.tar")
    )
    snap = take_snapshot(tmp_path, rules)
    copied = sorted(
        p.relative_to(snap.path).as_posix()
        for p in snap.path.rglob("*")
        if p.is_file() and not p.is_symlink() and ".jzk-provenance" not in p.parts
    )
    assert copied == ["args.yaml", "train.py"]
    assert snap.plan.in_place.files == 41 and snap.plan.outputs.files == 3
    assert snap.bytes < 64 * 1024, snap.bytes  # kilobytes, provenance included
    diff = (snap.path / ".jzk-provenance" / "uncommitted.diff").read_text()
    assert "args.yaml" in diff and ".jpg" not in diff and "last.pth.tar" not in diff


def test_a_package_reads_a_file_beside_its_module_from_the_snapshot(tmp_path: Path) -> None:
    """Data next to code (a tokenizer's vocab.bpe in the package) is not copied but
    linked in place beside the frozen module, so `Path(__file__).parent / "vocab.bpe"`
    finds it; a data folder with no code is one link; output places are not linked."""
    files = {
        "pkg/__init__.py": "",
        "pkg/vocab.bpe": "b" * 300_000,
        "data/train.bin": "t",
        "out/ckpt.pt": "c",
        "train.py": "import pkg\n",
    }
    write_files(tmp_path, files)
    snap = take_snapshot(tmp_path, SnapshotRules("logs", ["**/*.py", "**/*.bpe"]))
    vocab, data = snap.path / "pkg" / "vocab.bpe", snap.path / "data"
    assert vocab.is_symlink() and vocab.resolve() == (tmp_path / "pkg" / "vocab.bpe").resolve()
    assert data.is_symlink() and (data / "train.bin").read_text() == "t"
    assert not (snap.path / "out").exists() and not (snap.path / "logs").exists()
    assert not (snap.path / "pkg" / "__init__.py").is_symlink()  # the code: a copy


@pytest.mark.parametrize(
    "tree",
    [
        ["output/train/tiny/last.pth.tar", "outline.txt", "model.pt", "pretrained/w.pt"],
        ["out-shakespeare/ckpt.pt", "checkpoints/e3/w.bin", "data/train.bin", "lightning_logs/v"],
        ["runs/a/events", "wandb/x", ".hydra/config.yaml", "notes.ckpt", "src/a.ckpt"],
    ],
)
def test_the_working_directory_and_the_snapshot_see_the_same_output_places(
    tmp_path: Path, tree: list[str]
) -> None:
    """The script's working directory expands job.script_outputs on disk (node/
    script_cwd.py output_places); the snapshot matches them by name (output_place): one
    rule, so both must name the same places."""
    from jeanzay_kit.node.script_cwd import output_places

    write_files(tmp_path, dict.fromkeys(tree, "x"))
    on_disk = set(output_places(tmp_path, SCRIPT_OUTPUTS, []))
    by_name = {output_place(n, SCRIPT_OUTPUTS) for n in tree} - {None}
    assert on_disk == by_name
