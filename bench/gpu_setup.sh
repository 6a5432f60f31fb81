#!/usr/bin/env bash
# A GPU machine that has a CUDA torch but not this package, and no package index (the
# lent machines of docs/performance.md): a virtual environment over the system's
# site-packages (its torch, numpy, matplotlib...), the pure-Python wheels put in .whl/
# beforehand (hydra-core, omegaconf, antlr4-python3-runtime, submitit, torchdata), and the package
# itself, editable. On a machine with an index, scripts/setup.sh is the way.
#
#   python3 -m pip download --no-deps -d .whl hydra-core==1.3.8 omegaconf==2.3.1 submitit \
#       torchdata==0.11.0   # (and --python-version/--platform of that machine: device README)
#   python3 -m pip wheel --no-deps -w .whl antlr4-python3-runtime==4.9.3   # an sdist
#   bash bench/gpu_setup.sh && .venv/bin/python bench/gpu_check.py
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/jzk ]; then
    # The machine's python3 may itself live in a virtual environment (the lent GPU
    # machines: /opt/torch/.venv), whose packages a new --system-site-packages venv would
    # not see: then that environment is .venv.
    prefix=$(python3 -c 'import sys; print(sys.prefix if sys.prefix != sys.base_prefix else "")')
    if [ -n "$prefix" ]; then ln -sfn "$prefix" .venv; else python3 -m venv --system-site-packages .venv; fi
    if compgen -G ".whl/*.whl" >/dev/null; then
        .venv/bin/python -m pip install -q --no-index --no-deps .whl/*.whl
    fi
    .venv/bin/python -m pip install -q --no-index --no-deps --no-build-isolation -e .
fi
.venv/bin/python -c 'import torch, jeanzay_kit; print("torch", torch.__version__, "cuda", torch.cuda.is_available())'
