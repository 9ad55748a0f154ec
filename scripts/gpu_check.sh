#!/usr/bin/env bash
# The GPU check, on a machine with CUDA, in three capped stages that together finish well
# inside 10 minutes (each stage runs whatever the earlier ones did):
#   1. the short check of the BO step (benchmarks/step_check.py --device cuda: first and
#      second fit and a batch of 100 at n = 10,000 and 100,000, host synchronisations of a
#      fit under torch's sync debug mode, kernels per optimizer step, 500 steps eager
#      against replayed as a CUDA graph), capped at GPU_CHECK_STEP_SECONDS (default 180);
#   2. every test that takes the `device` fixture, on CUDA (`-k cuda`: the conformance
#      kit, the property tests, posteriors, networks, training, acquisitions, Thompson
#      sampling, the Ax loop, ...), over GPU_CHECK_TESTS (default: tests), on
#      GPU_CHECK_WORKERS pytest-xdist workers where pytest-xdist is installed (default:
#      the machine's cores less two, at least one), capped at GPU_CHECK_TEST_SECONDS
#      (default 240);
#   3. the GPU cost benchmark (benchmarks/scale_cost.py --device cuda: the deep ensemble
#      and the exact GP at n = 10,000, the deep ensemble at n = 100,000, batches of 100
#      and 1,000, then one table of both), capped at GPU_CHECK_COST_SECONDS (default 150).
# Outputs go to the folder given as the first argument (default: $OUT, else gpu_check/):
# device.txt, step_check/, tests.log, tests.xml (JUnit) and scale_cost/. Without CUDA it
# exits with code 2 and says why. PYTHON picks the interpreter (default: python, which
# must be a CUDA build of torch with the package's dependencies; the package itself is
# imported from this checkout).
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
export PYTHONPATH="$repo_root${PYTHONPATH:+:$PYTHONPATH}"
"$python" -c "import torch; print('torch', torch.__version__, 'on', torch.cuda.get_device_name(0))" \
    | tee "$out_dir/device.txt"
set +e
timeout "${GPU_CHECK_STEP_SECONDS:-180}" "$python" -m benchmarks.step_check --device cuda \
    --out "$out_dir/step_check" 2>&1 | tee "$out_dir/step_check.log"
step_status=${PIPESTATUS[0]}
# Workers run one torch thread each, so they do not oversubscribe the cores. Every test's
# outcome is a line of its own (-v), so a run cut short by its time cap still names the
# tests that failed (the JUnit file is only written at the end). pytest-benchmark, where
# installed, warns under xdist, and the suite turns warnings into errors: it is disabled
# (no test here uses it).
parallel=()
if "$python" -c "import xdist" 2>/dev/null; then
    cores="$(nproc 2>/dev/null || echo 3)"
    parallel=(-n "${GPU_CHECK_WORKERS:-$((cores > 3 ? cores - 2 : 1))}")
fi
no_benchmark=()
if "$python" -c "import pytest_benchmark" 2>/dev/null; then
    no_benchmark=(-p no:benchmark)
fi
read -r -a test_paths <<<"${GPU_CHECK_TESTS:-tests}"
OMP_NUM_THREADS=1 timeout "${GPU_CHECK_TEST_SECONDS:-240}" "$python" -m pytest -v --tb=short \
    -p no:cacheprovider "${no_benchmark[@]}" "${parallel[@]}" -k cuda "${test_paths[@]}" \
    --junitxml "$out_dir/tests.xml" 2>&1 | tee "$out_dir/tests.log"
tests_status=${PIPESTATUS[0]}
timeout "${GPU_CHECK_COST_SECONDS:-150}" bash -c '
    "$1" -m benchmarks.scale_cost --device cuda --methods deep-ensemble gp --points 10000 \
        --gp-max-points 10000 --dim 20 --large-batch 1000 --timeout 60 --out "$2" &&
    "$1" -m benchmarks.scale_cost --device cuda --methods deep-ensemble --points 100000 \
        --dim 20 --large-batch 1000 --timeout 60 --out "$2" &&
    "$1" -m benchmarks.scale_cost --device cuda --methods deep-ensemble gp \
        --points 10000 100000 --gp-max-points 10000 --dim 20 --large-batch 1000 \
        --stored-only --out "$2"
' _ "$python" "$out_dir/scale_cost"
benchmark_status=$?
set -e
if [ "$step_status" -ne 0 ] || [ "$tests_status" -ne 0 ] || [ "$benchmark_status" -ne 0 ]; then
    echo "gpu_check: failed (step check exit $step_status, tests exit $tests_status," \
        "benchmark exit $benchmark_status; 124 is a timeout); results in $out_dir" >&2
    exit 1
fi
echo "gpu_check: passed; results in $out_dir"
