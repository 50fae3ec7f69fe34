#!/usr/bin/env bash
# Configures and builds burst into ${BURST_BUILD_DIR:-build} (Release, Ninja).
# Usage: scripts/build.sh [TARGET...]: only those targets (and what they need), e.g.
# `scripts/build.sh burst_cli burst_lm_cli kjv_prepare` (scripts/run_main.sh); no target: all
# of them, tests and the Python module included (scripts/run_tests.sh).
# Extra CMake arguments come from BURST_CMAKE_ARGS (e.g. -DBURST_WERROR=ON; without apt:
# -DBURST_TORCH_CPU_ROOT=<pip torch folder>, scripts/run_main_offline.sh). CMake also reads the
# environment variable CMAKE_PREFIX_PATH (a libtorch or sentencepiece outside /usr).
# The Python of the module, its tests and `burst report`: BURST_PYTHON (default Debian's /usr/bin/python3).
# The configure output goes to <build>/configure.log (its warnings and errors to stderr too).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BURST_BUILD_DIR:-build}
mkdir -p "$build"
# shellcheck disable=SC2086
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DPython3_EXECUTABLE="${BURST_PYTHON:-/usr/bin/python3}" ${BURST_CMAKE_ARGS:-} >"$build/configure.log"
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --build "$build" -j "$(nproc)" "${targets[@]}"
