#!/usr/bin/env bash
# The GPU host check, in one call of at most 8 minutes, the one entry point of a GPU session
# (scripts/cuda_kernel_check.sh calls it). Build burst with CUDA (Ninja, all cores, no libtorch;
# the Python module where pybind11 and the Python headers are), then, most valuable first, each
# step under its own timeout and writing its JSON lines before the next starts (a watchdog that
# stops the whole keeps what was written):
#   1. the step kernels against the CPU kernel at S = 1024 (max_abs_diff_vs_cpu_kernel);
#   2. the step kernels beside PyTorch's SDPA per backend (bench/torch_sdpa.py --device cuda) at
#      S = 32768, (H 8, D 64) and (H 32, D 128), bf16, full and causal, forward and backward, and
#      cuda_step_bench's table (Fast, FastMma and cuDNN rows);
#   3. `ctest -L cuda` (kernels against the fp64 oracle, the device seam, DistAttention on GPU
#      ranks at P = 1..4: test_cuda_dist), one record per test;
#   4. the exact causal attention over S = 1,048,576 tokens (H 8, D 64, bf16), forward +
#      backward: burst at P = 1, PyTorch's cudnn backend on the same S;
#   5. burst's and PyTorch's errors against fp64 on the same inputs (bench/gpu_exactness.py);
#   6. torch CUDA tensors through the Python functions (tests/py/test_cuda.py);
#   7. the planted-error check (scripts/cuda_plant_check.sh), built in the background at low
#      priority while the GPU steps run; its tests at the first of three points (after 6, after
#      8, after 9's P = 4 cases) where that build is done, at the last waiting for it;
#   8. burst at P = 4 ranks sharing the GPU on the long run's S (time and exposed communication);
#   9. the strategies at P = 4 MPI ranks sharing the GPU (`burst bench dist --device cuda`), then
#      burst at P = 1, 2, 3;
#  10. PyTorch's flash backend on the long run's S.
# Most valuable first: what a short budget cuts comes last.
# Then scripts/gpu_summary.py judges the targets (PASS / FAIL / MISSING) from the JSON lines.
# Meant for a GPU host without network or apt (docs/gpu.md).
#
# Usage:  scripts/gpu_host_check.sh [OUTDIR]      (default: $OUT when set, else ./gpu_host_check)
#         scripts/gpu_host_check.sh --pack DIR    (on a Debian host with the -dev packages: copy the
#                                                 CLI11, nlohmann-json and GoogleTest headers, CMake
#                                                 files and static libs, the cuDNN frontend headers
#                                                 and a Python 3.12's headers to DIR, carried to the
#                                                 host as third_party_carry/)
#         scripts/gpu_host_check.sh --quick [OUTDIR]  (S 8192 and 65536 instead of 32768 and 1M: a trial)
# Writes into OUTDIR (7 files; a device session brings back at most 8): gpu_host_check.jsonl
# (every record), gpu_summary.txt (the targets), build.log (its last 200 lines), ctest_cuda.log,
# pytest_cuda.log (tests/py/test_cuda.py), plant_check.log, bench.err (the steps' stderr).
# Environment: BURST_DEPS_PREFIX  the --pack folder (default ./third_party_carry if present)
#              BURST_BUILD_DIR    build directory (default build-gpu)
#              BURST_PYTHON       Python with torch (default: the first python3 that imports torch)
#              BURST_CHECK_REPEATS timed repeats per benchmark (default 3)
#              BURST_BUILD_TIMEOUT seconds the build may take (default 300; a slower host's trial)
#              BURST_CHECK_BUDGET seconds after which no step starts (default 450)
#              BURST_CHECK_STEPS  the step groups to run, comma-separated (default all): checks,
#                                 kernels, ctest, long, long_torch, exactness, pytest, dist, plant (a rerun
#                                 of what a first call left failing or unmeasured)
# Budget (16-core host, H200; estimated from CPU seconds on a development host, docs/gpu.md §
# The host check's budget): build ~120 s, kernels and PyTorch at S 32K ~80 s, ctest ~80 s, the
# 1M runs ~150-300 s depending on the kernels' speed. A step starts only while 20 s of the 450 s
# budget are left and its timeout is cut to what is left, so the whole stays within 8 minutes.
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
repeats=${BURST_CHECK_REPEATS:-3}
seq=32768
long=1048576
((quick)) && seq=8192 && long=65536
cores=$(nproc --all)  # before OMP_NUM_THREADS is set below: GNU nproc honours it
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
# nvcc for CMake's CUDA detection here and in the planted-error build (the toolkit's usual place).
command -v nvcc >/dev/null || export PATH=$PATH:/usr/local/cuda/bin
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
budget=${BURST_CHECK_BUDGET:-450}
steps=${BURST_CHECK_STEPS:-all}
# want GROUP: true when the step group runs in this call.
want() { [[ $steps == all || ,$steps, == *,$1,* ]]; }
# The total watchdog: a step starts only while this many seconds are left of the budget.
budget_left() { echo $((budget - ($(date +%s) - t_start))); }
# step NAME SECONDS CMD...: runs CMD (stdout appended to the JSON lines) under its own timeout,
# cut to what is left of the budget, unless the budget is spent; records how it ended.
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
  local t0 rc n0
  t0=$(date +%s)
  n0=$(wc -l <"$errs")
  timeout --kill-after=5 "$limit" "$@" >>"$out" 2>>"$errs"
  rc=$?
  # Its last error line, else its last line (mpirun's banners of dashes and blank lines left out).
  local why="" lines
  if ((rc != 0)); then
    lines=$(tail -n +$((n0 + 1)) "$errs" | grep -vE '^[-[:space:]]*$')
    why=$(grep -E 'error: ' <<<"$lines" | tail -1)  # burst's own "[rank r/P] error: ..." first
    [[ -z $why ]] && why=$(grep -iE 'error|unsupported|abort' <<<"$lines" | tail -1)
    [[ -z $why ]] && why=$(tail -1 <<<"$lines")
    why=$(tr -d '"\\' <<<"$why")
  fi
  emit step "step=$name" "rc=$rc" "seconds=$(($(date +%s) - t0))" "limit=$limit" \
    "timed_out=$([[ $rc == 124 || $rc == 137 ]] && echo true || echo false)" "last_error=$why"
  return $rc
}
# The summary of the targets, at the end of every run (also after a failed build).
summary() {
  "$py" scripts/gpu_summary.py "$out" >"$outdir/gpu_summary.txt" 2>&1
  cat "$outdir/gpu_summary.txt"
}

# The host.
gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1 | tr -d '"\\')
ompi_cuda=$(ompi_info --parsable --all 2>/dev/null | grep -m1 'mpi_built_with_cuda_support:value' | awk -F: '{print $NF}')
emit host "gpu=$gpu" "nproc=$cores" "cpu_model=$(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1)" \
  "nvcc=$(nvcc --version 2>/dev/null | tail -1)" \
  "ompi_built_with_cuda=${ompi_cuda:-unknown}" "compiler=$(c++ --version | head -1)" \
  "cmake=$(cmake --version | head -1)" "deps_prefix=${deps:-system}" \
  "python=$py" "torch=$("$py" -c 'import torch; print(torch.__version__)' 2>&1 | tail -1)" "quick=$quick" \
  "steps=$steps" "budget=$budget"

# Build: the CLI, every test target labelled cuda (their names start with test_cuda), the
# benchmarks and the Python module for the torch Python's interpreter where it has pybind11
# and the Python headers (the host's, else a Python of the same version's from the pack;
# AUTO: left out otherwise, and the Python steps say so).
t0=$(date +%s)
cmake_args=(-S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DBURST_WITH_CUDA=ON -DBURST_WITH_TORCH=OFF
            -DBURST_WITH_PYTHON=AUTO -DPython3_EXECUTABLE="$(command -v "$py" || echo "$py")"
            -DBURST_INSTALL=OFF -DCMAKE_POLICY_VERSION_MINIMUM=3.5)
pybind_dir=$("$py" -m pybind11 --cmakedir 2>/dev/null)
[[ -n $pybind_dir ]] && cmake_args+=(-Dpybind11_DIR="$pybind_dir")
py_headers=$(python_headers "$py" "$deps")
[[ -n $deps && $py_headers == "$deps"/* ]] && cmake_args+=(-DPython3_INCLUDE_DIR="$py_headers")
command -v ninja >/dev/null && cmake_args+=(-G Ninja)
mapfile -t -O "${#cmake_args[@]}" cmake_args < <(deps_cmake_args "$deps")
log=$build/gpu_host_check.build.log
mkdir -p "$build"
built=false
cuda_tests=()
if timeout 90 cmake "${cmake_args[@]}" >"$log" 2>&1; then
  mapfile -t cuda_tests < <(cmake --build "$build" --target help 2>/dev/null |
    grep -oE '\b(test_cuda[a-z0-9_]*|test_bench_gpu|burst_python|cuda_step_bench)\b' | sort -u)
  # Keep going past a target that fails to compile (another compiler here than where the code
  # was written): the steps whose binaries were built still run, the others fail by name.
  keep_going=(-- -k)
  [[ ${cmake_args[*]} == *"-G Ninja"* ]] && keep_going=(-- -k 0)
  # A binary left by an earlier call (the machine keeps the folder while warm) must not stand in
  # for a target that fails to compile now: the targets' outputs go first (a relink, seconds).
  rm -f "$build/tools/burst" "$build"/tests/test_cuda* "$build/tests/test_bench_gpu" \
    "$build/bench/cuda_step_bench" "$build"/python/burst/_C*.so
  if timeout "${BURST_BUILD_TIMEOUT:-300}" cmake --build "$build" -j "$cores" --target burst_cli "${cuda_tests[@]}" \
    "${keep_going[@]}" >>"$log" 2>&1; then
    built=true
  elif [[ -x $build/tools/burst ]]; then
    built=partial
  fi
fi
tail -200 "$log" >"$outdir/build.log"
emit build "ok=$([[ $built == true ]] && echo true || echo false)" "partial=$([[ $built == partial ]] && echo true || echo false)" \
  "failed=$(grep -E '^FAILED: ' "$log" | head -5 | tr '\n' '|' | tr -d '"\\')" \
  "seconds=$(($(date +%s) - t0))" "targets=${cuda_tests[*]:-}" "python_headers=${py_headers:-none}" \
  "cudnn=$(grep -m1 -o 'cuDNN step backend [A-Z]*' "$log" | awk '{print $NF}')" \
  "python_module=$([[ -f $build/python/burst/__init__.py ]] && echo true || echo false)"
if [[ $built == false ]]; then
  echo "build failed: see $outdir/build.log" >&2
  emit "done" "seconds=$(($(date +%s) - t_start))" "ok=false"
  summary
  exit 1
fi
burst=$build/tools/burst
timeout 30 "$burst" info | "$py" -c 'import json,sys; r=json.load(sys.stdin); r["check"]="burst_info"; print(json.dumps(r))' >>"$out"

# The planted-error build (scripts/cuda_plant_check.sh: burst_cuda with -DBURST_CUDA_PLANT_ERROR=ON
# beside this build, without cuDNN) in the background on half the cores at the lowest priority
# while the GPU steps run; its tests run once it is done (step 7).
plant_log=$outdir/plant_check.log
plant_dir=$build-plant
deps_args=$(deps_cmake_args "$deps" | tr '\n' ' ')
# setsid is the background job itself (not inside an `&&` list, which bash would background as a
# subshell): its pid is then the new session's process group, which step 7 kills on a timeout.
plant_pid=
if want plant; then
  setsid env -u OMP_NUM_THREADS BURST_CMAKE_ARGS="$deps_args" BURST_PLANT_BUILD_DIR="$plant_dir" \
    BURST_PLANT_JOBS=$(((cores + 1) / 2)) nice -n 19 scripts/cuda_plant_check.sh --build-only >"$plant_log" 2>&1 &
  plant_pid=$!
  # Whatever ends this call (its end, or a watchdog's TERM: bash runs the EXIT trap then too; a
  # TERM trap of its own would wait for the running step first), the background build ends too.
  trap '[[ -n $plant_pid ]] && kill -TERM -- -"$plant_pid" 2>/dev/null' EXIT
fi

# 1. The step kernels against the CPU kernel on the same rounded inputs (max_abs_diff_vs_cpu_kernel).
want checks && for mask in full causal sliding_window_causal causal_document; do
  step "check_$mask" 30 "$burst" bench kernel --device cuda --seq 1024 --heads 4 --kv-heads 2 --dim 64 \
    --dtype bf16 --mask "$mask" --pass both --repeats 1 --warmup 0 --check-max-seq 1024
done

# 2. The step kernels beside PyTorch, per backend, on the same shapes (S = $seq, bf16, full and
# causal), then the kernels' fixed table (cuda_step_bench: Fast, FastMma, cuDNN, CUDA events).
want kernels && for hd in "8 64" "32 128"; do
  read -r h d <<<"$hd"
  for mask in full causal; do
    step "kernel_h${h}_d${d}_$mask" 60 "$burst" bench kernel --device cuda --seq "$seq" --heads "$h" --dim "$d" \
      --dtype bf16 --mask "$mask" --pass both --repeats "$repeats" --warmup 1 --check-max-seq 0
  done
done
want kernels && step torch_sdpa 120 "$py" bench/torch_sdpa.py --device cuda --seq "$seq" --shapes 8x64,32x128 --dtypes bf16 \
  --masks full,causal --passes fwd,bwd --backends cudnn,flash,efficient --repeats "$repeats" --warmup 1
# cuda_step_bench (CUDA events): Auto's measured choice per case (its records name the kernel),
# cuDNN and FastMma forced, and the twin.
want kernels && [[ -x $build/bench/cuda_step_bench ]] && step cuda_step_bench 90 "$build/bench/cuda_step_bench" "$repeats"

# 3. The cuda tests, four at a time (the MPI ones one after another: RESOURCE_LOCK), and one
# record per test (scripts/gpu_summary.py --ctest reads the log).
if ! want ctest; then
  :
elif (($(budget_left) >= 30)); then
  t0=$(date +%s)
  limit=$(($(budget_left) < 150 ? $(budget_left) : 150))
  timeout --kill-after=5 "$limit" ctest --test-dir "$build" -L cuda -j 4 --output-on-failure \
    >"$outdir/ctest_cuda.log" 2>&1
  rc=$?
  summary_line=$(grep -E 'tests passed|tests failed' "$outdir/ctest_cuda.log" | tail -1 | tr -d '"\\')
  emit ctest_cuda "rc=$rc" "seconds=$(($(date +%s) - t0))" "limit=$limit" "summary=$summary_line"
  "$py" scripts/gpu_summary.py --ctest "$outdir/ctest_cuda.log" >>"$out" 2>>"$errs"
else
  emit step_skipped "step=ctest_cuda" "reason=the 8-minute budget is spent"
fi

# 4. The long run: exact causal attention over $long tokens (H 8, D 64, bf16), forward +
# backward: burst at P = 1 (the step kernels on the whole sequence; no warm-up, one run of each
# pass, the forward's record written before the backward runs), PyTorch's cudnn backend on the
# same S (the fastest at 32K; one warm-up). burst at P = 4 ranks sharing the GPU on that S and
# PyTorch's flash backend come later (8, 10).
want long && step long_p1 150 "$burst" bench kernel --device cuda --seq "$long" --heads 8 --dim 64 --dtype bf16 \
  --mask causal --pass both --repeats 1 --warmup 0 --check-max-seq 0
want long_torch && step long_torch 90 "$py" bench/torch_sdpa.py --device cuda --seq "$long" --shapes 8x64 --dtypes bf16 \
  --masks causal --passes fwd,bwd --backends cudnn --repeats 1 --warmup 1

# 5. burst's GPU kernels and PyTorch's backends against fp64 on the same bf16 inputs.
if ! want exactness; then
  :
elif [[ -f $build/python/burst/__init__.py ]]; then
  step exactness 60 env PYTHONPATH="$build/python" "$py" bench/gpu_exactness.py
else
  emit step_skipped "step=exactness" "reason=no Python module in $build (pybind11 or the Python headers missing for $py)"
fi

# 6. torch CUDA tensors through the Python functions, autograd included (tests/py/test_cuda.py).
if ! want pytest; then
  :
elif [[ -f $build/python/burst/__init__.py ]] && (($(budget_left) >= 30)); then
  t0=$(date +%s)
  PYTHONPATH=$build/python timeout --kill-after=5 $(($(budget_left) < 90 ? $(budget_left) : 90)) "$py" -m pytest \
    -q -p no:cacheprovider -rs tests/py/test_cuda.py >"$outdir/pytest_cuda.log" 2>&1
  rc=$?
  emit pytest_cuda "rc=$rc" "seconds=$(($(date +%s) - t0))" "summary=$(tail -3 "$outdir/pytest_cuda.log" | tr '\n' '|' | tr -d '"\\')"
elif [[ -f $build/python/burst/__init__.py ]]; then
  emit step_skipped "step=pytest_cuda" "reason=the 8-minute budget is spent"
else
  emit step_skipped "step=pytest_cuda" "reason=no Python module in $build (pybind11 or the Python headers missing for $py)"
fi

# 7. A planted error must fail a cuda test: its tests run once the background build is done —
# here when it already is, else after step 8 when it is then, else after the strategies at P = 4
# (step 9), waiting while the budget lasts.
plant_done=false
plant_tests() {  # plant_tests now|wait: run the planted-error tests if built (wait: for the build)
  [[ -z $plant_pid || $plant_done == true ]] && return 0
  if [[ $1 == wait ]]; then
    while kill -0 "$plant_pid" 2>/dev/null && (($(budget_left) >= 40)); do sleep 2; done
  fi
  if kill -0 "$plant_pid" 2>/dev/null; then
    [[ $1 == wait ]] || return 0
    kill -TERM -- -"$plant_pid" 2>/dev/null
    emit plant_check_skipped "reason=its build had not finished within the budget" \
      "last_line=$(tail -1 "$plant_log" | tr -d '"\\')"
  elif ! wait "$plant_pid"; then
    emit plant_check "rc=1" "caught=false" "reason=its build failed" "last_line=$(tail -1 "$plant_log" | tr -d '"\\')"
  elif (($(budget_left) >= 20)); then
    local t0 rc
    t0=$(date +%s)
    local limit=$(($(budget_left) - 5))
    ((limit > 90)) && limit=90  # the build is done: its tests take seconds, a hang not the rest
    timeout --kill-after=5 "$limit" env -u OMP_NUM_THREADS BURST_CMAKE_ARGS="$deps_args" \
      BURST_PLANT_BUILD_DIR="$plant_dir" scripts/cuda_plant_check.sh >>"$plant_log" 2>&1
    rc=$?
    if ((rc == 124 || rc == 137)); then
      emit plant_check_skipped "reason=its tests ran past the budget (rc $rc)" \
        "last_line=$(tail -1 "$plant_log" | tr -d '"\\')"
    else
      emit plant_check "rc=$rc" "caught=$([[ $rc == 0 ]] && echo true || echo false)" \
        "seconds=$(($(date +%s) - t0))" "last_line=$(tail -1 "$plant_log" | tr -d '"\\')"
    fi
  else
    emit plant_check_skipped "reason=the 8-minute budget is spent"
  fi
  plant_done=true
}
plant_tests now

# 9. The strategies on GPU ranks sharing the GPU, after step 8: every strategy at P = 4, then
# burst at P = 1, 2 and 3 (their exactness at P = 1..4 is test_cuda_dist's, in step 3), at 3/8
# of the kernels' S (12288: a multiple of 24, as zigzag at P = 3 needs).
dist_cases=()
want dist && mapfile -t dist_cases < <(gpu_dist_cases $((seq * 3 / 8)))
dist_runs() {  # dist_runs 4|other: the cases at P = 4, or the others
  local case P strategy args
  for case in "${dist_cases[@]}"; do
    read -r P strategy args <<<"$case"
    if [[ $1 == 4 ]]; then
      [[ $P == 4 ]] || continue
    elif [[ $P == 4 ]]; then
      continue
    fi
    # shellcheck disable=SC2086  # args: the case's options, split on purpose
    step "dist_${strategy}_p$P" 30 mpirun -n "$P" --bind-to none "$burst" bench dist --device cuda \
      $args --repeats 3 --warmup 1 </dev/null
  done
}
# 8. The long run at P = 4 ranks sharing the GPU (zigzag; time and exposed communication): a
# target, so before the strategies' records (whose exactness is test_cuda_dist's).
want long && step long_p4 120 mpirun -n 4 --bind-to none "$burst" bench dist --device cuda --strategy burst \
  --layout zigzag --seq "$long" --heads 8 --dim 64 --dtype bf16 --mask causal --pass both --repeats 1 --warmup 0 \
  </dev/null
plant_tests now

dist_runs 4
plant_tests wait

dist_runs other

# 10. PyTorch's second backend on the long run's S (whether cuDNN stays the fastest there).
want long_torch && step long_torch_flash 90 "$py" bench/torch_sdpa.py --device cuda --seq "$long" --shapes 8x64 --dtypes bf16 \
  --masks causal --passes fwd,bwd --backends flash --repeats 1 --warmup 1

emit "done" "seconds=$(($(date +%s) - t_start))" "ok=true"
echo "wrote $(wc -l <"$out") JSON lines to $out in $(($(date +%s) - t_start)) s"
summary
