"""A GPT training script in the style of nanoGPT's train.py, knowing nothing of
jeanzay_kit: module-level code, settings as globals overridden by a config file and
`--key=value` arguments (configurator.py, exec'd from the working directory), its own
`out_dir` and `torch.save` checkpoint, a resume flag (`--init_from=resume`), torchrun's
variables for DDP, `cuda:LOCAL_RANK` when CUDA is there. It handles no signal: a time
limit kills it, and it goes on from its last checkpoint when started with
--init_from=resume. docs/your-own-loop.md ("Bring your script") runs it unchanged:

    torchrun --nproc-per-node=2 train.py config/tiny.py --max_iters=40
    jzk train job.entry=train.py job.resume_args='[--init_from=resume]' \
        resources.gpus_per_node=2 -- config/tiny.py '--out_dir=${job.run_dir}'
"""

import hashlib
import math
import os
import time

import numpy as np
import torch
from torch import nn
from torch.distributed import destroy_process_group, init_process_group
from torch.nn import functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

# -----------------------------------------------------------------------------
# default config values
out_dir = "out"
eval_interval = 20  # save a checkpoint every eval_interval iterations
log_interval = 1
init_from = "scratch"  # 'scratch' or 'resume'
dataset = "tiny"  # data/<dataset>/train.bin (uint16 tokens); random tokens without one
batch_size = 8
block_size = 32
n_layer = 2
n_head = 2
n_embd = 32
vocab_size = 256
learning_rate = 3e-3
max_iters = 100
seed = 1337
step_seconds = 0.0  # pretend work per iteration (time to send a signal by hand)
backend = "nccl"
# -----------------------------------------------------------------------------
config_keys = [
    k
    for k, v in globals().items()
    if not k.startswith("_") and isinstance(v, (int, float, bool, str))
]
exec(open("configurator.py").read())  # overrides from the command line or a config file
config = {k: globals()[k] for k in config_keys}
# -----------------------------------------------------------------------------

ddp = int(os.environ.get("RANK", -1)) != -1
if ddp:
    if not torch.cuda.is_available():
        backend = "gloo"
    init_process_group(backend=backend)
    ddp_rank = int(os.environ["RANK"])
    ddp_local_rank = int(os.environ["LOCAL_RANK"])
    ddp_world_size = int(os.environ["WORLD_SIZE"])
    device = f"cuda:{ddp_local_rank}" if torch.cuda.is_available() else "cpu"
    master_process = ddp_rank == 0
    seed_offset = ddp_rank
else:
    master_process, seed_offset, ddp_world_size = True, 0, 1
    device = "cuda" if torch.cuda.is_available() else "cpu"
if master_process:
    os.makedirs(out_dir, exist_ok=True)
torch.manual_seed(seed + seed_offset)

data_path = os.path.join("data", dataset, "train.bin")
if os.path.exists(data_path):
    data = np.memmap(data_path, dtype=np.uint16, mode="r")
else:
    data = np.random.default_rng(seed).integers(0, vocab_size, 20_000).astype(np.uint16)


def get_batch():
    ix = torch.randint(len(data) - block_size - 1, (batch_size,))
    x = torch.stack([torch.from_numpy(data[i : i + block_size].astype(np.int64)) for i in ix])
    y = torch.stack(
        [torch.from_numpy(data[i + 1 : i + 1 + block_size].astype(np.int64)) for i in ix]
    )
    return x.to(device), y.to(device)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(n_embd), nn.LayerNorm(n_embd)
        self.attn = nn.MultiheadAttention(n_embd, n_head, batch_first=True)
        self.mlp = nn.Sequential(
            nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd)
        )

    def forward(self, x):
        h = self.ln1(x)
        mask = torch.triu(torch.ones(x.size(1), x.size(1), dtype=torch.bool, device=x.device), 1)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab_size, n_embd), nn.Embedding(block_size, n_embd)
        self.blocks = nn.Sequential(*[Block() for _ in range(n_layer)])
        self.head = nn.Linear(n_embd, vocab_size)

    def forward(self, idx, targets):
        pos = torch.arange(idx.size(1), device=idx.device)
        logits = self.head(self.blocks(self.wte(idx) + self.wpe(pos)))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


iter_num = 0
model = GPT().to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate)
if init_from == "resume":
    ckpt_path = os.path.join(out_dir, "ckpt.pt")
    checkpoint = torch.load(ckpt_path, map_location=device)
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    iter_num = checkpoint["iter_num"]
    if master_process:
        print(f"resuming from {ckpt_path} at iter {iter_num}", flush=True)
if ddp:
    model = DDP(model)
raw_model = model.module if ddp else model

while iter_num < max_iters:
    lr = learning_rate * 0.5 * (1 + math.cos(math.pi * iter_num / max_iters))
    for group in optimizer.param_groups:
        group["lr"] = lr
    x, y = get_batch()
    loss = model(x, y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    iter_num += 1
    time.sleep(step_seconds)
    if master_process and iter_num % log_interval == 0:
        print(f"iter {iter_num}: loss {loss.item():.4f}, world {ddp_world_size}", flush=True)
    if master_process and (iter_num % eval_interval == 0 or iter_num == max_iters):
        checkpoint = {
            "model": raw_model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "iter_num": iter_num,
            "config": config,
        }
        torch.save(checkpoint, os.path.join(out_dir, "ckpt.pt"))
        print(f"saving checkpoint to {out_dir} at iter {iter_num}", flush=True)

if master_process:
    digest = hashlib.sha256()
    for name, tensor in sorted(raw_model.state_dict().items()):
        digest.update(name.encode() + tensor.detach().cpu().numpy().tobytes())
    print(f"done: {iter_num} iters, weights {digest.hexdigest()[:16]}", flush=True)
if ddp:
    destroy_process_group()
