#!/usr/bin/env bash
# The GPU attention step kernels on a GPU host, in one call (docs/gpu.md § The attention step
# kernels; meant to be called from scripts/gpu_host_check.sh): builds burst_cuda (with the cuDNN
# backend where third_party/cudnn_frontend or a carried third_party_carry/cudnn_frontend holds the
# frontend's headers: docs/gpu.md § cuDNN), the cuda tests and cuda_step_bench in
# ${BURST_BUILD_DIR:-build}, runs `ctest -L cuda`, the bench (JSON lines on stdout) and the
# planted-error check. Prints one JSON line per stage to stdout:
#   {"stage":"build|ctest|bench|plant","rc":N,"seconds":S}
# Exit: 0 when every stage passed; 1 otherwise; 77 without a GPU (the tests skip, the bench
# and the planted check then report 77 too). Takes about 4–6 minutes on 16 cores, about half of
# it the planted-error build (its own build directory); BURST_CUDA_CHECK_PLANT=0 skips that stage.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${BURST_BUILD_DIR:-build}
# stage NAME OUT COMMAND...: runs it (its stdout to stdout when OUT is "out", else to stderr),
# prints its JSON line, returns its exit code.
stage() {
  local name=$1 out=$2 start rc
  shift 2
  start=$(date +%s)
  if [[ $out == out ]]; then "$@"; else "$@" >&2; fi
  rc=$?
  printf '{"stage":"%s","rc":%d,"seconds":%d}\n' "$name" "$rc" "$(($(date +%s) - start))"
  return "$rc"
}
# Warnings are CI's to reject (its compiler may differ from the GPU host's): not errors here
# unless BURST_CMAKE_ARGS says so.
if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  BURST_CMAKE_ARGS="${BURST_CMAKE_ARGS:-} -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc"
fi
export BURST_CMAKE_ARGS="${BURST_CMAKE_ARGS:-} -DBURST_WITH_CUDA=ON -DBURST_WITH_TORCH=OFF -DBURST_WITH_PYTHON=OFF"
stage build err scripts/build.sh test_cuda_elementwise test_cuda_device test_cuda_attention test_cuda_cudnn \
  test_cuda_mma_layout cuda_step_bench ||
  exit 1
rc_all=0
stage ctest err ctest --test-dir "$build" -L cuda --output-on-failure || rc_all=1
stage bench out "$build/bench/cuda_step_bench"
rc_bench=$?
rc_plant=0
if [[ ${BURST_CUDA_CHECK_PLANT:-1} != 0 ]]; then
  stage plant err scripts/cuda_plant_check.sh
  rc_plant=$?
fi
if [[ $rc_bench == 77 || $rc_plant == 77 ]]; then
  echo "cuda_kernel_check: no GPU here" >&2
  exit 77
fi
[[ $rc_bench == 0 && $rc_plant == 0 ]] || rc_all=1
exit "$rc_all"
