#!/usr/bin/env bash
# The GPU step kernels' check under its older name: scripts/gpu_host_check.sh is the one entry
# point of a GPU session (build with CUDA, `ctest -L cuda`, cuda_step_bench, the kernels beside
# PyTorch, the strategies on GPU ranks, the planted-error check; docs/gpu.md), so this runs it.
# Usage: scripts/cuda_kernel_check.sh [OUTDIR]   (gpu_host_check.sh's arguments and environment)
# Exit: gpu_host_check.sh's (0 when it ran to the end, 1 when the build failed).
set -euo pipefail
exec "$(dirname "$0")/gpu_host_check.sh" "$@"
