#!/usr/bin/env bash
# Sets up the environment with the `docs` extra (Sphinx) and `ax` (the Ax integration's
# module imports Ax), then builds the API reference from the docstrings into
# docs/_build/html (open docs/_build/html/index.html). Warnings are errors and every
# cross-reference must resolve (-W -n), so a broken docstring fails the build. Extra
# arguments are passed to sphinx-build.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup_env.sh" docs,ax
cd "$repo_root"
# From scratch: Sphinx repeats no warning of a page it does not rebuild, and the pages of
# removed modules would stay behind.
rm -rf docs/_build docs/_autosummary
exec python -m sphinx -W -n --keep-going -b html "$@" docs docs/_build/html
