"""A PyTorch Lightning script written the way Lightning's docs teach it, knowing nothing
of jeanzay_kit: a LightningModule, a DataLoader, a Trainer with a ModelCheckpoint that
keeps `last.ckpt`, and Lightning's own Slurm handling left on (SLURMEnvironment with
auto_requeue: on SIGUSR1 it saves `hpc_ckpt_<N>.ckpt` in default_root_dir and runs
`scontrol requeue` itself).

    python train_lightning.py --max_steps 60                       # one process
    jzk train job.entry=train_lightning.py resources.gpus_per_node=2
    jzk submit cluster=jeanzay_h100 resources.nodes=2 job.entry=train_lightning.py

The only lines that know of a launcher read torchrun's variables, which jeanzay_kit sets
on every task (docs/your-own-loop.md, "PyTorch Lightning").
"""

import argparse
import glob
import hashlib
import os
import time

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Regression(L.LightningModule):
    def __init__(self, lr: float = 0.05, step_seconds: float = 0.0) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1))

    def training_step(self, batch, batch_idx):
        inputs, targets = batch
        loss = nn.functional.mse_loss(self.net(inputs), targets)
        self.log("train_loss", loss)
        time.sleep(self.hparams.step_seconds)  # pretend work: time to send a signal by hand
        return loss

    def on_train_batch_end(self, outputs, batch, batch_idx) -> None:
        if self.global_rank == 0 and self.global_step % 10 == 0:
            print(f"step {self.global_step} loss {outputs['loss'].item():.4f}", flush=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max_steps", type=int, default=60)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--step_seconds", type=float, default=0.0)
    args = parser.parse_args()

    torch.manual_seed(0)
    inputs = torch.randn(4096, 16)
    data = TensorDataset(inputs, inputs.sum(dim=1, keepdim=True))
    loader = DataLoader(data, batch_size=32, shuffle=True, num_workers=0)

    root = os.environ.get("JZK_RUN_DIR", "lightning_runs")  # the run's own directory
    devices = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    nodes = int(os.environ.get("GROUP_WORLD_SIZE", "1"))
    trainer = L.Trainer(
        accelerator="auto",
        devices=devices,
        num_nodes=nodes,
        strategy="ddp" if devices * nodes > 1 else "auto",
        max_steps=args.max_steps,
        default_root_dir=root,
        log_every_n_steps=10,
        enable_progress_bar=False,
        callbacks=[
            ModelCheckpoint(
                dirpath=os.path.join(root, "checkpoints"), save_last=True, every_n_train_steps=10
            )
        ],
    )
    # The checkpoint Lightning saved when Slurm's signal came, else the last periodic one
    # (ckpt_path="last" alone looks only at ModelCheckpoint's files).
    hpc = glob.glob(os.path.join(root, "hpc_ckpt_*.ckpt"))
    trainer.fit(Regression(args.lr, args.step_seconds), loader, ckpt_path="hpc" if hpc else "last")
    if trainer.is_global_zero:
        model = trainer.lightning_module
        weights = b"".join(p.detach().cpu().numpy().tobytes() for p in model.parameters())
        print(f"done: {trainer.global_step} steps, weights {hashlib.sha256(weights).hexdigest()}")


if __name__ == "__main__":
    main()
