#!/usr/bin/env bash
# Install everything jeanzay_kit needs on a fresh machine, idempotently:
#   - a virtual environment in .venv with the package (editable) and its dev tools;
#   - Debian's slurm-client, whose scontrol the hostlist tests compare against, and the
#     packages of the local test cluster (scripts/slurm-local): slurmctld, slurmd, munge,
#     slurmdbd, mariadb-server;
#   - Debian's openssh-server, whose sshd the laptop-mode tests start on their own port
#     (tests/slurm/ssh_server.py) to stand for the cluster's login node.
#   Installing them starts no service where Debian's policy-rc.d forbids it (containers, CI);
#   the tests start their own daemons either way.
# Re-running it is cheap: pip is skipped while pyproject.toml is unchanged.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
    echo "setup: jeanzay_kit needs Python >= 3.10; set PYTHON=/path/to/python3.x" >&2
    exit 1
fi

# Progress on stderr, one line a stage: a fresh machine takes minutes, mostly pip.
say() { echo "setup: $*" >&2; }

if [ ! -x .venv/bin/python ]; then
    say "creating the virtual environment .venv ($("$PYTHON" --version 2>&1))"
    "$PYTHON" -m venv .venv
fi
stamp=.venv/.jzk-installed
want=$(cat pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    say "installing jeanzay_kit and its Python packages into .venv (torch from constraints.txt," \
        "submitit, hydra, optuna, lightning, transformers, wandb, mlflow-skinny, dev tools; 1-3 minutes)"
    # pyproject.toml states the torch range the package supports; constraints.txt pins
    # the tested release (torch==2.13.0, the CPU wheel on these machines: an unpinned
    # torch would pull several GB of CUDA packages).
    # The grep drops pip's notes about local index folders that do not exist here.
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -c constraints.txt \
        -e '.[dev,bench,frameworks,tune,trackers]' \
        2> >(grep -v -e "^WARNING: Location 'file://" -e BuildBackendWarning >&2)
    # torchvision, the `vision` extra (data=image_folder). PyPI's Linux wheel is built
    # for a CUDA torch: next to a CPU-only torch (these machines, CI) its compiled
    # operators cannot load and `import torchvision` fails, which would also break
    # torchmetrics' imports. There it goes aside into .venv/vision, which only the
    # image-folder test puts on its path (tests/vision_compat/sitecustomize.py says why).
    say "installing torchvision (the vision extra)"
    if .venv/bin/python -c 'import sys, torch; sys.exit(torch.version.cuda is None)'; then
        .venv/bin/python -m pip install --quiet --disable-pip-version-check -c constraints.txt \
            -e '.[vision]' 2> >(grep -v -e "^WARNING: Location 'file://" >&2)
    else
        rm -rf .venv/vision
        .venv/bin/python -m pip install --quiet --disable-pip-version-check -c constraints.txt \
            --no-deps --target .venv/vision torchvision \
            2> >(grep -v -e "^WARNING: Location 'file://" >&2)
    fi
    echo "$want" > "$stamp"
else
    say ".venv is up to date (pyproject.toml and constraints.txt unchanged)"
fi

# "installed", not merely known to dpkg (a removed package keeps a status entry).
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

# Debian packages: the client (needed), then the test cluster's daemons and the sshd of the
# laptop-mode tests (tests skip without them, so a failure there is reported, not fatal).
apt_packages=(slurm-client)
cluster_packages=(slurmctld slurmd munge slurmdbd mariadb-server openssh-server)
missing=()
for pkg in "${apt_packages[@]}"; do
    installed "$pkg" || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ]; then
        SUDO=()
    elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
        SUDO=(sudo)
    else
        SUDO=""
    fi
    if [ "${SUDO-unset}" = "" ]; then
        echo "setup: cannot install ${missing[*]} (not root, no sudo): tests that need Slurm will skip" >&2
    else
        export DEBIAN_FRONTEND=noninteractive
        say "installing Debian's ${missing[*]} (scontrol, for the hostlist tests)"
        "${SUDO[@]}" apt-get update -qq
        "${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    fi
fi
cluster_missing=()
for pkg in "${cluster_packages[@]}"; do
    installed "$pkg" || cluster_missing+=("$pkg")
done
if [ ${#cluster_missing[@]} -gt 0 ] && [ "$(id -u)" = 0 ]; then
    # Only as root: the local cluster needs root anyway.
    say "installing the local test cluster's ${cluster_missing[*]}"
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "${cluster_missing[@]}" >/dev/null 2>&1; then
        DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null 2>&1 || true
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            "${cluster_missing[@]}" >/dev/null 2>&1 ||
            echo "setup: could not install ${cluster_missing[*]}: the Slurm and ssh tests will skip" >&2
    fi
fi
say "done: .venv/bin/python train.py runs the default job; bash scripts/test.sh the tests"
