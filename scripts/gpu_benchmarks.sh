#!/usr/bin/env bash
# The GPU rows of benchmarks/docs/protocol-6-scale.md, on one CUDA device, in about 6 minutes:
# each stage is capped, and a stage that runs out of time keeps what it measured (the runners
# store every finished measurement, and a repeated command resumes from them).
#
#   1. cost of a BO step (benchmarks/scale_cost.py --device cuda, Ackley-20, q = 1, 100 and
#      1,000): the deep ensemble, BoTorch's GP and GP-TuRBO-1's GP at n = 1,000 and 10,000;
#      the deep ensemble at n = 100,000; both GPs at n = 20,000 and 40,000 (where the exact
#      GP still fits in the card's memory, or runs past its time); MC dropout, NEON and
#      VBLL at n = 1,000 to 100,000;
#   2. the UCI fits (benchmarks/uci_regression.py --device cuda): the deep ensemble on
#      splits 0-2 of the four data sets (the CPU table's settings), then on all 20 splits.
#
# Usage: bash scripts/gpu_benchmarks.sh [OUT_DIR [UCI_DATA_DIR]]
# OUT_DIR defaults to $OUT, else gpu_benchmarks/; UCI_DATA_DIR to ../shared/data/uci (the
# UCI stage is skipped with a message where it is absent). PYTHON picks the interpreter
# (default: python, a CUDA build of torch with the package installed). Without CUDA it
# exits with code 2. It exits 1 if a stage failed for another reason than its time cap.
set -uo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out_dir="${1:-${OUT:-gpu_benchmarks}}"
uci_dir="${2:-../shared/data/uci}"
python="${PYTHON:-python}"
cd "$repo_root"
if ! "$python" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "gpu_benchmarks: torch ($python) sees no CUDA device; these benchmarks need a GPU." >&2
    exit 2
fi
mkdir -p "$out_dir"
"$python" -c "import torch; print('torch', torch.__version__, 'on', torch.cuda.get_device_name(0))" \
    | tee "$out_dir/device.txt"
failed=0

# stage SECONDS ARGS...: one capped runner invocation; a time-out (124) is not a failure.
stage() {
    local seconds="$1"
    shift
    echo "gpu_benchmarks: $* (at most $seconds s)"
    timeout "$seconds" "$python" -m "$@"
    local status=$?
    if [ "$status" -eq 124 ]; then
        # A measurement's own process outlives its runner's: it must not load the GPU
        # under the next stage.
        pkill -f "multiprocessing.spawn" || true
        echo "gpu_benchmarks: stopped after $seconds s: $*" >&2
    elif [ "$status" -ne 0 ]; then
        echo "gpu_benchmarks: exit $status: $*" >&2
        failed=1
    fi
}

cost=(benchmarks.scale_cost --device cuda --large-batch 1000 --out "$out_dir/scale_cost")
stage 110 "${cost[@]}" --methods deep-ensemble gp gp-turbo --points 1000 10000 \
    --gp-max-points 10000 --timeout 45
stage 45 "${cost[@]}" --methods deep-ensemble --points 100000 --timeout 40
stage 80 "${cost[@]}" --methods gp-turbo gp --points 20000 40000 --gp-max-points 40000 \
    --timeout 35
stage 100 "${cost[@]}" --methods mc-dropout neon vbll --points 1000 10000 100000 --timeout 30
# The table and figure of every row measured above.
stage 60 "${cost[@]}" --methods deep-ensemble mc-dropout neon vbll gp gp-turbo \
    --points 1000 10000 20000 40000 100000 --stored-only

if [ -d "$uci_dir" ]; then
    uci=(benchmarks.uci_regression --device cuda --models deep-ensemble
        --datasets boston concrete energy yacht --data-dir "$uci_dir" --jobs 1
        --out "$out_dir/uci")
    stage 60 "${uci[@]}" --splits 3
    stage 60 "${uci[@]}" --splits 20
else
    echo "gpu_benchmarks: no UCI data in $uci_dir; the UCI stage is skipped." >&2
fi

if [ "$failed" -ne 0 ]; then
    echo "gpu_benchmarks: a stage failed; results in $out_dir" >&2
    exit 1
fi
echo "gpu_benchmarks: done; results in $out_dir"
