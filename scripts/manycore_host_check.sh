#!/usr/bin/env bash
# The many-core host check: build burst without libtorch/Python, then on one host with 16 cores
# (one rank per core, `mpirun --bind-to core --map-by core`): forward+backward of burst, ring,
# usp, allgather and ulysses at causal, zigzag, S = 32768, H 8, D 64, fp32, 1 thread per rank,
# for P = 1, 2, 4, 8, 16, each with its per-rank, per-step timeline (`burst bench dist
# --timeline`); burst as 16x1, 8x2, 4x4 and 2x8 ranks x threads; `burst calibrate` on 16 ranks
# and the cost model's ranks x threads recommendation (`burst simulate --cores-per-node 16`) and
# plan (`burst plan`). Everything as JSON lines in one file: {"check": ...} records of the
# script, the bench's own records ("bench": "dist"), its timeline records ("bench":
# "timeline", tagged with "case"), the simulator's ("bench": "simulate_split").
#
# Usage:  scripts/manycore_host_check.sh [--quick] [OUT.jsonl]   (default manycore_host_check.jsonl)
#         scripts/manycore_host_check.sh --pack DIR   (on a Debian host with the -dev packages: copy
#                                                     CLI11, nlohmann-json and GoogleTest headers,
#                                                     CMake files and static libs to DIR)
#   --quick  the same cases at S = 2048, H 4, P up to 4, ranks oversubscribed and unbound
#            (`--oversubscribe --bind-to none`): the script's own test on a small machine.
# Environment: BURST_DEPS_PREFIX  where --pack put them (default ./third_party_carry if present;
#                                 else the system's own packages are used)
#              BURST_BUILD_DIR    build directory (default build-manycore)
#              BURST_CHECK_BUDGET seconds after which the remaining cases are skipped (recorded as
#                                 skipped), default 450 (the check must end within 8 minutes)
#              BURST_CORES        cores to use (default 16; P and the splits stop there)
#              BURST_BIN          an already built `burst` to use instead of building one
#              BURST_CHECK_RANKS  the P of the strong-scaling cases (default "1 2 4 8 16")
#              BURST_CHECK_STRATEGIES  strategies at P > 2 (default "burst ring usp allgather ulysses")
#              BURST_CHECK_SPLITS ranks x threads splits (default "8x2 4x4 2x8")
# Repeats: P = 1, 2, 4 one timed run without warm-up (a P = 1 fwd+bwd is ~45 s on a 16-core Xeon),
# P = 8, 16 and the splits 1 warm-up + 1 timed run. Budget: build ~40 s with -j16, calibrate
# ~30 s, cases ~5 min on that host.
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
budget=${BURST_CHECK_BUDGET:-450}
cores=${BURST_CORES:-16}
py=$(command -v python3 || echo /usr/bin/python3)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=0
if ((quick)); then
  seq=2048 heads=4 cores=4 ranks_list="1 2 4" splits="2x2 1x4" calib_seqs=256,512
  bind=(--oversubscribe --bind-to none)
else
  seq=32768 heads=8 ranks_list=${BURST_CHECK_RANKS:-"1 2 4 8 16"} splits=${BURST_CHECK_SPLITS-"8x2 4x4 2x8"}
  calib_seqs=512,1024,2048
  bind=(--bind-to core --map-by core)
fi
: >"$out"
t_start=$(date +%s)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Appends the JSON lines of file $2 to the output with "case": $1 added.
append_tagged() {
  "$py" - "$1" "$2" >>"$out" <<'EOF'
import json, sys
for line in open(sys.argv[2]):
    line = line.strip()
    if line.startswith("{"):
        rec = json.loads(line)
        rec["case"] = sys.argv[1]
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

# One `burst bench dist` case: name, ranks, threads, warm-ups, repeats, bench options...
run_case() {
  local name=$1 P=$2 T=$3 warmup=$4 repeats=$5
  shift 5
  if (($(elapsed) > budget)); then
    emit skipped "case=$name" "reason=budget of ${budget} s spent" "elapsed=$(elapsed)"
    return
  fi
  local map=("${bind[@]}")
  ((!quick && T > 1)) && map=(--bind-to core --map-by "slot:PE=$T")
  local tl=$tmp/$name.timeline.jsonl res=$tmp/$name.jsonl t0
  t0=$(date +%s)
  if OMP_NUM_THREADS=$T OMP_PROC_BIND=close OMP_PLACES=cores \
     mpirun -n "$P" "${map[@]}" -x OMP_NUM_THREADS -x OMP_PROC_BIND -x OMP_PLACES \
       "$burst" bench dist --seq "$seq" --heads "$heads" --dim 64 --mask causal --layout zigzag --dtype fp32 \
       --pass both --threads "$T" --warmup "$warmup" --repeats "$repeats" --timeline "$tl" "$@" \
       >"$res" 2>"$tmp/$name.err"; then
    append_tagged "$name" "$res"
    append_tagged "$name" "$tl"
    emit case "case=$name" "ok=true" "ranks=$P" "threads=$T" "seconds=$(($(date +%s) - t0))"
  else
    emit case "case=$name" "ok=false" "ranks=$P" "threads=$T" "err_tail=$(tail -c 1500 "$tmp/$name.err")"
  fi
}

# The cost model first (so a case that overruns cannot starve it): calibrate on all cores,
# 1 thread per rank, then the ranks x threads recommendation for burst and for any strategy.
t0=$(date +%s)
spec=$tmp/spec.json
if mpirun -n "$cores" "${bind[@]}" "$burst" calibrate --threads 1 --heads "$heads" --seqs "$calib_seqs" \
     --repeats 3 --name "manycore_${cores}" -o "$spec" >"$tmp/calib.out" 2>"$tmp/calib.err"; then
  emit calibrate "ok=true" "seconds=$(($(date +%s) - t0))" "spec=@$spec"
  for only in burst ""; do
    args=(--cluster "$spec" --nodes 1 --devices-per-node "$cores" --cores-per-node "$cores" --seq "$seq"
          --heads "$heads" --head-dim 64 --mask causal --pass fwd_bwd --dtype fp32 --format jsonl)
    [[ -n $only ]] && args+=(--strategy "$only" --layout zigzag)
    "$burst" simulate "${args[@]}" >"$tmp/sim.jsonl" 2>>"$tmp/sim.err" && append_tagged "splits_${only:-any}" "$tmp/sim.jsonl"
  done
  for P in $ranks_list; do
    "$burst" simulate --cluster "$spec" --nodes 1 --devices-per-node "$P" --seq "$seq" --heads "$heads" \
      --head-dim 64 --mask causal --pass fwd_bwd --dtype fp32 --format jsonl >"$tmp/sim.jsonl" 2>>"$tmp/sim.err" &&
      append_tagged "simulate_P$P" "$tmp/sim.jsonl"
  done
else
  emit calibrate "ok=false" "err_tail=$(tail -c 1500 "$tmp/calib.err")"
fi
for P in $ranks_list; do
  ((P > 1)) || continue
  "$burst" plan --strategy burst --layout zigzag --ranks "$P" --seq "$seq" --heads "$heads" --dim 64 --mask causal \
    --json >"$tmp/plan.json" 2>/dev/null && emit plan "ranks=$P" "strategy=burst" "plan=@$tmp/plan.json"
done

# Strong scaling, 1 thread per rank. P = 1: one strategy (every strategy is one local call).
for P in $ranks_list; do
  warm=0
  ((P >= 8 || quick)) && warm=1
  if ((P == 1)); then
    run_case "burst_P1" 1 1 0 1 --strategy burst
    continue
  fi
  strategies=${BURST_CHECK_STRATEGIES:-"burst ring usp allgather ulysses"}
  ((P <= 2 && !quick)) && strategies="burst ring"
  for s in $strategies; do
    if [[ $s == ulysses ]] && ((heads % P != 0)); then
      emit skipped "case=${s}_P$P" "reason=ulysses needs H % P == 0 (H=$heads)"
      continue
    fi
    run_case "${s}_P$P" "$P" 1 "$warm" 1 --strategy "$s"
  done
done

# Ranks x threads for burst on all cores (cores x 1 ran above).
for split in $splits; do
  r=${split%x*} t=${split#*x}
  run_case "burst_${r}x${t}" "$r" "$t" 1 1 --strategy burst
done
emit done "elapsed=$(elapsed)" "load_1m=$(cut -d' ' -f1 /proc/loadavg)"
echo "manycore_host_check: $(wc -l <"$out") records in $out ($(elapsed) s)" >&2
