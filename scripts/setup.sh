#!/usr/bin/env bash
# Installs every Debian package burst needs (idempotent: skips apt when all are present).
# Used by the README commands and by .ci/run. Set BURST_SETUP_MINIMAL=1 to skip the
# language-model and Python packages (libtorch alone is ~900 MB); CMake then builds the core
# library, CLI and tests and switches the libtorch and pybind11 parts OFF (one line each).
# python3-pip/-setuptools/-wheel/-venv: `pip install --no-build-isolation .` (README).
# libopenblas0-openmp: Debian's libtorch calls whatever libblas.so.3 points to, and a fresh
# machine has only the reference (netlib) BLAS, which took 43 % of the whole-KJV eval; the
# OpenMP flavour registers itself as the libblas.so.3 alternative and obeys OMP_NUM_THREADS.
# BURST_SETUP=skip: checks and installs nothing (no dpkg, no apt): a host without apt whose
# dependencies come from elsewhere, e.g. libtorch from PyTorch's pip wheel and a carried
# sentencepiece and KJV text (scripts/run_main_offline.sh; docs/lm.md).
# BURST_SETUP=main (what scripts/run_main.sh asks for): only what the main job builds and runs —
# the compiler, CMake, Open MPI, CLI11, nlohmann-json, libtorch, sentencepiece, the KJV, OpenBLAS
# and python3 with matplotlib (the summary and the loss curve); no test, Python-module or
# emulated-cluster packages (on a fresh Debian 12 minbase chroot, apt took 144 s for all of them).
set -euo pipefail
if [[ "${BURST_SETUP:-}" == skip ]]; then
  echo "setup: skipped (BURST_SETUP=skip): no package checked or installed" >&2
  exit 0
fi
# Package groups: the main job (scripts/run_main.sh) needs build + lm; everything else needs all.
build=(build-essential cmake ninja-build pkg-config libopenmpi-dev openmpi-bin libcli11-dev nlohmann-json3-dev)
tests=(libgtest-dev libgmock-dev googletest
       iproute2 nftables vde2   # the emulated cluster (scripts/cluster.sh; vde2: delay without netem)
       ccache)                  # .ci/run: the pip-stack build reuses the main build's objects
lm=(libtorch-dev libsentencepiece-dev bible-kjv bible-kjv-text libopenblas0-openmp python3 python3-matplotlib)
extra=(python3-torch sentencepiece pybind11-dev python3-pybind11 python3-numpy python3-mpi4py python3-pytest
       python3-dev python3-pip python3-setuptools python3-wheel python3-venv)
pkgs=("${build[@]}" "${tests[@]}")
if [[ "${BURST_SETUP_MINIMAL:-0}" != 1 ]]; then pkgs+=("${lm[@]}" "${extra[@]}"); fi
if [[ "${BURST_SETUP:-}" == main ]]; then pkgs=("${build[@]}" "${lm[@]}"); fi
missing=()
for p in "${pkgs[@]}"; do
  [[ $(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true) == *"install ok installed"* ]] || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "setup: all ${#pkgs[@]} packages present" >&2
fi
# The tests group, where a CUDA toolkit is: the cuDNN frontend headers of the CUDA step kernels'
# cuDNN backend (pinned PyPI wheel into the git-ignored third_party/cudnn_frontend; offline:
# kept when there, else the backend stays off). Never fails the setup.
if [[ "${BURST_SETUP:-}" != main ]] && { command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]]; }; then
  "$(dirname "$0")/fetch_cudnn_frontend.sh" || echo "setup: the cuDNN frontend headers were not fetched" >&2
fi
