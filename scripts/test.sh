#!/usr/bin/env bash
# Sets up the environment, then runs the full test suite (unit tests, conformance kit,
# tutorials and benchmark smoke runs). Extra arguments are passed to pytest.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup_env.sh"
cd "$repo_root"
exec python -m pytest "$@"
