#!/usr/bin/env bash
# Sets up the environment with everything the tests need (pytest, pytest-xdist and
# hypothesis, matplotlib for the CLI's --plot, the tutorials' Jupyter stack, Ray, Ax,
# gymnasium for the lunar lander), then runs the tests:
#
#   bash scripts/test.sh          # the full suite (unit and integration tests) on a
#                                 # pytest-xdist worker per core, with its 25 slowest tests
#   bash scripts/test.sh --fast   # the unit tests only (-m "not integration"), on a
#                                 # worker per core but one (serially on two cores)
#
# Both print the wall time at the end. Every other argument goes to pytest, after the
# defaults, so it can override them: `-n 0` runs in this process (serial), `-n 4` on four
# workers. TEST_WORKERS sets the number of workers instead (1: serial). Each worker runs
# one torch thread (tests/conftest.py).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup_env.sh" dev,plots,tutorials,ray,ax,lunar
cd "$repo_root"

# nproc counts the cores this process may use, but reports OMP_NUM_THREADS when it is set.
cores="$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc 2>/dev/null || echo 2)"
selection=()
report=(--durations=25)
workers="${TEST_WORKERS:-$cores}"
if [ "${1-}" = "--fast" ]; then
    shift
    selection=(-m "not integration")
    report=(--durations=10)
    # The fast loop leaves a core free (for the editor, or a colleague's run): on two cores
    # it runs serially, which took 97-106 s against 82-121 s on two workers there.
    workers="${TEST_WORKERS:-$((cores > 2 ? cores - 1 : 1))}"
fi
parallel=()
if [ "$workers" -gt 1 ]; then
    # loadgroup: tests marked xdist_group (the Ray ones) run one after another on one worker.
    parallel=(-n "$workers" --dist loadgroup)
fi

# One torch thread per test process, serial or not (the workers set it themselves too), so
# a test computes the same numbers either way.
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
start=$(date +%s)
status=0
python -m pytest "${parallel[@]}" "${report[@]}" "${selection[@]}" "$@" || status=$?
echo "scripts/test.sh: wall time $(($(date +%s) - start)) s (${selection[*]:-full suite}," \
    "${workers} worker(s); pytest exit code $status)" >&2
exit "$status"
