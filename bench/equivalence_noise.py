"""How far apart do the parallel modes end, and how much of that is the optimizer's doing?

The equivalence tests (tests/distributed/test_equivalence.py) compare each mode with one
process up to a tolerance; this measures what that tolerance must absorb: the largest
parameter difference after the tests' 4 steps, as a fraction of the largest parameter
update, for SGD and AdamW, mlp and gpt, ddp/fsdp (4 ranks) and pipeline (2 ranks).

    .venv/bin/python bench/equivalence_noise.py [--optims sgd adamw]

Seconds to minutes on 2 cores (~40 short runs). Prints one line per case.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
COMMON = [
    "train.steps=4",
    "train.log_every=1",
    "train.eval_every=0",
    "train.global_batch_size=32",
    "train.micro_batch_size=8",
]
MODES = {
    "ddp-4": ["parallel=ddp", "resources.gpus_per_node=4"],
    "fsdp-4": ["parallel=fsdp", "resources.gpus_per_node=4"],
    "pipeline-2": ["parallel=pipeline", "resources.gpus_per_node=2", "parallel.microbatches=2"],
}
MODELS = {"mlp": [], "gpt": ["model=gpt", "data=stdlib_text", "data.max_bytes=200000"]}


def train(out: Path, name: str, *overrides: str) -> dict[str, torch.Tensor]:
    run_dir = out / name
    subprocess.run(
        [sys.executable, "train.py", *COMMON, *overrides, f"hydra.run.dir={run_dir}"],
        cwd=REPO,
        check=True,
        capture_output=True,
        timeout=600,
    )
    return torch.load(run_dir / "model_final.pt", weights_only=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--optims", nargs="+", default=["sgd", "adamw"])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        for optim in args.optims:
            for model, extra in MODELS.items():
                base = [f"optim={optim}", *extra]
                init = train(
                    out,
                    f"{optim}-{model}-init",
                    *base,
                    "train.steps=0",
                    "resources.gpus_per_node=1",
                )
                ref = train(out, f"{optim}-{model}-ref", *base, "resources.gpus_per_node=1")
                update = max((ref[k] - init[k]).abs().max().item() for k in ref)
                for mode, overrides in MODES.items():
                    got = train(out, f"{optim}-{model}-{mode}", *base, *overrides)
                    err = max((got[k] - ref[k]).abs().max().item() for k in ref)
                    print(
                        f"{optim:5} {model:3} {mode:10} largest update {update:.3e}  "
                        f"largest difference {err:.3e}  ratio {err / update:.2e}",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
