#!/usr/bin/env bash
# The README's test command: installs packages, builds, runs every test (unit + MPI at
# 1..4 ranks + Python). Exit code is the verdict.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
ctest --test-dir "${BURST_BUILD_DIR:-build}" --output-on-failure -j 2 "$@"
