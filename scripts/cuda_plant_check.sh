#!/usr/bin/env bash
# Shows that the cuda tests can fail (docs/gpu.md § Running the cuda tests): builds burst_cuda
# with a planted error (-DBURST_CUDA_PLANT_ERROR=ON: the copy kernel rounds bf16 ties away from
# zero) in ${BURST_PLANT_BUILD_DIR:-build-plant}, runs test_cuda_elementwise, and succeeds only
# when the bf16 rounding test fails. Exit 0: the error was caught; 1: it was not (or the build
# broke); 77: no GPU here (the tests were skipped, so nothing was shown).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BURST_PLANT_BUILD_DIR:-build-plant}
mkdir -p "$build"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBURST_WITH_CUDA=ON -DBURST_CUDA_PLANT_ERROR=ON \
      -DBURST_WITH_TORCH=OFF -DBURST_WITH_PYTHON=OFF -DBURST_BUILD_TOOLS=OFF ${BURST_CMAKE_ARGS:-} \
      >"$build/configure.log"
cmake --build "$build" -j "$(nproc)" --target test_cuda_elementwise
set +e
"$build/tests/test_cuda_elementwise" --gtest_filter='CudaElementwise.*' >"$build/plant.log" 2>&1
rc=$?
set -e
if [[ $rc == 77 ]]; then
  grep -m1 "no CUDA device" "$build/plant.log" >&2 || true
  echo "cuda_plant_check: no GPU here: the tests were skipped" >&2
  exit 77
fi
if grep -q "^\[  FAILED  \] CudaElementwise.RoundingToBf16AndF16IsTheHostsBitForBitTiesToEven" "$build/plant.log"; then
  grep "^\[  FAILED  \]" "$build/plant.log" | sort -u
  echo "cuda_plant_check: the planted error was caught (exit $rc)"
  exit 0
fi
cat "$build/plant.log" >&2
echo "cuda_plant_check: the planted error was NOT caught (exit $rc)" >&2
exit 1
