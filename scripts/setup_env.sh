#!/usr/bin/env bash
# Creates (or refreshes) the project's virtual environment in .venv and installs the
# CPU build of torch, then the package with its test, tutorial, Ray and Ax extras.
# Sourced by scripts/optimize.sh and scripts/test.sh.
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${BOTORCH_NN_UQ_VENV:-$repo_root/.venv}"
python="${PYTHON:-python3}"
if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --upgrade pip
# Installing the pinned CPU build first keeps pip from resolving torch to a multi-GB CUDA build.
"$venv/bin/python" -m pip install --quiet "torch==2.13.0"
"$venv/bin/python" -m pip install --quiet -e "$repo_root[dev,tutorials,ray,ax]"
export PATH="$venv/bin:$PATH"
