#!/usr/bin/env bash
# The AMX host check, sized for ONE call on a 16-core host (<= 7 minutes): build burst without
# libtorch/Python, run the `amx` tests and the bf16 microkernel twins, then in alternated rounds `burst bench kernel` (fp32 and
# bf16, fwd and bwd, full and causal, 1 thread and all cores, B=1 H=8 S=4096 D=64; the FMA and
# AMX ceiling probes beside each) and PyTorch's CPU attention on the same shapes
# (bench/torch_sdpa.py), all as JSON lines in one file, and the target ratios beside it
# (scripts/amx_summary.py: bf16 forward vs torch and vs burst fp32 on one core, 16-thread vs
# 1-thread rates, backward vs torch; median of the runs with min and max). Then more alternated
# rounds of just the one-core forward targets' three runs (burst bf16, burst fp32, torch bf16;
# full and causal), so each target ratio is a median of per-round paired ratios with its spread.
# Meant for an Intel
# AMX host without network or apt; runs on any x86-64 Linux host (AMX then reported absent, its
# tests SKIPPED).
#
# Usage:  scripts/amx_host_check.sh [OUT.jsonl]          (default amx_host_check.jsonl)
#         (beside it: OUT.ctest.log, the amx tests' output; OUT.summary.txt / OUT.summary.json)
#         On the device machine: scripts/amx_host_check.sh "$OUT/amx.jsonl" (4 files back)
#         scripts/amx_host_check.sh --pack DIR           (on a Debian host with the -dev packages:
#                                                        copy CLI11, nlohmann-json and GoogleTest
#                                                        headers, CMake files and static libs to DIR)
# Environment: BURST_DEPS_PREFIX  where --pack put them (default ./third_party_carry if present;
#                                 else the system's own packages are used)
#              BURST_BUILD_DIR    build directory (default build-amx)
#              BURST_CHECK_THREADS thread counts for the benchmarks (default "1 <nproc>")
#              BURST_CHECK_REPEATS timed runs per benchmark and round (default 5)
#              BURST_CHECK_ROUNDS alternated rounds (default 2)
#              BURST_PYTHON       Python with torch for the anchor (default: the first python3 with torch)
#              BURST_CHECK_SEQ    S of the benchmarks (default 4096; smaller for a quick trial)
#              BURST_CHECK_FWD_ROUNDS rounds of the one-core forward targets (default 5)
#              BURST_CHECK_BUDGET_S no forward-target round starts past this many seconds since
#                                 the start (default 360)
# Budget on a 16-core host: build ~35 s with -j16, amx tests ~60 s, a round ~90 s, a forward-
# target round ~15 s (two processes of `burst bench kernel` and one of torch per mask).
set -uo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=scripts/host_check_common.sh
source scripts/host_check_common.sh
check_args "$0" "$@"
if [[ ${1:-} == --pack ]]; then
  pack_deps "${2:?usage: --pack DIR}"
  exit 0
fi

out=${1:-amx_host_check.jsonl}
build=${BURST_BUILD_DIR:-build-amx}
deps=$(deps_prefix)
threads=${BURST_CHECK_THREADS:-"1 $(nproc)"}
repeats=${BURST_CHECK_REPEATS:-5}
rounds=${BURST_CHECK_ROUNDS:-2}
fwd_rounds=${BURST_CHECK_FWD_ROUNDS:-5}
budget=${BURST_CHECK_BUDGET_S:-360}
seq=${BURST_CHECK_SEQ:-4096}
# The Python for JSON and the torch anchor: BURST_PYTHON, else the first python3 that imports torch.
py=${BURST_PYTHON:-}
if [[ -z $py ]]; then
  for cand in python3 /usr/bin/python3; do
    if "$cand" -c 'import torch' >/dev/null 2>&1; then py=$cand; break; fi
  done
  py=${py:-python3}
fi
: >"$out"
t_start=$(date +%s)


# The host.
model=$(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1)
flags=$(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2)
has() { [[ " $flags " == *" $1 "* ]] && echo true || echo false; }
emit host "cpu_model=$model" "nproc=$(nproc)" "amx_bf16=$(has amx_bf16)" "amx_tile=$(has amx_tile)" \
  "amx_fp16=$(has amx_fp16)" "avx512_bf16=$(has avx512_bf16)" "avx512_fp16=$(has avx512fp16)" \
  "avx512f=$(has avx512f)" "avx2=$(has avx2)" "kernel=$(uname -r)" "compiler=$(c++ --version | head -1)" \
  "cmake=$(cmake --version | head -1)" "deps_prefix=${deps:-system}" "flags=$flags"

# Build (only what the check runs).
t0=$(date +%s)
cmake_args=(-S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DBURST_WITH_TORCH=OFF -DBURST_WITH_PYTHON=OFF
            -DBURST_INSTALL=OFF -DCMAKE_POLICY_VERSION_MINIMUM=3.5)
command -v ninja >/dev/null && cmake_args+=(-G Ninja)
mapfile -t -O "${#cmake_args[@]}" cmake_args < <(deps_cmake_args "$deps")
log=$build/amx_host_check.build.log
mkdir -p "$build"
if cmake "${cmake_args[@]}" >"$log" 2>&1 &&
   cmake --build "$build" -j "$(nproc)" --target burst_cli test_attention_amx test_dispatch \
     test_microkernels_bf16 test_strategies_bf16 >>"$log" 2>&1; then
  emit build "ok=true" "seconds=$(($(date +%s) - t0))"
else
  emit build "ok=false" "seconds=$(($(date +%s) - t0))" "log_tail=$(tail -20 "$log" | tr '\n' '|' | tr -d '"\\')"
  echo "build failed: see $log" >&2
  exit 1
fi
burst=$build/tools/burst
[[ -x $burst ]] || burst=$(find "$build" -name burst -type f -perm -u+x | head -1)
"$burst" info | "$py" -c 'import json,sys; r=json.load(sys.stdin); r["check"]="burst_info"; print(json.dumps(r))' >>"$out"

# The amx tests (emulated tiles everywhere; hardware tiles SKIPPED without AMX) and the rule table.
t0=$(date +%s)
ctest_out=$(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
  timeout 150 ctest --test-dir "$build" -L amx -R 'test_attention_amx|test_strategies_bf16_np[12]$' \
  --output-on-failure 2>&1)
rc=$?
echo "$ctest_out" >"${out%.jsonl}.ctest.log"
summary=$(echo "$ctest_out" | grep -E 'tests passed|Skipped|\*\*\*' | tr '\n' '|' | tr -d '"\\')
emit ctest_amx "rc=$rc" "seconds=$(($(date +%s) - t0))" "summary=$summary"
hw=$("$build"/tests/test_attention_amx --gtest_filter='AmxHardware.*' 2>&1 | grep -m1 -E 'SKIPPED|PASSED|FAILED' |
  tr -d '"\\')
emit amx_hardware_tests "result=$hw"
"$build"/tests/test_dispatch >/dev/null 2>&1
emit dispatch_rule_test "rc=$?"
# The bf16 microkernels against their twins on every bf16 table here (the AMX one included).
mk_out=$("$build"/tests/test_microkernels_bf16 2>&1)
rc=$?
emit microkernels_bf16_tests "rc=$rc" "result=$(echo "$mk_out" | grep -E '^\[  (PASSED|FAILED) ' | tr '\n' '|' | tr -d '"\\')"

# Benchmarks, in BURST_CHECK_ROUNDS alternated rounds (default 2): each round runs, for every
# thread count and mask, burst fp32, burst bf16 and then PyTorch's CPU attention (fp32, bf16)
# on the same shapes (bench/torch_sdpa.py), each with `repeats` timed runs (median, min, max);
# records tagged "round". Each burst record carries the FMA probe and, for bf16 on AMX /
# AVX512-BF16, the tile or vdpbf16ps probe timed beside it (fma_peak_gflops_1core,
# bf16_dot_peak_gflops_1core).
tag() {  # tag ROUND [PHASE]: the JSON lines of stdin with "round" and "phase" added, to the output
  "$py" -c '
import json, sys
for line in sys.stdin:
    if line.startswith("{"):
        r = json.loads(line); r["round"] = int(sys.argv[1]); r["phase"] = sys.argv[2]; print(json.dumps(r))' \
    "$1" "${2:-all}" >>"$out"
}
for ((round = 1; round <= rounds; round++)); do
  for t in $threads; do
    for mask in full causal; do
      for dt in fp32 bf16; do
        timeout 120 "$burst" bench kernel --batch 1 --heads 8 --seq "$seq" --dim 64 --threads "$t" --dtype "$dt" \
          --mask "$mask" --pass both --repeats "$repeats" --warmup 1 2>>"$build/amx_host_check.bench.err" |
          tag "$round" || emit bench_failed "round=$round" "threads=$t" "dtype=$dt" "mask=$mask"
      done
      timeout 150 "$py" bench/torch_sdpa.py --batch 1 --heads 8 --seq "$seq" --dim 64 --dtypes fp32,bf16 \
        --threads "$t" --masks "$mask" --passes fwd,bwd --repeats "$repeats" --warmup 1 | tag "$round" ||
        emit torch_sdpa_failed "round=$round" "threads=$t" "mask=$mask"
    done
  done
done

# The one-core forward targets: rounds of the three runs each target ratio compares, alternated
# (burst bf16, burst fp32, torch bf16; full then causal), records tagged phase "fwd1"; the
# summary takes each ratio per round (here and in the rounds above) and reports their median
# with the smallest and largest. No round starts past BURST_CHECK_BUDGET_S.
for ((round = 1; round <= fwd_rounds; round++)); do
  if (($(date +%s) - t_start > budget)); then
    emit fwd1_rounds_cut "done=$((round - 1))" "budget_s=$budget"
    break
  fi
  for mask in full causal; do
    for dt in bf16 fp32; do
      timeout 60 "$burst" bench kernel --batch 1 --heads 8 --seq "$seq" --dim 64 --threads 1 --dtype "$dt" \
        --mask "$mask" --pass fwd --repeats "$repeats" --warmup 1 2>>"$build/amx_host_check.bench.err" |
        tag "$round" fwd1 || emit bench_failed "phase=fwd1" "round=$round" "dtype=$dt" "mask=$mask"
    done
    timeout 90 "$py" bench/torch_sdpa.py --batch 1 --heads 8 --seq "$seq" --dim 64 --dtypes bf16 \
      --threads 1 --masks "$mask" --passes fwd --repeats "$repeats" --warmup 1 | tag "$round" fwd1 ||
      emit torch_sdpa_failed "phase=fwd1" "round=$round" "mask=$mask"
  done
done

emit done "seconds=$(($(date +%s) - t_start))"
"$py" scripts/amx_summary.py "$out" --json "${out%.jsonl}.summary.json" >"${out%.jsonl}.summary.txt" 2>&1
cat "${out%.jsonl}.summary.txt"
echo "wrote $(wc -l <"$out") JSON lines to $out in $(($(date +%s) - t_start)) s"
