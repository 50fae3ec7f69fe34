#!/usr/bin/env bash
# The Python tests on pip's stack, CI's second Python beside Debian's: a venv from PyPI (torch,
# numpy >= 2, pybind11 >= 3, mpi4py, pytest, matplotlib), a second build directory configured
# with its interpreter (only the module and the CLI are built; the library's objects come from
# ccache where the main build filled it), then ctest's Python tests, the Python examples and
# cli_bench (`burst report` with that interpreter's matplotlib). Exit code is the verdict.
#
# Usage: scripts/pip_stack_tests.sh [CTEST ARGS...]   (default: the python_* tests, which are the
#        `python`-labelled ones, the Python examples and cli_bench)
# Env:   BURST_PIP_BASE   interpreter the venv is made from (default: the newest
#                         /root/.pyenv/versions/3.12*/bin/python, else /usr/bin/python3)
#        BURST_PIP_VENV   the venv (default .pip-stack/venv, git-ignored); kept between runs and
#                         reused while it imports the stack, so only a first run downloads
#        BURST_PIP_BUILD_DIR  build directory (default build-pip)
#        BURST_CMAKE_ARGS     extra CMake arguments (e.g. -DBURST_WERROR=ON)
# Cost (2-core VM shared with other builds, PyPI reachable): venv + pip install 324 s the first
# time (torch's CUDA wheels: a 5.5 GB venv; PyPI has no CPU-only torch for Linux x86-64); with the
# venv kept, that step is the import probe (seconds). Configure + build 77 s on the main build's
# ccache (437 s without ccache); the tests 380 s.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
root=$PWD
venv=${BURST_PIP_VENV:-$root/.pip-stack/venv}
build=${BURST_PIP_BUILD_DIR:-build-pip}
# The stack under test; the floors are the ones pyproject.toml and python/CMakeLists.txt state
# for pip's side of the support (numpy 2, pybind11 3, torch 2.5).
requirements=("torch>=2.5" "numpy>=2" "pybind11>=3" "mpi4py>=4" "pytest" "matplotlib")
t0=$(date +%s)

base=${BURST_PIP_BASE:-}
if [[ -z $base ]]; then
  for cand in $(ls -d /root/.pyenv/versions/3.12*/bin/python 2>/dev/null | sort -V -r) /usr/bin/python3; do
    if [[ -x $cand ]]; then base=$cand; break; fi
  done
fi
probe='import sys, torch, numpy, pybind11, mpi4py, pytest, matplotlib
assert int(numpy.__version__.split(".")[0]) >= 2 and int(pybind11.__version__.split(".")[0]) >= 3
print(sys.version.split()[0], torch.__version__, numpy.__version__, pybind11.__version__, mpi4py.__version__)'
if ! [[ -x $venv/bin/python ]] || ! "$venv/bin/python" -c "$probe" >/dev/null 2>&1; then
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  "$base" -m venv "$venv"
  "$venv/bin/python" -m pip install -q "${requirements[@]}"
fi
py=$venv/bin/python
echo "pip stack: $("$py" -c "$probe") (venv from $base; $(( $(date +%s) - t0 )) s)"

t1=$(date +%s)
mkdir -p "$build"
# shellcheck disable=SC2086
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE="$py" \
      -Dpybind11_DIR="$("$py" -m pybind11 --cmakedir)" -DBURST_WITH_PYTHON=ON -DBURST_WITH_TORCH=OFF \
      ${BURST_CMAKE_ARGS:-} >"$build/configure.log"
cmake --build "$build" -j "$(nproc)" --target burst_python burst_cli
echo "pip stack: configure + build $(( $(date +%s) - t1 )) s"

t2=$(date +%s)
if [[ $# -eq 0 ]]; then
  set -- -R '^(python_.*|example_torch_autograd_np2|example_ring_flash_attn_step_.*|cli_bench)$'
fi
ctest --test-dir "$build" --output-on-failure -j 2 "$@"
echo "pip stack: tests $(( $(date +%s) - t2 )) s, total $(( $(date +%s) - t0 )) s"
