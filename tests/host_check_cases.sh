#!/usr/bin/env bash
# The GPU host check's `burst bench dist` cases (scripts/host_check_common.sh: gpu_dist_cases)
# on CPU ranks: every case must be one the CLI takes and runs — a layout a strategy refuses, or
# an S that a P does not divide, fails here instead of costing a GPU session its records. At
# S 3072 (what `gpu_host_check.sh --quick` runs; the full check's 12288 differs only in S, and
# gpu_dist_cases refuses an S that is not a multiple of 24), one repeat, no warm-up.
# Usage: tests/host_check_cases.sh BURST MPIEXEC [MPIEXEC FLAGS...] (the tests' own flags, e.g.
# Open MPI's --oversubscribe --bind-to none). Exit: 0 pass, 1 fail.
set -uo pipefail
burst=${1:?burst binary}
mpiexec=${2:?mpiexec}
mpi_flags=("${@:3}")
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/host_check_common.sh
source "$root/scripts/host_check_common.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
mapfile -t cases < <(gpu_dist_cases 3072) || exit 1
((${#cases[@]} == 10)) || { echo "gpu_dist_cases gave ${#cases[@]} cases, not 10" >&2; exit 1; }
failed=0
for case in "${cases[@]}"; do
  read -r P strategy args <<<"$case"
  # shellcheck disable=SC2086  # args: the case's options, split on purpose
  if record=$(timeout 120 "$mpiexec" -n "$P" "${mpi_flags[@]}" "$burst" bench dist $args \
    --repeats 1 --warmup 0 </dev/null 2>&1) && grep -q '"strategy": *"'"$strategy"'"' <<<"$record"; then
    echo "ok   P=$P $strategy"
  else
    echo "FAIL P=$P $strategy: $args" >&2
    tail -5 <<<"$record" >&2
    failed=1
  fi
done
exit $failed
