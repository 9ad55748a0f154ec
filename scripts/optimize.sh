#!/usr/bin/env bash
# Sets up the environment (the package and matplotlib, which the CLI's --plot needs), then
# runs a Bayesian-optimisation loop from the command line.
# Any arguments are passed to `botorch-nn-uq optimize`; without arguments it runs the
# default job (Levy 5-D, MC dropout surrogate, LogEI, 30 iterations, seed 0).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup_env.sh" plots
cd "$repo_root"
# One torch thread unless OMP_NUM_THREADS says otherwise (or --threads N, which wins): a BO
# step's tensors are small, and on a busy machine more threads than free cores make the main
# job several times slower (measured on 2 cores under a test run: 45-52 s on one thread,
# 3 min 23 s-3 min 56 s on torch's default of two, with the same result).
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
if [ "$#" -eq 0 ]; then
    set -- --problem levy --dim 5 --model mc-dropout --acquisition logei --iterations 30 --seed 0
fi
exec botorch-nn-uq optimize "$@"
