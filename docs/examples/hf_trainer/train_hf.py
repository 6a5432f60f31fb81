"""A Hugging Face Trainer script written the way the Trainer's docs teach it, knowing
nothing of a cluster: a small GPT-2 built from a config (no download), a torch Dataset,
TrainingArguments with `save_steps`, and the usual resume idiom,
`trainer.train(resume_from_checkpoint=get_last_checkpoint(output_dir))`.

    python train_hf.py --output_dir out --max_steps 40                  # one process
    jzk train job.entry=train_hf.py resources.gpus_per_node=2 -- --output_dir out
    jzk submit cluster=jeanzay_h100 resources.nodes=2 job.entry=train_hf.py -- --output_dir out

Under jeanzay_kit the Trainer (Accelerate under it) finds torchrun's variables on every
task and trains data-parallel. `--save_on_stop` adds the one line that makes it save at
a preemption instead of losing the steps since its last `save_steps` checkpoint
(docs/your-own-loop.md, "Hugging Face Trainer / Accelerate").
"""

import argparse
import os
import time

import torch
from torch.utils.data import Dataset
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)
from transformers.trainer_utils import get_last_checkpoint


class RandomTokens(Dataset):
    """Token sequences from a fixed seed: the same data on every rank and every start."""

    def __init__(self, count: int, length: int, vocab: int) -> None:
        generator = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (count, length), generator=generator)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> dict:
        return {"input_ids": self.ids[index], "labels": self.ids[index]}


class Pace(TrainerCallback):
    """Pretend work per step (--step_seconds), so that a signal lands mid-run."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def on_step_end(self, args, state, control, **kwargs):
        time.sleep(self.seconds)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--output_dir", default="hf_out")
    parser.add_argument("--max_steps", type=int, default=40)
    parser.add_argument("--save_steps", type=int, default=10)
    parser.add_argument("--step_seconds", type=float, default=0.0)
    parser.add_argument("--save_on_stop", action="store_true")
    args = parser.parse_args()

    config = GPT2Config(vocab_size=64, n_positions=32, n_embd=32, n_layer=2, n_head=2)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(config)
    training = TrainingArguments(
        output_dir=args.output_dir,
        max_steps=args.max_steps,
        save_steps=args.save_steps,
        per_device_train_batch_size=4,
        learning_rate=1e-3,
        logging_steps=5,
        report_to="none",
        seed=0,
        use_cpu=not torch.cuda.is_available(),
        dataloader_num_workers=0,
    )
    trainer = Trainer(model=model, args=training, train_dataset=RandomTokens(256, 32, 64))
    trainer.add_callback(Pace(args.step_seconds))
    if args.save_on_stop:
        from jeanzay_kit.integrations.hf import SaveOnStop

        trainer.add_callback(SaveOnStop())
    last = get_last_checkpoint(args.output_dir) if os.path.isdir(args.output_dir) else None
    if last and trainer.is_world_process_zero():
        print(f"resuming from {last}", flush=True)
    trainer.train(resume_from_checkpoint=last)
    if trainer.is_world_process_zero():
        print(f"finished at step {trainer.state.global_step}", flush=True)


if __name__ == "__main__":
    main()
