#!/usr/bin/env bash
# Sets up the environment with everything the tests need (pytest and hypothesis,
# matplotlib for the CLI's --plot, the tutorials' Jupyter stack, Ray, Ax, gymnasium for the
# lunar lander), then runs the full test suite (unit tests, conformance kit, tutorials and
# benchmark smoke runs). Extra arguments are passed to pytest.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup_env.sh" dev,plots,tutorials,ray,ax,lunar
cd "$repo_root"
exec python -m pytest "$@"
