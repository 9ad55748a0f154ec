#!/usr/bin/env bash
# The GPU check: on a machine with CUDA, runs every test that takes the `device` fixture
# on CUDA (every check of the conformance kit, the property tests, posteriors, networks,
# acquisitions, Thompson sampling, the Ax loop, ...; `-k cuda` selects their CUDA cases)
# on GPU_CHECK_WORKERS pytest-xdist workers where pytest-xdist is installed (default: the
# machine's cores less two, at least one; on a 16-core H200 machine 14 workers ran 96 % of
# the CUDA cases in 235 s), then a short GPU cost benchmark (benchmarks/scale_cost.py
# --device cuda: GP and deep ensemble on Ackley-20 at n = 1,000, batches of 1, 100 and
# 1,000; the first rows of scripts/gpu_benchmarks.sh, which resumes from them given the
# same folder). Both are capped so the whole check takes well under 10 minutes. Outputs go
# to the folder given as the first argument (default: $OUT, else gpu_check/): tests.log,
# tests.xml (JUnit) and scale_cost/. Without CUDA it exits with code 2 and says why.
# PYTHON picks the interpreter (default: python, which must be a CUDA build of torch with
# the package and its dev extra installed).
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
# The tests' CUDA cases (at most GPU_CHECK_TEST_SECONDS, default 5.5 minutes), then the
# cost benchmark (two measurements of at most 40 s each), which runs whatever the tests
# did: the whole check stays under 9 minutes and a slow or failing test step still yields
# the GPU timings. Workers run one torch thread each, so they do not oversubscribe the
# cores. Every test's outcome is a line of its own (-v), so a run cut short by its time cap
# still names the tests that failed (the JUnit file is only written at the end).
# pytest-benchmark, where installed, warns under xdist, and the suite turns warnings into
# errors: it is disabled (no test here uses it).
parallel=()
if "$python" -c "import xdist" 2>/dev/null; then
    cores="$(nproc 2>/dev/null || echo 3)"
    parallel=(-n "${GPU_CHECK_WORKERS:-$((cores > 3 ? cores - 2 : 1))}")
fi
no_benchmark=()
if "$python" -c "import pytest_benchmark" 2>/dev/null; then
    no_benchmark=(-p no:benchmark)
fi
set +e
OMP_NUM_THREADS=1 timeout "${GPU_CHECK_TEST_SECONDS:-330}" "$python" -m pytest -v --tb=short \
    -p no:cacheprovider "${no_benchmark[@]}" "${parallel[@]}" -k cuda tests \
    --junitxml "$out_dir/tests.xml" 2>&1 | tee "$out_dir/tests.log"
tests_status=${PIPESTATUS[0]}
timeout 120 "$python" -m benchmarks.scale_cost --device cuda --methods deep-ensemble gp \
    --points 1000 --dim 20 --large-batch 1000 --timeout 40 --out "$out_dir/scale_cost"
benchmark_status=$?
set -e
if [ "$tests_status" -ne 0 ] || [ "$benchmark_status" -ne 0 ]; then
    echo "gpu_check: failed (tests exit $tests_status, benchmark exit $benchmark_status;" \
        "124 is a timeout); results in $out_dir" >&2
    exit 1
fi
echo "gpu_check: passed; results in $out_dir"
