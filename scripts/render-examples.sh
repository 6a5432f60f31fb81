#!/usr/bin/env bash
# Re-render the example scripts in sbatch/ from conf/. tests/unit/test_examples.py fails
# when they drift; run this when the change is intended, then review `git diff sbatch/`.
set -euo pipefail
cd "$(dirname "$0")/.."
JZK=.venv/bin/jzk
# The examples run in a placeholder project directory (#SBATCH --chdir): rendered by you,
# job.workdir defaults to the directory you render from.
export JZK_EXAMPLE_WORKDIR=/path/to/my_project
$JZK render -o sbatch job.workdir=$JZK_EXAMPLE_WORKDIR job.python=$JZK_EXAMPLE_WORKDIR/.venv/bin/python cluster=jeanzay_v100 cluster.account=myproject@v100 \
    resources.gpus_per_node=4 resources.time=20:00:00 train.global_batch_size=64 \
    job.name=v100_ddp_4gpu
$JZK render -o sbatch job.workdir=$JZK_EXAMPLE_WORKDIR job.python=$JZK_EXAMPLE_WORKDIR/.venv/bin/python cluster=jeanzay_v100_8gpu cluster.account=myproject@v100 \
    resources.gpus_per_node=8 resources.time=48:00:00 train.global_batch_size=128 \
    train.micro_batch_size=16 job.name=v100_8gpu_ddp_long
$JZK render -o sbatch job.workdir=$JZK_EXAMPLE_WORKDIR job.python=$JZK_EXAMPLE_WORKDIR/.venv/bin/python cluster=jeanzay_a100 cluster.account=myproject@a100 parallel=fsdp \
    resources.nodes=2 resources.gpus_per_node=8 resources.time=20:00:00 \
    train.global_batch_size=256 train.micro_batch_size=16 job.name=a100_fsdp_2nodes
$JZK render -o sbatch job.workdir=$JZK_EXAMPLE_WORKDIR job.python=$JZK_EXAMPLE_WORKDIR/.venv/bin/python cluster=jeanzay_h100 cluster.account=myproject@h100 \
    resources.nodes=2 resources.gpus_per_node=4 resources.time=10:00:00 \
    train.global_batch_size=256 train.micro_batch_size=16 job.name=h100_ddp_2nodes
$JZK render -o sbatch job.workdir=$JZK_EXAMPLE_WORKDIR job.python=$JZK_EXAMPLE_WORKDIR/.venv/bin/python cluster=jeanzay_h100 cluster.account=myproject@h100 \
    parallel=pipeline_ddp parallel.launcher=torchrun parallel.pipeline_stages=4 \
    parallel.microbatches=8 resources.nodes=2 resources.gpus_per_node=4 \
    resources.time=02:00:00 train.global_batch_size=64 train.micro_batch_size=16 \
    job.name=h100_pipeline_ddp_torchrun
# Every task in IDRIS's Singularity (docs/containers.md); the image's own python.
$JZK render -o sbatch job.workdir=$JZK_EXAMPLE_WORKDIR cluster=jeanzay_h100 cluster.account=myproject@h100 \
    resources.nodes=2 resources.gpus_per_node=4 resources.time=10:00:00 \
    train.global_batch_size=256 train.micro_batch_size=16 job.name=h100_container \
    'job.container.image=$SINGULARITY_ALLOWED_DIR/pytorch.sif'
