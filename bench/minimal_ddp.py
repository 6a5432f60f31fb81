"""The bare baseline of bench/bench_startup.py: the least a DDP script does before its
first step. Started by torchrun; rank 0 writes argv[1] once its first step is done.

    python -m torch.distributed.run --standalone --nproc_per_node 2 bench/minimal_ddp.py OUT
"""

import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

dist.init_process_group("gloo")
torch.manual_seed(0)
# The default example's model and batch (conf/model/mlp.yaml, conf/train/default.yaml).
layers = [torch.nn.Linear(32, 128), torch.nn.ReLU()]
for _ in range(3):
    layers += [torch.nn.Linear(128, 128), torch.nn.ReLU()]
model = DistributedDataParallel(torch.nn.Sequential(*layers, torch.nn.Linear(128, 8)))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
x, y = torch.randn(16, 32), torch.randn(16, 8)
torch.nn.functional.mse_loss(model(x), y).backward()
opt.step()
if int(os.environ["RANK"]) == 0:
    with open(sys.argv[1], "w") as f:
        f.write("first step\n")
dist.destroy_process_group()
