#!/usr/bin/env bash
# The GPU host check, in one call of at most 8 minutes, the one entry point of a GPU session
# (scripts/cuda_kernel_check.sh calls it): build burst with CUDA (Ninja, all cores,
# no libtorch; the Python module where pybind11 is there), run `ctest -L cuda` (DistAttention on
# GPU ranks at P = 1..4 included: test_cuda_dist), cuda_step_bench's table, the Python tests
# with torch CUDA tensors, the step kernels beside PyTorch's SDPA per
# backend (bench/torch_sdpa.py --device cuda) at S = 32768, (H 8, D 64) and (H 32, D 128), bf16,
# full and causal, the kernels against the CPU kernel at small S, the strategies at P = 1..4 MPI
# ranks sharing the GPU, the exact causal attention over S = 1,048,576 tokens (H 8, D 64, bf16)
# at P = 1 and P = 4 beside PyTorch's fastest backends on the same S, and, while the budget
# lasts, the planted-error check (scripts/cuda_plant_check.sh). Every step has its
# own timeout, so one failure or hang costs only its share; each writes JSON lines (a step that
# cannot run says why in a record). Meant for a GPU host without network or apt (docs/gpu.md).
#
# Usage:  scripts/gpu_host_check.sh [OUTDIR]      (default: $OUT when set, else ./gpu_host_check)
#         scripts/gpu_host_check.sh --pack DIR    (on a Debian host with the -dev packages: copy the
#                                                 CLI11, nlohmann-json and GoogleTest headers, CMake
#                                                 files and static libs to DIR, carried to the host)
#         scripts/gpu_host_check.sh --quick [OUTDIR]  (S 8192 and 65536 instead of 32768 and 1M: a trial)
# Writes into OUTDIR (at most 5 files): gpu_host_check.jsonl (every record), build.log (its last
# 200 lines), ctest_cuda.log, pytest_cuda.log (tests/py/test_cuda.py: torch CUDA tensors through
# the Python functions), bench.err (the benchmarks' stderr), and nothing else.
# Environment: BURST_DEPS_PREFIX  the --pack folder (default ./third_party_carry if present)
#              BURST_BUILD_DIR    build directory (default build-gpu)
#              BURST_PYTHON       Python with torch (default: the first python3 that imports torch)
#              BURST_CHECK_REPEATS timed repeats per benchmark (default 5)
# Budget (16-core host, H200): build ≤ 240 s, ctest ≤ 90 s, kernels beside PyTorch ≤ 150 s,
# strategies ≤ 60 s, the 1M run ≤ 120 s; the step timeouts below sum to 8 minutes only if every
# step hits its limit after a slow build, so the whole stays within 8 minutes (a total watchdog
# stops starting steps after 450 s).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

# shellcheck source=scripts/host_check_common.sh
source scripts/host_check_common.sh
check_args "$0" "$@"
if [[ ${1:-} == --pack ]]; then
  pack_deps "${2:?usage: --pack DIR}"
  exit 0
fi
quick=0
if [[ ${1:-} == --quick ]]; then
  quick=1
  shift
fi
outdir=${1:-${OUT:-gpu_host_check}}
mkdir -p "$outdir"
out=$outdir/gpu_host_check.jsonl
build=${BURST_BUILD_DIR:-build-gpu}
deps=$(deps_prefix)
repeats=${BURST_CHECK_REPEATS:-5}
seq=32768
long=1048576
((quick)) && seq=8192 && long=65536
cores=$(nproc --all)  # before OMP_NUM_THREADS is set below: GNU nproc honours it
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
py=${BURST_PYTHON:-}
if [[ -z $py ]]; then
  for cand in python3 /usr/bin/python3; do
    if "$cand" -c 'import torch' >/dev/null 2>&1; then py=$cand; break; fi
  done
  py=${py:-python3}
fi
: >"$out"
errs=$outdir/bench.err
: >"$errs"
t_start=$(date +%s)
# The total watchdog: a step starts only while this many seconds are left of the 8 minutes.
budget_left() { echo $((450 - ($(date +%s) - t_start))); }
# step NAME SECONDS CMD...: runs CMD (stdout appended to the JSON lines) under its own timeout,
# unless the budget is spent; records how it ended.
step() {
  local name=$1 limit=$2
  shift 2
  local left
  left=$(budget_left)
  if ((left < 20)); then
    emit step_skipped "step=$name" "reason=the 8-minute budget is spent"
    return 1
  fi
  ((limit > left)) && limit=$left
  local t0 rc
  t0=$(date +%s)
  timeout --kill-after=5 "$limit" "$@" >>"$out" 2>>"$errs"
  rc=$?
  local why=""
  ((rc != 0)) && why=$(tail -1 "$errs" | tr -d '"\\')
  emit step "step=$name" "rc=$rc" "seconds=$(($(date +%s) - t0))" \
    "timed_out=$([[ $rc == 124 || $rc == 137 ]] && echo true || echo false)" "last_error=$why"
  return $rc
}

# The host.
gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1 | tr -d '"\\')
ompi_cuda=$(ompi_info --parsable --all 2>/dev/null | grep -m1 'mpi_built_with_cuda_support:value' | awk -F: '{print $NF}')
emit host "gpu=$gpu" "nproc=$cores" "cpu_model=$(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1)" \
  "nvcc=$( (nvcc --version 2>/dev/null || /usr/local/cuda/bin/nvcc --version 2>/dev/null) | tail -1)" \
  "ompi_built_with_cuda=${ompi_cuda:-unknown}" "compiler=$(c++ --version | head -1)" \
  "python=$py" "torch=$("$py" -c 'import torch; print(torch.__version__)' 2>&1 | tail -1)" "quick=$quick"

# Build: the CLI and every test target labelled cuda (their names start with test_cuda).
t0=$(date +%s)
# The Python module for the torch Python's interpreter where it has pybind11 and the headers
# (AUTO: left out otherwise, and the Python step says so).
cmake_args=(-S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DBURST_WITH_CUDA=ON -DBURST_WITH_TORCH=OFF
            -DBURST_WITH_PYTHON=AUTO -DPython3_EXECUTABLE="$(command -v "$py" || echo "$py")"
            -DBURST_INSTALL=OFF -DCMAKE_POLICY_VERSION_MINIMUM=3.5)
pybind_dir=$("$py" -m pybind11 --cmakedir 2>/dev/null)
[[ -n $pybind_dir ]] && cmake_args+=(-Dpybind11_DIR="$pybind_dir")
command -v nvcc >/dev/null || cmake_args+=(-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc)
command -v ninja >/dev/null && cmake_args+=(-G Ninja)
mapfile -t -O "${#cmake_args[@]}" cmake_args < <(deps_cmake_args "$deps")
log=$build/gpu_host_check.build.log
mkdir -p "$build"
built=false
if timeout 60 cmake "${cmake_args[@]}" >"$log" 2>&1; then
  mapfile -t cuda_tests < <(cmake --build "$build" --target help 2>/dev/null |
    grep -oE '\b(test_cuda[a-z0-9_]*|test_bench_gpu|burst_python|cuda_step_bench)\b' | sort -u)
  if timeout 240 cmake --build "$build" -j "$cores" --target burst_cli "${cuda_tests[@]}" >>"$log" 2>&1; then
    built=true
  fi
fi
tail -200 "$log" >"$outdir/build.log"
emit build "ok=$built" "seconds=$(($(date +%s) - t0))" "cuda_test_targets=${cuda_tests[*]:-}"
if [[ $built != true ]]; then
  echo "build failed: see $outdir/build.log" >&2
  emit "done" "seconds=$(($(date +%s) - t_start))" "ok=false"
  exit 1
fi
burst=$build/tools/burst
"$burst" info | "$py" -c 'import json,sys; r=json.load(sys.stdin); r["check"]="burst_info"; print(json.dumps(r))' >>"$out"

# The cuda tests (kernels against the fp64 oracle, the device seam, the CLI's GPU side).
t0=$(date +%s)
timeout --kill-after=5 120 ctest --test-dir "$build" -L cuda --output-on-failure >"$outdir/ctest_cuda.log" 2>&1
rc=$?
summary=$(grep -E 'tests passed|Skipped|\*\*\*|Failed' "$outdir/ctest_cuda.log" | tr '\n' '|' | tr -d '"\\')
emit ctest_cuda "rc=$rc" "seconds=$(($(date +%s) - t0))" "summary=$summary"

# torch CUDA tensors through the Python functions, autograd included (tests/py/test_cuda.py).
if [[ -f $build/python/burst/__init__.py ]] && (($(budget_left) >= 30)); then
  t0=$(date +%s)
  PYTHONPATH=$build/python timeout --kill-after=5 90 "$py" -m pytest -q -p no:cacheprovider -rs \
    tests/py/test_cuda.py >"$outdir/pytest_cuda.log" 2>&1
  rc=$?
  emit pytest_cuda "rc=$rc" "seconds=$(($(date +%s) - t0))" "summary=$(tail -3 "$outdir/pytest_cuda.log" | tr '\n' '|' | tr -d '"\\')"
else
  emit pytest_cuda_skipped "reason=no Python module in $build (pybind11 or the Python headers missing for $py) or no budget left"
fi

# The step kernels against the CPU kernel on the same rounded inputs (max_abs_diff_vs_cpu_kernel).
for mask in full causal sliding_window_causal causal_document; do
  step "check_$mask" 30 "$burst" bench kernel --device cuda --seq 1024 --heads 4 --kv-heads 2 --dim 64 \
    --dtype bf16 --mask "$mask" --pass both --repeats 1 --warmup 0 --check-max-seq 1024
done

# Kernels beside PyTorch, per backend, on the same shapes (S = $seq, bf16, full and causal).
for hd in "8 64" "32 128"; do
  read -r h d <<<"$hd"
  for mask in full causal; do
    step "kernel_h${h}_d${d}_$mask" 40 "$burst" bench kernel --device cuda --seq "$seq" --heads "$h" --dim "$d" \
      --dtype bf16 --mask "$mask" --pass both --repeats "$repeats" --warmup 2 --check-max-seq 0
  done
done
step torch_sdpa 120 "$py" bench/torch_sdpa.py --device cuda --seq "$seq" --shapes 8x64,32x128 --dtypes bf16 \
  --masks full,causal --passes fwd,bwd --repeats "$repeats" --warmup 2

# The step kernels' fixed table (cuda_step_bench, CUDA events): Auto's measured choice per case
# (its records name the kernel), cuDNN and FastMma forced, and the twin.
[[ -x $build/bench/cuda_step_bench ]] && step cuda_step_bench 60 "$build/bench/cuda_step_bench"

# The strategies on GPU ranks sharing the GPU (`burst bench dist --device cuda`, where this tree
# has it: the record says so otherwise): every strategy at P = 2 and 4, burst at P = 1 and 3 (the
# exactness of every strategy at P = 1..4 is test_cuda_dist's, in ctest -L cuda above).
if "$burst" bench dist --help 2>/dev/null | grep -q -- '--device'; then
  for run in "1 burst" "3 burst" "2 burst ring allgather ulysses usp distflash headpar" \
    "4 burst ring allgather ulysses usp distflash headpar"; do
    read -r P strategies <<<"$run"
    for strategy in $strategies; do
      step "dist_${strategy}_p$P" 30 mpirun -n "$P" --bind-to none "$burst" bench dist --device cuda \
        --strategy "$strategy" --seq $((seq / 4)) --heads 8 --dim 64 --dtype bf16 --mask causal \
        --pass both --repeats 3 --warmup 1
    done
  done
else
  emit strategies_skipped "reason=this tree's burst bench dist has no --device cuda: the strategies do not run on GPU ranks yet"
  # The step kernels at P = 1..4 ranks sharing the GPU at once (each rank its own kernels, so
  # the contention of ranks sharing one GPU is seen, not the strategies).
  for P in 1 2 4; do
    step "kernel_shared_p$P" 40 mpirun -n "$P" --bind-to none "$burst" bench kernel --device cuda \
      --seq $((seq / 2)) --heads 8 --dim 64 --dtype bf16 --mask causal --pass both --repeats 3 --warmup 1 \
      --check-max-seq 0
  done
fi

# The long run: exact causal attention over $long tokens (H 8, D 64, bf16), forward + backward,
# at P = 1 (the step kernels on the whole sequence), beside PyTorch's cudnn and flash backends.
step "long_p1" 90 "$burst" bench kernel --device cuda --seq "$long" --heads 8 --dim 64 --dtype bf16 \
  --mask causal --pass both --repeats 1 --warmup 1 --check-max-seq 0
step "long_torch" 90 "$py" bench/torch_sdpa.py --device cuda --seq "$long" --shapes 8x64 --dtypes bf16 \
  --masks causal --passes fwd,bwd --backends cudnn,flash --repeats 1 --warmup 1
if "$burst" bench dist --help 2>/dev/null | grep -q -- '--device'; then
  step "long_p4" 120 mpirun -n 4 --bind-to none "$burst" bench dist --device cuda --strategy burst \
    --layout zigzag --seq "$long" --heads 8 --dim 64 --dtype bf16 --mask causal --pass both --repeats 1 --warmup 0
else
  emit long_p4_skipped "reason=this tree's burst bench dist has no --device cuda"
fi

# A planted error must fail a cuda test (scripts/cuda_plant_check.sh: its own build of
# burst_cuda with -DBURST_CUDA_PLANT_ERROR=ON beside this one), while the budget lasts.
if (($(budget_left) >= 60)); then
  t0=$(date +%s)
  deps_args=$(deps_cmake_args "$deps" | tr '\n' ' ')
  timeout --kill-after=5 $(($(budget_left) - 10)) env -u OMP_NUM_THREADS BURST_CMAKE_ARGS="$deps_args" \
    BURST_PLANT_BUILD_DIR="$build-plant" scripts/cuda_plant_check.sh >"$build/plant_check.log" 2>&1
  rc=$?
  emit plant_check "rc=$rc" "caught=$([[ $rc == 0 ]] && echo true || echo false)" \
    "seconds=$(($(date +%s) - t0))" "last_line=$(tail -1 "$build/plant_check.log" | tr -d '"\\')"
else
  emit plant_check_skipped "reason=the 8-minute budget is spent"
fi

emit "done" "seconds=$(($(date +%s) - t_start))" "ok=true"
echo "wrote $(wc -l <"$out") JSON lines to $out in $(($(date +%s) - t_start)) s"
