#!/usr/bin/env bash
# The README's main job (scripts/run_main.sh: build burst-lm + kjv_prepare, KJV data, train on 2
# ranks, whole-KJV eval, generation) on a host without apt and without this project's Debian
# packages: libtorch from PyTorch's pip wheel (linked CPU only: cmake/torch_cpu_only.cmake; the
# GPU, if any, is not used), and sentencepiece, CLI11, nlohmann-json and the KJV text from a
# folder made here by --pack and carried there.
#
# Usage:  scripts/run_main_offline.sh --pack DIR   (on a Debian 12 host with bible-kjv and the -dev
#             packages: sentencepiece from `apt-get download` + `dpkg -x`, nothing installed;
#             writes DIR/run.sh, which runs this script with DIR as the carried folder)
#         scripts/run_main_offline.sh [all|build|main]   (on the host; default all)
#             build: configure + build burst-lm and kjv_prepare only; main: scripts/run_main.sh
#             (which builds what is missing); all: both, as one run_main.sh.
# Environment: BURST_CARRY   the carried folder (default ./lmhost)
#              BURST_PYTHON  a Python that imports torch (default: the first of python3,
#                            /opt/torch/.venv/bin/python3, /usr/bin/python3 that does)
#              OUT           where the report goes (default runs/offline): report.txt (host,
#                            torch, mode, ldd, time, summary, phases), main.log (run_main's
#                            output as it runs, the build included), results.txt (the JSON and
#                            log files of the run), configure.log (CMake's, each attempt)
#              BURST_BUILD_DIR (default build-offline), BURST_LM_* (scripts/run_main.sh's knobs,
#                            e.g. BURST_LM_BUDGET)
# libtorch: CPU only (BURST_TORCH_CPU_ROOT = the wheel's torch/ folder). If that configure fails,
# a second one uses the wheel's TorchConfig.cmake (CUDA toolkit needed: CUDACXX, TORCH_CUDA_ARCH_LIST
# are set from /usr/local/cuda and the GPU); report.txt says which one built.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

# shellcheck source=scripts/host_check_common.sh
source scripts/host_check_common.sh

# --pack DIR: everything the host lacks, as plain files (no symbolic links), and DIR/run.sh.
pack() {
  local dest=$1 tmp
  mkdir -p "$dest"
  dest=$(cd "$dest" && pwd)
  tmp=$(mktemp -d)
  (cd "$tmp" && apt-get download libsentencepiece-dev libsentencepiece0 >/dev/null 2>&1) || {
    echo "pack: apt-get download libsentencepiece-dev libsentencepiece0 failed" >&2
    exit 1
  }
  for deb in "$tmp"/*.deb; do dpkg -x "$deb" "$tmp/x"; done
  rm -rf "$dest/sentencepiece"
  mkdir -p "$dest/sentencepiece/include" "$dest/sentencepiece/lib"
  cp "$tmp"/x/usr/include/sentencepiece_*.h "$dest/sentencepiece/include/"
  # -L: the .so and .so.0 links become files (the linker reads the first, the loader the second).
  cp -L "$tmp"/x/usr/lib/x86_64-linux-gnu/libsentencepiece{,_train}.so{,.0} "$dest/sentencepiece/lib/"
  rm -rf "$tmp"
  rm -rf "$dest/deps"
  pack_deps "$dest/deps" >/dev/null
  command -v bible >/dev/null || {
    echo "pack: needs the bible program (bible-kjv, bible-kjv-text)" >&2
    exit 1
  }
  bible -f "Gen1:1-Rev22:21" >"$dest/kjv.txt" 2>/dev/null
  printf '%s\n' '#!/usr/bin/env bash' \
    '# The main job on this host (scripts/run_main_offline.sh; made by its --pack).' \
    'carry=$(cd "$(dirname "$0")" && pwd)' \
    'BURST_CARRY=$carry exec bash "$carry/../scripts/run_main_offline.sh" "$@"' >"$dest/run.sh"
  chmod +x "$dest/run.sh"
  echo "packed $dest ($(du -sh "$dest" | cut -f1); $(find "$dest" -type l | wc -l) links;" \
    "$(wc -l <"$dest/kjv.txt") KJV lines)"
}

if [[ ${1:-} == --pack ]]; then
  pack "${2:?usage: --pack DIR}"
  exit 0
fi
mode=${1:-all}
case $mode in
  all | build | main) ;;
  *)
    echo "run_main_offline: unknown mode '$mode' (all, build, main, or --pack DIR)" >&2
    exit 2
    ;;
esac

carry=$(cd "${BURST_CARRY:-lmhost}" 2>/dev/null && pwd) || {
  echo "run_main_offline: no carried folder ${BURST_CARRY:-lmhost} (make it with --pack)" >&2
  exit 1
}
out=${OUT:-runs/offline}
mkdir -p "$out"
out=$(cd "$out" && pwd)
build=${BURST_BUILD_DIR:-build-offline}
report=$out/report.txt
note() { printf '%s\n' "$*" | tee -a "$report" >&2; }
: >"$report"
note "== run_main_offline $mode $(date -u +%FT%TZ) on $(uname -n), $(getconf _NPROCESSORS_ONLN) CPUs"

# nproc obeys OMP_NUM_THREADS: the build would run on one core if the caller set it.
unset OMP_NUM_THREADS OMP_THREAD_LIMIT
py=${BURST_PYTHON:-}
if [[ -z $py ]]; then
  for cand in python3 /opt/torch/.venv/bin/python3 /usr/bin/python3; do
    if "$cand" -c 'import torch' >/dev/null 2>&1; then py=$(command -v "$cand"); break; fi
  done
fi
[[ -n $py ]] || { note "run_main_offline: no python3 imports torch (set BURST_PYTHON)"; exit 1; }
# torch/ folder, cmake prefix, version, CUDA version, C++ ABI, and the nvidia/*/lib folders of the
# CUDA wheels (libtorch_cpu of a CUDA wheel may need some of them: its RPATH names them too).
mapfile -t t < <("$py" - <<'PY'
import glob, os, torch
d = os.path.dirname(torch.__file__)
print(d)
print(os.path.join(d, "share", "cmake"))
try:
    abi = torch.compiled_with_cxx11_abi()
except Exception as e:  # informational only: cmake/torch_cpu_only.cmake reads the ABI itself
    abi = repr(e)
print(torch.__version__, "cuda", torch.version.cuda, "cxx11abi", abi)
print(":".join(sorted(glob.glob(os.path.join(os.path.dirname(d), "nvidia", "*", "lib")))))
PY
)
torch_root=${t[0]:-}
[[ -d $torch_root/lib ]] || { note "run_main_offline: $py: no torch/lib (${t[*]})"; exit 1; }
note "python $py; torch ${t[2]}; $torch_root"
# Not torch/lib: burst-lm's RUNPATH names it (CMake), and a libgomp.so.1 there would replace the
# system's for every program. The nvidia/*/lib folders: for the linker, should libtorch_cpu need
# one of them (its RUNPATH names them for the loader).
export LD_LIBRARY_PATH=$carry/sentencepiece/lib${t[3]:+:${t[3]}}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export CMAKE_PREFIX_PATH=$carry/sentencepiece:$carry/deps${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}
export BURST_SETUP=skip BURST_KJV_TEXT=$carry/kjv.txt BURST_PYTHON=$py BURST_BUILD_DIR=$build
# Open MPI 4's shared-memory transport reads peers' memory with process_vm_readv (CMA), which a
# container without CAP_SYS_PTRACE refuses ("Read -1, expected ..., errno = 1"): copy through the
# shared segment instead, unless the caller chose.
export OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}
# ccache where the host has it (a second call on a kept machine whose tree was copied anew).
if [[ -z ${CMAKE_CXX_COMPILER_LAUNCHER:-} ]] && command -v ccache >/dev/null; then
  export CMAKE_CXX_COMPILER_LAUNCHER=ccache CCACHE_DIR=${CCACHE_DIR:-$PWD/$build/ccache}
fi
common=(-DBURST_WITH_TORCH=ON -DBURST_WITH_PYTHON=OFF -DBURST_BUILD_TESTS=OFF -DBURST_INSTALL=OFF
        -DCMAKE_POLICY_VERSION_MINIMUM=3.5)
mapfile -t -O "${#common[@]}" common < <(deps_cmake_args "$carry/deps")

# configure ARGS...: scripts/build.sh's configure (on the cache there: a second run rebuilds
# nothing); its log appended to configure.log.
configure() {
  mkdir -p "$build"
  echo "== cmake ${*} (CMAKE_PREFIX_PATH=$CMAKE_PREFIX_PATH)" >>"$out/configure.log"
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE="$py" "$@" \
    >>"$out/configure.log" 2>&1
}
t0=$(date +%s)
torch_mode="cpu only (BURST_TORCH_CPU_ROOT=$torch_root)"
args=("${common[@]}" "-DBURST_TORCH_CPU_ROOT=$torch_root")
: >"$out/configure.log"
if ! configure "${args[@]}"; then
  note "configure (libtorch CPU only) failed: tail of configure.log:"
  tail -n 25 "$out/configure.log" | tee -a "$report" >&2
  # The wheel's own TorchConfig.cmake: its Caffe2Config.cmake finds the CUDA toolkit.
  torch_mode="TorchConfig.cmake (${t[1]}/Torch, CUDA toolkit)"
  rm -rf "$build/CMakeCache.txt" "$build/CMakeFiles"
  args=("${common[@]}" "-DBURST_TORCH_CPU_ROOT=" "-DTorch_DIR=${t[1]}/Torch")
  if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
    export CUDACXX=/usr/local/cuda/bin/nvcc
    args+=(-DCUDA_TOOLKIT_ROOT_DIR=/usr/local/cuda -DCUDAToolkit_ROOT=/usr/local/cuda)
  fi
  cap=$("$py" -c 'import torch; print("%d.%d" % torch.cuda.get_device_capability())' 2>/dev/null)
  export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-${cap:-9.0}}
  if ! configure "${args[@]}"; then
    note "configure ($torch_mode) failed too: tail of configure.log:"
    tail -n 40 "$out/configure.log" | tee -a "$report" >&2
    exit 1
  fi
fi
note "configured in $(($(date +%s) - t0)) s: libtorch $torch_mode"
grep -E '^-- burst:' "$out/configure.log" | tail -n 5 >>"$report"
export BURST_CMAKE_ARGS="${args[*]}"

rc=0
if [[ $mode == build ]]; then
  { time scripts/build.sh burst_lm_cli kjv_prepare; } >"$out/main.log" 2>&1 || rc=$?
else
  { time scripts/run_main.sh; } 2>&1 | tee "$out/main.log"
  rc=${PIPESTATUS[0]}
fi
note "== $mode exit $rc; $(grep -A3 '^real' "$out/main.log" | tr '\n' ' ')"
if ((rc != 0)); then
  note "== the first errors in main.log:"
  grep -m 12 -B 2 -A 8 -E 'error:|Error|FAILED:|undefined reference|not found' "$out/main.log" | head -n 150 |
    tee -a "$report" >&2
fi

# The report: the host, what the programs load (libtorch CPU only, the carried sentencepiece),
# the summary table and phase times; the run's JSON and logs in results.txt.
{
  echo "== ldd $build/tools/burst-lm: libtorch, c10, CUDA (none with libtorch CPU only), OpenMP"
  ldd "$build/tools/burst-lm" 2>&1 | grep -E '^\s*lib(torch|c10|cud|nv|gomp|mkl)|not found|not a dynamic' ||
    echo "(not built)"
  echo "== ldd $build/apps/kjv_prepare: sentencepiece (the carried one)"
  ldd "$build/apps/kjv_prepare" 2>&1 | grep -E 'sentencepiece|not found|not a dynamic' || echo "(not built)"
  if [[ $mode != build ]]; then
    echo "== the KJV's source (the carried text; the bible program: $(command -v bible || echo absent))"
    grep -m1 -E '^prepare: (extracting the KJV|reusing)' "$out/main.log"
    echo "== summary"
    sed -n '/^=====/,$p' "$out/main.log"
    grep -E '^\[run_main' "$out/main.log"
    echo "== ${BURST_LM_OUT:-runs/kjv}/phases.tsv"
    cat "${BURST_LM_OUT:-runs/kjv}/phases.tsv" 2>/dev/null
  fi
  echo "== lscpu"
  lscpu
} >>"$report" 2>&1
if [[ $mode != build ]]; then
  for f in prepare.json train_summary.json eval_after.json generate.json eval_after.log generate.log \
    train_log.jsonl; do
    echo "==> ${BURST_LM_OUT:-runs/kjv}/$f <=="
    cat "${BURST_LM_OUT:-runs/kjv}/$f" 2>/dev/null || echo "(missing)"
  done >"$out/results.txt"
fi
echo "run_main_offline: report in $out ($(ls "$out" | tr '\n' ' '))" >&2
exit "$rc"
