#!/usr/bin/env bash
# Shows that the cuda tests can fail (docs/gpu.md § Running the cuda tests): builds burst_cuda
# with planted errors (-DBURST_CUDA_PLANT_ERROR=ON: the copy kernel rounds bf16 ties away from
# zero; the attention kernels' slice bounds admit one key past every diagonal, so a causal row
# sees its next token) in ${BURST_PLANT_BUILD_DIR:-build-plant}, runs test_cuda_elementwise and
# test_cuda_attention, and succeeds only when the bf16 rounding test AND the attention mask test
# fail. Built without the cuDNN backend (not the planted check's subject; its one frontend file
# would only add compile time). Exit 0: both errors were caught; 1: one was not (or the build
# broke); 77: no GPU here (the tests were skipped, so nothing was shown).
# Usage: scripts/cuda_plant_check.sh [--build-only]   (--build-only: configure and build, exit 0;
# scripts/gpu_host_check.sh builds in the background and runs the tests later)
# Environment: BURST_PLANT_BUILD_DIR (default build-plant), BURST_PLANT_JOBS (default nproc),
#              BURST_CMAKE_ARGS (extra CMake arguments, e.g. the dependency pack's)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BURST_PLANT_BUILD_DIR:-build-plant}
mkdir -p "$build"
# shellcheck disable=SC2086
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBURST_WITH_CUDA=ON -DBURST_CUDA_PLANT_ERROR=ON \
      -DBURST_WITH_TORCH=OFF -DBURST_WITH_PYTHON=OFF -DBURST_BUILD_TOOLS=OFF -DBURST_WITH_CUDNN=OFF ${BURST_CMAKE_ARGS:-} \
      >"$build/configure.log"
cmake --build "$build" -j "${BURST_PLANT_JOBS:-$(nproc)}" --target test_cuda_elementwise test_cuda_attention
if [[ ${1:-} == --build-only ]]; then
  echo "cuda_plant_check: built in $build"
  exit 0
fi
# caught TEST BINARY FILTER LOG: 0 when TEST failed in the run, 77 when it was skipped, else 1.
caught() {
  local test=$1 binary=$2 filter=$3 log=$4 rc
  set +e
  "$build/tests/$binary" --gtest_filter="$filter" >"$log" 2>&1
  rc=$?
  set -e
  if [[ $rc == 77 ]]; then
    grep -m1 "no CUDA device" "$log" >&2 || true
    return 77
  fi
  if grep -q "^\[  FAILED  \] $test" "$log"; then
    grep "^\[  FAILED  \]" "$log" | sort -u
    echo "cuda_plant_check: $test failed, as it must (exit $rc)"
    return 0
  fi
  cat "$log" >&2
  echo "cuda_plant_check: the planted error was NOT caught by $test (exit $rc)" >&2
  return 1
}
rc_copy=0 rc_attention=0
caught CudaElementwise.RoundingToBf16AndF16IsTheHostsBitForBitTiesToEven test_cuda_elementwise \
  'CudaElementwise.*' "$build/plant.log" || rc_copy=$?
caught CudaAttention.EveryMaskTypeFastAndTwinMatchTheOracle test_cuda_attention \
  'CudaAttention.EveryMaskType*' "$build/plant_attention.log" || rc_attention=$?
if [[ $rc_copy == 77 || $rc_attention == 77 ]]; then
  echo "cuda_plant_check: no GPU here: the tests were skipped" >&2
  exit 77
fi
[[ $rc_copy == 0 && $rc_attention == 0 ]] || exit 1
echo "cuda_plant_check: both planted errors were caught"
