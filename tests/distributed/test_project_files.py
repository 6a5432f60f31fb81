"""A script reads its project's files as they lie, whatever they are, through `jzk train
job.entry=...` on 2 local workers, in projects of their own written only against torch,
numpy and safetensors (docs/run-directories.md, "Scripts that save where they stand"):

* a nanoGPT layout: `data/<name>/train.bin` (np.memmap) and `meta.pkl`, a config file
  exec'd by the script, checkpoints in `--out_dir` (`ckpt.pt`);
* a fine-tuning layout: `pretrained/model.safetensors`, `data/train.pt`, `data/vocab.pkl`,
  saving `out/ckpt.pt`, with a stale `out/ckpt.pt` of an earlier run left in the project:
  the run starts from the pretrained weights, not from the stale checkpoint.
"""

from __future__ import annotations

import pickle
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

JZK = str(Path(sys.executable).parent / "jzk")

NANOGPT = """
import os, pickle, sys
import numpy as np
import torch
import torch.distributed as dist

out_dir, dataset, max_iters, init_from = "out", "shakespeare_char", 3, "scratch"
for arg in sys.argv[1:]:  # nanoGPT's configurator: a config file, then --key=value
    if "=" not in arg:
        exec(open(arg).read())
    else:
        key, val = arg[2:].split("=", 1)
        globals()[key] = type(globals()[key])(val)
dist.init_process_group("gloo")
rank = dist.get_rank()
data_dir = os.path.join("data", dataset)
train = np.memmap(os.path.join(data_dir, "train.bin"), dtype=np.uint16, mode="r")
with open(os.path.join(data_dir, "meta.pkl"), "rb") as f:
    vocab_size = pickle.load(f)["vocab_size"]
print(f"rank {rank}: {len(train)} tokens, vocab {vocab_size}, batch {batch_size}", flush=True)
torch.manual_seed(0)
model = torch.nn.Embedding(vocab_size, 4)
it = 0
if init_from == "resume":
    print(f"rank {rank}: resuming from {out_dir}", flush=True)
    ckpt = torch.load(os.path.join(out_dir, "ckpt.pt"), weights_only=True)
    model.load_state_dict(ckpt["model"])
    it = ckpt["iter_num"]
for it in range(it, max_iters):
    ix = torch.randint(len(train) - 1, (batch_size,))
    x = torch.from_numpy(train[ix.numpy()].astype(np.int64))
    model(x).sum().backward()
    if rank == 0:
        os.makedirs(out_dir, exist_ok=True)
        ckpt = {"model": model.state_dict(), "iter_num": it + 1}
        torch.save(ckpt, os.path.join(out_dir, "ckpt.pt"))
dist.destroy_process_group()
"""

FINETUNE = """
import os, pickle
import torch
import torch.distributed as dist
from safetensors.torch import load_file

dist.init_process_group("gloo")
rank = dist.get_rank()
model = torch.nn.Linear(4, 4)
start = 0
if os.path.exists("out/ckpt.pt"):
    ckpt = torch.load("out/ckpt.pt", weights_only=True)
    model.load_state_dict(ckpt["model"])
    start = ckpt["epoch"]
    print(f"rank {rank}: resuming from out/ckpt.pt at epoch {start}", flush=True)
else:
    model.load_state_dict(load_file("pretrained/model.safetensors"))
    print(f"rank {rank}: from pretrained/model.safetensors", flush=True)
data = torch.load("data/train.pt", weights_only=True)
with open("data/vocab.pkl", "rb") as f:
    vocab = pickle.load(f)
print(f"rank {rank}: {len(data)} samples, {len(vocab)} words, epochs {start}..3", flush=True)
dist.barrier()  # every rank has read its start before rank 0 writes out/ckpt.pt
for epoch in range(start, 3):
    model(data).sum().backward()
    if rank == 0:
        os.makedirs("out", exist_ok=True)
        torch.save({"model": model.state_dict(), "epoch": epoch + 1}, "out/ckpt.pt")
dist.destroy_process_group()
"""


def jzk_train(project: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [JZK, "train", "resources.gpus_per_node=2", *args],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=240,
    )


def run_dir_of(out: str) -> Path:
    return Path(re.search(r", run dir (.+)$", out, re.M).group(1))


@pytest.mark.timeout(300)
def test_a_nanogpt_layout_finds_its_token_files_and_writes_in_its_run(tmp_path: Path) -> None:
    project = tmp_path / "nanoGPT"
    data = project / "data" / "shakespeare_char"
    data.mkdir(parents=True)
    (project / "train.py").write_text(NANOGPT)
    (project / "config").mkdir()
    config = "batch_size = 4\nout_dir = 'out-shakespeare-char'\n"  # as nanoGPT's configs do
    (project / "config" / "train_shakespeare_char.py").write_text(config)
    # An earlier run's checkpoint, left in the project by plain torchrun.
    (project / "out-shakespeare-char").mkdir()
    stale = project / "out-shakespeare-char" / "ckpt.pt"
    torch.save({"model": torch.nn.Embedding(65, 4).state_dict(), "iter_num": 99}, stale)
    left = stale.read_bytes()
    np.arange(1000, dtype=np.uint16).__mod__(65).tofile(data / "train.bin")
    with open(data / "meta.pkl", "wb") as f:
        pickle.dump({"vocab_size": 65, "itos": {}, "stoi": {}}, f)
    args = ("config/train_shakespeare_char.py",)
    resume = "job.resume_args=[--init_from=resume]"
    run = jzk_train(project, "job.entry=train.py", resume, "--", *args)
    assert run.returncode == 0, run.stdout + run.stderr
    for rank in (0, 1):
        assert f"rank {rank}: 1000 tokens, vocab 65, batch 4" in run.stdout
    cwd = project / run_dir_of(run.stdout) / "cwd"
    assert torch.load(cwd / "out-shakespeare-char" / "ckpt.pt", weights_only=True)["iter_num"] == 3
    assert "resuming" not in run.stdout
    assert stale.read_bytes() == left  # the project's file is left as it was
    # The run again: it resumes its own checkpoint (nanoGPT's --init_from=resume).
    again = jzk_train(project, "job.entry=train.py", resume, "--", *args)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "rank 0: resuming from out-shakespeare-char" in again.stdout


@pytest.mark.timeout(300)
def test_a_fine_tuning_layout_sees_its_weights_and_data_not_a_stale_checkpoint(
    tmp_path: Path,
) -> None:
    from safetensors.torch import save_file

    project = tmp_path / "finetune"
    for folder in ("data", "pretrained", "out"):
        (project / folder).mkdir(parents=True)
    (project / "finetune.py").write_text(FINETUNE)
    save_file(torch.nn.Linear(4, 4).state_dict(), project / "pretrained" / "model.safetensors")
    torch.save(torch.randn(16, 4), project / "data" / "train.pt")
    with open(project / "data" / "vocab.pkl", "wb") as f:
        pickle.dump(["a", "b", "c"], f)
    stale = {"model": torch.nn.Linear(4, 4).state_dict(), "epoch": 7}
    torch.save(stale, project / "out" / "ckpt.pt")
    left = (project / "out" / "ckpt.pt").read_bytes()
    run = jzk_train(project, "job.entry=finetune.py")
    assert run.returncode == 0, run.stdout + run.stderr
    for rank in (0, 1):
        assert f"rank {rank}: from pretrained/model.safetensors" in run.stdout
        assert f"rank {rank}: 16 samples, 3 words, epochs 0..3" in run.stdout
    assert "out/" in run.stderr and "job.script_outputs" in run.stderr  # said, not silent
    cwd = project / run_dir_of(run.stdout) / "cwd"
    assert torch.load(cwd / "out" / "ckpt.pt", weights_only=True)["epoch"] == 3
    assert (project / "out" / "ckpt.pt").read_bytes() == left
