#!/usr/bin/env bash
# Issue 46's run on one lent GPU, in one call (docs/performance.md, "GPT-2 124M on one
# GPU"): the MFU figure and the toolkit / hand-written loop ratio with the profile of the
# hand loop, auto micro-batch, the process group and async checkpoints below the loop,
# and a bf16 run cut by SIGUSR1 and resumed. Needs the wheels of bench/gpu_setup.sh in
# .whl/. Everything lands in $OUT (else bench/results/gpu46).
#
#   bash bench/gpu_issue46.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench/results/gpu46}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
{
    date -u +%FT%TZ
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
} | tee "$OUT/device.txt"
bash bench/gpu_setup.sh 2>&1 | tail -2 | tee -a "$OUT/device.txt"
py=.venv/bin/python
# Should the editable install fail there, the checks that need no `jzk` still run.
$py -c 'import jeanzay_kit' 2>/dev/null || export PYTHONPATH=$PWD
echo "== GPT-2 124M: toolkit loop vs hand-written loop"
timeout 300 $py bench/bench_gpu_vs_hand.py --rounds 1 --profile 3 2>&1 | tee "$OUT/vs_hand.log" | grep -v '^{'
cp bench/results/gpu_vs_hand.json "$OUT/" 2>/dev/null
echo "== process group and checkpoints"
timeout 90 $py bench/gpu_path.py --out "$OUT" 2>&1 | tail -4
echo "== bf16: straight, cut by SIGUSR1, resumed"
timeout 170 $py bench/gpu_check.py --out "$OUT" --only images_bf16 2>&1 | tail -4
