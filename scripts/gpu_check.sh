#!/usr/bin/env bash
# The GPU check: on a machine with CUDA, runs every test that takes the `device` fixture
# on CUDA (every check of the conformance kit, the property tests, posteriors, networks,
# acquisitions, Thompson sampling, ...; `-k cuda` selects their CUDA cases), then a short
# GPU cost benchmark (benchmarks/scale_cost.py --device cuda: GP and deep ensemble on
# Ackley-20 at n = 500 and 1,000). Both are capped so the whole check takes well under
# 10 minutes. Outputs go to the folder given as the first argument (default: $OUT, else
# gpu_check/): tests.log, tests.xml (JUnit) and scale_cost/. Without CUDA it exits with
# code 2 and says why. PYTHON picks the interpreter (default: python, which must be a
# CUDA build of torch with the package and its dev extra installed).
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out_dir="${1:-${OUT:-gpu_check}}"
python="${PYTHON:-python}"
cd "$repo_root"
if ! "$python" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "gpu_check: torch ($python) sees no CUDA device; this check needs a GPU" \
        "(the CPU suite is bash scripts/test.sh)." >&2
    exit 2
fi
mkdir -p "$out_dir"
"$python" -c "import torch; print('torch', torch.__version__, 'on', torch.cuda.get_device_name(0))" \
    | tee "$out_dir/device.txt"
# The tests' CUDA cases (at most 5.5 minutes), then the cost benchmark (four
# measurements of at most 30 s each), which runs whatever the tests did: the whole check
# stays under 9 minutes and a slow or failing test step still yields the GPU timings.
set +e
timeout 330 "$python" -m pytest -q -p no:cacheprovider -k cuda tests \
    --junitxml "$out_dir/tests.xml" 2>&1 | tee "$out_dir/tests.log"
tests_status=${PIPESTATUS[0]}
timeout 150 "$python" -m benchmarks.scale_cost --device cuda --methods gp deep-ensemble \
    --points 500 1000 --dim 20 --timeout 30 --out "$out_dir/scale_cost"
benchmark_status=$?
set -e
if [ "$tests_status" -ne 0 ] || [ "$benchmark_status" -ne 0 ]; then
    echo "gpu_check: failed (tests exit $tests_status, benchmark exit $benchmark_status;" \
        "124 is a timeout); results in $out_dir" >&2
    exit 1
fi
echo "gpu_check: passed; results in $out_dir"
