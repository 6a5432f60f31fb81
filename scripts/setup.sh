#!/usr/bin/env bash
# Install everything jeanzay_kit needs on a fresh machine, idempotently:
#   - a virtual environment in .venv with the package (editable) and its dev tools;
#   - Debian's slurm-client, whose scontrol the hostlist tests compare against.
# Re-running it is cheap: pip is skipped while pyproject.toml is unchanged.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
    echo "setup: jeanzay_kit needs Python >= 3.10; set PYTHON=/path/to/python3.x" >&2
    exit 1
fi

if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
stamp=.venv/.jzk-installed
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    # torch is pinned in pyproject.toml (torch==2.13.0): the CPU wheel on these machines.
    # The grep drops pip's notes about local index folders that do not exist here.
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[dev]' \
        2> >(grep -v -e "^WARNING: Location 'file://" -e BuildBackendWarning >&2)
    echo "$want" > "$stamp"
fi

# Debian packages. Later parts of the test suite add the Slurm daemons and munge.
apt_packages=(slurm-client)
missing=()
for pkg in "${apt_packages[@]}"; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
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
        "${SUDO[@]}" apt-get update -qq
        "${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    fi
fi
