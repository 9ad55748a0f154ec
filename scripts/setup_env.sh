#!/usr/bin/env bash
# Creates the project's virtual environment ($BOTORCH_NN_UQ_VENV, default .venv) when it is
# missing, installs the CPU build of torch and the package (editable) with the extras named
# in the first argument, and puts the environment's bin/ first on PATH.
#
#   source scripts/setup_env.sh dev,plots,tutorials,ray,ax,lunar  # scripts/test.sh
#   source scripts/setup_env.sh dev,plots,tutorials,ray,ax,lunar,docs  # .ci/run
#   source scripts/setup_env.sh docs,ax                           # scripts/docs.sh
#   source scripts/setup_env.sh plots                             # scripts/optimize.sh
#
# pip runs only when something changed: a stamp file in the environment holds a hash of
# pyproject.toml and of this script (which pins torch) and the extras installed with them,
# and a request with the same hash and no new extra skips pip. A shell that has already run
# the set-up for the same environment and the same extras or more (scripts/test.sh and
# scripts/docs.sh under .ci/run) skips it altogether. Messages go to stderr, so the
# commands' own output stays clean.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${BOTORCH_NN_UQ_VENV:-$repo_root/.venv}"

# Whether every extra of the comma-separated list $1 is in the comma-separated list $2.
_botorch_nn_uq_covers() {
    local extra
    for extra in ${1//,/ }; do
        case ",$2," in
            *",$extra,"*) ;;
            *) return 1 ;;
        esac
    done
}

_botorch_nn_uq_setup() {
    local extras="$1" setup_script="$2"
    local python="${PYTHON:-python3}" stamp="$venv/.botorch-nn-uq-setup"
    local torch_requirement="torch==2.13.0" cpu_index="https://download.pytorch.org/whl/cpu"
    local fingerprint current="" installed="" merged extra
    local pip=("$venv/bin/python" -m pip install --quiet --disable-pip-version-check)

    if [ ! -x "$venv/bin/python" ]; then
        echo "setup: creating $venv" >&2
        "$python" -m venv "$venv"
        "${pip[@]}" --upgrade pip
    fi

    fingerprint="$("$venv/bin/python" - "$repo_root/pyproject.toml" "$setup_script" <<'PY'
import hashlib
import sys

digest = hashlib.sha256()
for path in sys.argv[1:]:
    with open(path, "rb") as handle:
        digest.update(handle.read())
print(digest.hexdigest())
PY
)"
    if [ -f "$stamp" ] && [ "$(sed -n 1p "$stamp")" = "$fingerprint" ]; then
        current=1
        installed="$(sed -n 2p "$stamp")"
    fi
    if [ -n "$current" ] && [ -x "$venv/bin/botorch-nn-uq" ] \
        && _botorch_nn_uq_covers "$extras" "$installed"; then
        echo "setup: $venv is up to date (pyproject.toml unchanged, extras [${installed}]" \
            "installed); no pip install" >&2
        return 0
    fi

    # torch first, so that pip does not resolve the package's torch>=2.4 to a multi-GB CUDA
    # build. A local label (2.13.0+cpu) satisfies the pin.
    if "$venv/bin/python" - "${torch_requirement#torch==}" 2>/dev/null <<'PY'
import importlib.metadata
import sys

sys.exit(importlib.metadata.version("torch").split("+")[0] != sys.argv[1])
PY
    then
        echo "setup: $torch_requirement is already installed" >&2
    elif "$venv/bin/python" - "$cpu_index/torch/" 2>/dev/null <<'PY'
# Exit 0 if the index answers within a few seconds; a thread bounds DNS look-ups too, which
# urlopen's timeout does not.
import sys
import threading
import urllib.request

answered = []


def probe() -> None:
    with urllib.request.urlopen(sys.argv[1], timeout=5):
        answered.append(True)


thread = threading.Thread(target=probe, daemon=True)
thread.start()
thread.join(8)
sys.exit(0 if answered else 1)
PY
    then
        echo "setup: installing $torch_requirement from PyTorch's CPU index ($cpu_index)" >&2
        "${pip[@]}" --index-url "$cpu_index" "$torch_requirement"
    else
        echo "setup: PyTorch's CPU index ($cpu_index) is unreachable; installing" \
            "$torch_requirement from pip's configured index" >&2
        "${pip[@]}" "$torch_requirement"
    fi

    # The extras installed before stay in the stamp, so that scripts/optimize.sh and
    # scripts/test.sh do not reinstall in turn.
    merged="$installed"
    for extra in ${extras//,/ }; do
        _botorch_nn_uq_covers "$extra" "$merged" || merged="${merged:+$merged,}$extra"
    done
    echo "setup: installing the package (editable) with extras [${merged}]" >&2
    # setuptools' "Editable installation" notice would otherwise print on every install.
    PYTHONWARNINGS="${PYTHONWARNINGS:+$PYTHONWARNINGS,}ignore:Editable installation" \
        "${pip[@]}" -e "$repo_root${merged:+[$merged]}"
    printf '%s\n%s\n' "$fingerprint" "$merged" >"$stamp"
}

if [[ "${BOTORCH_NN_UQ_SETUP_DONE-}" != "$venv|"* ]] \
    || ! _botorch_nn_uq_covers "${1-}" "${BOTORCH_NN_UQ_SETUP_DONE#*|}"; then
    _botorch_nn_uq_setup "${1-}" "$repo_root/scripts/setup_env.sh"
    export BOTORCH_NN_UQ_SETUP_DONE="$venv|${1-}"
    export PATH="$venv/bin:$PATH"
fi
unset -f _botorch_nn_uq_covers _botorch_nn_uq_setup
