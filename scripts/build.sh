#!/usr/bin/env bash
# Configures and builds burst into ${BURST_BUILD_DIR:-build} (Release, Ninja).
# Extra CMake arguments come from BURST_CMAKE_ARGS (e.g. -DBURST_WERROR=ON).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BURST_BUILD_DIR:-build}
# shellcheck disable=SC2086
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DPython3_EXECUTABLE=/usr/bin/python3 ${BURST_CMAKE_ARGS:-} >/dev/null
cmake --build "$build" -j "$(nproc)"
