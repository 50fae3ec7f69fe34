#!/usr/bin/env bash
# The many-core host check, sized for ONE call on a 16-core host (<= 7 minutes): build burst
# without libtorch/Python; the kernels' thread scaling (`burst bench kernel`, fp32 causal, one
# rank's shape, 1/2/4/8/16 threads) written into a `burst calibrate` spec, and the calibrated
# ranks x threads recommendation (`burst simulate --cores-per-node`); then ROUNDS alternated
# rounds (default 5), each running every case once (`mpirun --bind-to core --map-by core`, one
# timed fwd+bwd per case, no warm-up besides the forward bench dist always runs first): burst at
# P = 1 (fp32, bf16); at P = 8 and 16 burst, ring, usp, allgather and ulysses (H % P == 0) in
# fp32 and bf16, 1 thread per rank; burst as 8x2, 4x4 and 2x8 ranks x threads. Round 1 also
# writes every case's per-rank, per-step timeline (`--timeline`) and runs burst and ring (fp32,
# the first P) once more with the last rank's kernels slowed by BURST_CHECK_SLOW (`bench dist
# --emulate-slow-rank -1 --slow-factor F`, docs/manycore.md § A slow rank, emulated), on top of
# whatever speed its core has. A round starts only if the
# last one fits in the budget left. Causal, zigzag, H 8, D 64, S = BURST_CHECK_SEQ (16384: five
# rounds fit; the targets' S 32768 fits about two).
# Everything as JSON lines in one file: {"check": ...} records of the script, the bench's own
# records ("bench": "dist" / "kernel" / "timeline", tagged with "case" and "round"), the
# simulator's ("bench": "simulate_split"); and beside it OUT.summary.txt / OUT.summary.json
# (scripts/manycore_summary.py: medians with min/max per case, exposed communication,
# efficiency, the targets).
#
# Usage:  scripts/manycore_host_check.sh [--quick] [OUT.jsonl]   (default manycore_host_check.jsonl)
#         On the device machine: scripts/manycore_host_check.sh "$OUT/manycore.jsonl" (3 files back)
#         scripts/manycore_host_check.sh --pack DIR   (on a Debian host with the -dev packages: copy
#                                                     CLI11, nlohmann-json and GoogleTest headers,
#                                                     CMake files and static libs to DIR)
#   --quick  S = 2048, H 4, P in {1, 2, 4}, splits 2x2 1x4, 2 rounds, ranks oversubscribed and
#            unbound (`--oversubscribe --bind-to none`): the script's own test on a small machine.
# Environment: BURST_DEPS_PREFIX  where --pack put them (default ./third_party_carry if present;
#                                 else the system's own packages are used)
#              BURST_BUILD_DIR    build directory (default build-manycore)
#              BURST_CHECK_BUDGET seconds after which no new round starts (default 380)
#              BURST_CHECK_ROUNDS rounds (default 5)
#              BURST_CHECK_SEQ    S_global (default 16384)
#              BURST_CORES        cores to use (default 16; P and the splits stop there)
#              BURST_BIN          an already built `burst` to use instead of building one
#              BURST_CHECK_RANKS  the P > 1 of the strategy cases (default "8 16")
#              BURST_CHECK_STRATEGIES  strategies at P > 1 (default "burst ring usp allgather ulysses")
#              BURST_CHECK_DTYPES dtypes of the strategy cases (default "fp32 bf16")
#              BURST_CHECK_SPLITS ranks x threads splits (default "8x2 4x4 2x8")
#              BURST_CHECK_SLOW   slow factors of round 1's emulated slow rank (default "1.3"; "" none)
# Budget on the 16-core Xeon (S 16384): build ~40 s with -j16, calibrate + kernels ~40 s, one
# round ~60 s.
set -uo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=scripts/host_check_common.sh
source scripts/host_check_common.sh
check_args "$0" "$@"
if [[ ${1:-} == --pack ]]; then
  pack_deps "${2:?usage: --pack DIR}"
  exit 0
fi

quick=0
if [[ ${1:-} == --quick ]]; then quick=1; shift; fi
out=${1:-manycore_host_check.jsonl}
build=${BURST_BUILD_DIR:-build-manycore}
deps=$(deps_prefix)
budget=${BURST_CHECK_BUDGET:-380}
cores=${BURST_CORES:-16}
rounds=${BURST_CHECK_ROUNDS:-5}
dtypes=${BURST_CHECK_DTYPES:-"fp32 bf16"}
strategies=${BURST_CHECK_STRATEGIES:-"burst ring usp allgather ulysses"}
slow_factors=${BURST_CHECK_SLOW-"1.3"}
py=$(command -v python3 || echo /usr/bin/python3)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=0
if ((quick)); then
  seq=2048 heads=4 cores=4 ranks_list="2 4" splits="2x2 1x4" calib_seqs=256,512 rounds=${BURST_CHECK_ROUNDS:-2}
  thread_counts="1 2 4"
  bind=(--oversubscribe --bind-to none)
else
  seq=${BURST_CHECK_SEQ:-16384} heads=8 ranks_list=${BURST_CHECK_RANKS:-"8 16"}
  splits=${BURST_CHECK_SPLITS-"8x2 4x4 2x8"} calib_seqs=512,1024,2048
  thread_counts=""
  for t in 1 2 4 8 16; do ((t <= cores)) && thread_counts+="$t "; done
  bind=(--bind-to core --map-by core)
fi
: >"$out"
t_start=$(date +%s)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Appends the JSON lines of file $2 to the output with "case": $1 and "round": $3 (default 0).
append_tagged() {
  "$py" - "$1" "$2" "${3:-0}" >>"$out" <<'EOF'
import json, sys
for line in open(sys.argv[2]):
    line = line.strip()
    if line.startswith("{"):
        rec = json.loads(line)
        rec["case"] = sys.argv[1]
        rec["round"] = int(sys.argv[3])
        print(json.dumps(rec))
EOF
}
elapsed() { echo $(($(date +%s) - t_start)); }

model=$(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1)
emit host "cpu_model=$model" "nproc=$(nproc)" "cores_used=$cores" "quick=$quick" "kernel=$(uname -r)" \
  "sockets=$(lscpu | sed -n 's/^Socket(s):[[:space:]]*//p' | head -1)" \
  "threads_per_core=$(lscpu | sed -n 's/^Thread(s) per core:[[:space:]]*//p' | head -1)" \
  "mpirun=$(mpirun --version 2>&1 | head -1)" "deps_prefix=${deps:-system}" "load_1m=$(cut -d' ' -f1 /proc/loadavg)"

# Build (only the CLI).
t0=$(date +%s)
cmake_args=(-S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DBURST_WITH_TORCH=OFF -DBURST_WITH_PYTHON=OFF
            -DBURST_INSTALL=OFF -DBURST_BUILD_TESTS=OFF -DCMAKE_POLICY_VERSION_MINIMUM=3.5)
command -v ninja >/dev/null && cmake_args+=(-G Ninja)
mapfile -t -O "${#cmake_args[@]}" cmake_args < <(deps_cmake_args "$deps")
[[ -n ${CMAKE_CXX_COMPILER_LAUNCHER:-} ]] && cmake_args+=("-DCMAKE_CXX_COMPILER_LAUNCHER=$CMAKE_CXX_COMPILER_LAUNCHER")
log=$build.log
if [[ -n ${BURST_BIN:-} ]]; then
  burst=$BURST_BIN
  emit build "ok=true" "skipped=true" "binary=$burst" "version=$("$burst" --version 2>&1 | head -1)"
elif cmake "${cmake_args[@]}" >"$log" 2>&1 && cmake --build "$build" -j "$(nproc)" --target burst_cli >>"$log" 2>&1; then
  emit build "ok=true" "seconds=$(($(date +%s) - t0))"
  burst=$build/tools/burst
else
  emit build "ok=false" "seconds=$(($(date +%s) - t0))" "log_tail=$(tail -c 3000 "$log")"
  echo "manycore_host_check: build failed (see $log)" >&2
  exit 1
fi

# One `burst bench dist` case: name, round, ranks, threads, dtype, bench options... One timed
# fwd+bwd (the bench's untimed forward first makes out and lse); round 1 also keeps its timeline.
run_case() {
  local name=$1 round=$2 P=$3 T=$4 dt=$5
  shift 5
  local map=("${bind[@]}")
  ((!quick && T > 1)) && map=(--bind-to core --map-by "slot:PE=$T")
  local tl=$tmp/$name.timeline.jsonl res=$tmp/$name.jsonl t0 tl_args=()
  ((round == 1)) && tl_args=(--timeline "$tl")
  rm -f "$tl"
  t0=$(date +%s)
  if OMP_NUM_THREADS=$T OMP_PROC_BIND=close OMP_PLACES=cores \
     timeout 120 mpirun -n "$P" "${map[@]}" -x OMP_NUM_THREADS -x OMP_PROC_BIND -x OMP_PLACES \
       "$burst" bench dist --seq "$seq" --heads "$heads" --dim 64 --mask causal --layout zigzag --dtype "$dt" \
       --pass both --threads "$T" --warmup 0 --repeats 1 "${tl_args[@]}" "$@" \
       </dev/null >"$res" 2>"$tmp/$name.err"; then
    append_tagged "$name" "$res" "$round"
    [[ -f $tl ]] && append_tagged "$name" "$tl" "$round"
    emit case "case=$name" "round=$round" "ok=true" "ranks=$P" "threads=$T" "seconds=$(($(date +%s) - t0))"
  else
    emit case "case=$name" "round=$round" "ok=false" "ranks=$P" "threads=$T" \
      "err_tail=$(tail -c 1500 "$tmp/$name.err")"
  fi
}

# The kernels' thread scaling on one rank's shape (the 4 x 4 split's S/4 rows, causal, fp32):
# forward and backward GFLOP/s at 1, 2, 4, 8, 16 threads on cores next to each other.
kseq=$((seq / 4))
for T in $thread_counts; do
  if OMP_NUM_THREADS=$T OMP_PROC_BIND=close OMP_PLACES=cores timeout 90 "$burst" bench kernel --batch 1 \
       --heads "$heads" --seq "$kseq" --dim 64 --mask causal --dtype fp32 --pass both --threads "$T" \
       --repeats 3 --warmup 1 >"$tmp/k.jsonl" 2>"$tmp/k.err"; then
    append_tagged "kernel_threads_T$T" "$tmp/k.jsonl"
  else
    emit kernel_threads_failed "threads=$T" "err_tail=$(tail -c 800 "$tmp/k.err")"
  fi
done

# The cost model (before the cases, so that a case that overruns cannot starve it): calibrate
# on all cores, 1 thread per rank; the measured thread scaling written into the spec
# (ClusterSpec::thread_scaling_forward/backward); the ranks x threads recommendation for burst
# and for any strategy, from the spec with the scaling ("_calibrated") and without it.
t0=$(date +%s)
spec=$tmp/spec.json
if timeout --kill-after=10 120 mpirun -n "$cores" "${bind[@]}" "$burst" calibrate --threads 1 --heads "$heads" --seqs "$calib_seqs" \
     --repeats 3 --name "manycore_${cores}" -o "$spec" </dev/null >"$tmp/calib.out" 2>"$tmp/calib.err"; then
  emit calibrate "ok=true" "seconds=$(($(date +%s) - t0))" "spec=@$spec"
  "$py" - "$out" "$spec" "$tmp/spec_scaled.json" <<'EOF'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
ks = [r for r in recs if r.get("bench") == "kernel" and str(r.get("case", "")).startswith("kernel_threads")]
spec = json.load(open(sys.argv[2]))
for p, key in (("fwd", "thread_scaling_forward"), ("bwd", "thread_scaling_backward")):
    rate = {r["threads"]: r["gflops"] for r in ks if r.get("pass") == p}
    if 1 in rate:
        spec[key] = [rate[t] / (t * rate[1]) if t in rate else 0.0 for t in range(1, max(rate) + 1)]
json.dump(spec, open(sys.argv[3], "w"), indent=1)
EOF
  emit thread_scaling "spec=@$tmp/spec_scaled.json"
  for variant in calibrated items; do
    sp=$tmp/spec_scaled.json
    [[ $variant == items ]] && sp=$spec
    for only in burst ""; do
      args=(--cluster "$sp" --nodes 1 --devices-per-node "$cores" --cores-per-node "$cores" --seq "$seq"
            --heads "$heads" --head-dim 64 --mask causal --pass fwd_bwd --dtype fp32 --format jsonl)
      [[ -n $only ]] && args+=(--strategy "$only" --layout zigzag)
      name=splits_${only:-any}
      [[ $variant == calibrated ]] && name+=_calibrated
      "$burst" simulate "${args[@]}" >"$tmp/sim.jsonl" 2>>"$tmp/sim.err" && append_tagged "$name" "$tmp/sim.jsonl"
    done
  done
  for P in 1 $ranks_list; do
    "$burst" simulate --cluster "$spec" --nodes 1 --devices-per-node "$P" --seq "$seq" --heads "$heads" \
      --head-dim 64 --mask causal --pass fwd_bwd --dtype fp32 --format jsonl >"$tmp/sim.jsonl" 2>>"$tmp/sim.err" &&
      append_tagged "simulate_P$P" "$tmp/sim.jsonl"
  done
else
  emit calibrate "ok=false" "err_tail=$(tail -c 1500 "$tmp/calib.err")"
fi
for P in $ranks_list; do
  "$burst" plan --strategy burst --layout zigzag --ranks "$P" --seq "$seq" --heads "$heads" --dim 64 --mask causal \
    --json >"$tmp/plan.json" 2>/dev/null && emit plan "ranks=$P" "strategy=burst" "plan=@$tmp/plan.json"
done

# The cases of one round, one per line: name ranks threads dtype strategy. The strategies
# alternate inside each (P, dtype).
round_cases() {
  local dt s P split r t
  for dt in $dtypes; do echo "burst_P1_$dt 1 1 $dt burst"; done
  for P in $ranks_list; do
    for dt in $dtypes; do
      for s in $strategies; do
        [[ $s == ulysses ]] && ((heads % P != 0)) && continue
        echo "${s}_P${P}_$dt $P 1 $dt $s"
      done
    done
  done
  for split in $splits; do
    r=${split%x*} t=${split#*x}
    echo "burst_${r}x${t}_fp32 $r $t fp32 burst"
  done
}
for P in $ranks_list; do
  if [[ " $strategies " == *" ulysses "* ]] && ((heads % P != 0)); then
    emit skipped "case=ulysses_P$P" "reason=ulysses needs H % P == 0 (H=$heads)"
  fi
done

last=0
for ((round = 1; round <= rounds; round++)); do
  if ((round > 1 && $(elapsed) + last > budget)); then
    emit round_skipped "round=$round" "reason=the last round took ${last} s of a ${budget} s budget" \
      "elapsed=$(elapsed)"
    break
  fi
  r0=$(date +%s)
  while read -r name P T dt s <&3; do  # fd 3: mpirun reads (and would eat) stdin
    run_case "$name" "$round" "$P" "$T" "$dt" --strategy "$s" </dev/null
  done 3< <(round_cases)
  if ((round == 1)); then  # the emulated slow rank: the last one, at the first P
    P=${ranks_list%% *}
    for f in $slow_factors; do
      for s in burst ring; do
        run_case "${s}_P${P}_fp32_slow$f" "$round" "$P" 1 fp32 --strategy "$s" --emulate-slow-rank=-1 \
          --slow-factor "$f" </dev/null
      done
    done
  fi
  last=$(($(date +%s) - r0))
  emit round "round=$round" "seconds=$last" "elapsed=$(elapsed)" "load_1m=$(cut -d' ' -f1 /proc/loadavg)"
done
emit done "elapsed=$(elapsed)" "load_1m=$(cut -d' ' -f1 /proc/loadavg)"
"$py" scripts/manycore_summary.py "$out" --json "${out%.jsonl}.summary.json" >"${out%.jsonl}.summary.txt" 2>&1
cat "${out%.jsonl}.summary.txt" >&2
echo "manycore_host_check: $(wc -l <"$out") records in $out ($(elapsed) s)" >&2
