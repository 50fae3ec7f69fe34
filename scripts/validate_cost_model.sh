#!/usr/bin/env bash
# Validates the cost model on this machine OUT OF SAMPLE: `burst calibrate` measures the kernel on
# one grid (full mask + its causal masking probe, H = 4, D = 64, S = 512…4096), then `burst bench
# matrix` runs all 7 strategies on a disjoint grid (other H, H_kv, D, S and masks) with the
# calibrated spec, and the table prints predicted vs measured seconds side by side, with the
# fraction within ±20 % per strategy and overall (docs/cost_model.md § Validation).
#
# Usage: scripts/validate_cost_model.sh [OUTDIR]       (default: validate-out)
# Env:   BURST=path/to/burst (default build/tools/burst)
#        PS (default "1 2 4": rank counts; P above the core count runs oversubscribed,
#            calibrated the same way, and is reported separately)
#        CAL_SEQS (512,1024,2048,4096), CAL_HEADS (4), CAL_DIM (64), CAL_REPEATS (15)
#        SHAPES (default "8:8:32:1536,3072 8:2:128:768,1536": H:H_kv:D:S list per validation
#                shape; the second is GQA, so usp at P = 4 runs u = 2 × a ring of 2)
#        MASKS (sliding_window_causal,causal_document,causal_blockwise), PASSES (fwd,bwd),
#        STRATEGIES (all), REPEATS (5), ATTEMPTS (3: runs per P while the kernel rate drifts)
#        IN_SAMPLE=1 also runs the calibration grid itself (burst, ring; causal, full; H = 4,
#        D = 64, S = CAL_SEQS) as the earlier in-sample check did.
# Calibration and benchmark run back to back so that they see the same machine load (the VM
# is shared; every record carries load_1m); the calibration is repeated after the benchmark and a
# run during which the machine changed speed (kernel rate moved > 8 %) is repeated (3 tries).
# Run time: about 9 min on an idle 2-core Zen 5 (no attempt repeated); about 55 min at load 10-17
# with ATTEMPTS=1 (benchmarks 164, 360, 511 s for P = 1, 2, 4; the rest is two calibrations per P);
# each repeated attempt adds one P's time.
# Exit status 0 even when cases miss the target: the table is the result.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${BURST_PYTHON:-/usr/bin/python3}   # JSON and tables: the standard library only
out=${1:-validate-out}
burst=${BURST:-${BURST_BUILD_DIR:-build}/tools/burst}
ps=${PS:-1 2 4}
cal_seqs=${CAL_SEQS:-512,1024,2048,4096}
cal_heads=${CAL_HEADS:-4}
cal_dim=${CAL_DIM:-64}
cal_repeats=${CAL_REPEATS:-15}
shapes=${SHAPES:-8:8:32:1536,3072 8:2:128:768,1536}
masks=${MASKS:-sliding_window_causal,causal_document,causal_blockwise}
passes=${PASSES:-fwd,bwd}
strategies=${STRATEGIES:-all}
repeats=${REPEATS:-5}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
mkdir -p "$out"
rm -f "$out/matrix.jsonl"
[ -x "$burst" ] || { echo "validate: $burst not built (set BURST=...)" >&2; exit 2; }
cores=$(getconf _NPROCESSORS_ONLN)   # not nproc: it honours OMP_NUM_THREADS=1, exported above

run() {   # run P ARGS...: one rank per core, or oversubscribed and unbound above the core count
  local P=$1
  shift
  if [ "$P" -le "$cores" ]; then
    mpirun -n "$P" --bind-to core "$burst" "$@"
  else
    mpirun -n "$P" --oversubscribe --bind-to none "$burst" "$@"
  fi
}
calibrate() {   # calibrate P FILE
  run "$1" calibrate --threads 1 --heads "$cal_heads" --head-dim "$cal_dim" --seqs "$cal_seqs" \
      --repeats "$cal_repeats" --name "calibrated_P$1" -o "$2" > /dev/null
}
rate() { "$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["matmul_flops"])' "$1"; }
matrix() {   # matrix P OUT ARGS...
  local P=$1 o=$2
  shift 2
  run "$P" bench matrix --threads 1 --repeats "$repeats" --warmup 1 --check-max-seq 1024 \
      --passes "$passes" --cluster "$out/calibrated_P$P.json" -o "$o" "$@" > /dev/null
}

for P in $ps; do
  for attempt in $(seq 1 "${ATTEMPTS:-3}"); do
    echo "== P=$P: calibrating (attempt $attempt; H=$cal_heads D=$cal_dim S=$cal_seqs, full + causal probe)" >&2
    calibrate "$P" "$out/calibrated_P$P.json"
    rm -f "$out/matrix_P$P.jsonl"
    t0=$(date +%s)
    for shape in $shapes; do
      IFS=: read -r H Hkv D seqs <<< "$shape"
      echo "== P=$P: validating H=$H H_kv=$Hkv D=$D S=$seqs, masks $masks ($strategies)" >&2
      # burst and ring on the contiguous (imbalanced under causal masks) and zigzag layouts; the
      # others on their own layout (bench matrix's default: allgather, usp zigzag; the rest contiguous).
      for s in ${strategies//,/ }; do
        case $s in
          all) matrix "$P" "$out/matrix_P$P.jsonl" --strategies burst,ring --layouts contiguous,zigzag \
                 --masks "$masks" --seqs "$seqs" --heads "$H" --kv-heads "$Hkv" --dim "$D"
               matrix "$P" "$out/matrix_P$P.jsonl" --strategies allgather,ulysses,usp,distflash,headpar \
                 --masks "$masks" --seqs "$seqs" --heads "$H" --kv-heads "$Hkv" --dim "$D" ;;
          burst|ring) matrix "$P" "$out/matrix_P$P.jsonl" --strategies "$s" --layouts contiguous,zigzag \
                 --masks "$masks" --seqs "$seqs" --heads "$H" --kv-heads "$Hkv" --dim "$D" ;;
          *) matrix "$P" "$out/matrix_P$P.jsonl" --strategies "$s" \
                 --masks "$masks" --seqs "$seqs" --heads "$H" --kv-heads "$Hkv" --dim "$D" ;;
        esac
      done
    done
    if [ "${IN_SAMPLE:-0}" = 1 ]; then
      echo "== P=$P: in-sample grid (burst, ring; causal, full; H=$cal_heads D=$cal_dim S=$cal_seqs)" >&2
      matrix "$P" "$out/matrix_P$P.jsonl" --strategies burst,ring --layouts contiguous,zigzag \
        --masks causal,full --seqs "$cal_seqs" --heads "$cal_heads" --dim "$cal_dim"
    fi
    t1=$(date +%s)
    calibrate "$P" "$out/recheck_P$P.json"
    before=$(rate "$out/calibrated_P$P.json"); after=$(rate "$out/recheck_P$P.json")
    if "$py" -c 'import sys; b, a = map(float, sys.argv[1:]); sys.exit(0 if abs(a / b - 1) <= 0.08 else 1)' "$before" "$after"; then
      echo "== P=$P: kernel rate $before -> $after FLOP/s after the benchmark ($((t1 - t0)) s): kept" >&2
      break
    fi
    echo "== P=$P: kernel rate $before -> $after FLOP/s after the benchmark: machine changed speed, repeating" >&2
  done
  echo "P=$P calibration rate before/after the benchmark: $before / $after FLOP/s (attempt $attempt, benchmark $((t1 - t0)) s, load $(cut -d' ' -f1-3 /proc/loadavg))"
  cat "$out/matrix_P$P.jsonl" >> "$out/matrix.jsonl"
done

"$py" - "$out/matrix.jsonl" "$cores" "$cal_heads" "$cal_dim" <<'EOF'
import collections, json, sys
cores, cal_h, cal_d = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
rows = [r for r in rows if r.get("status") == "ok" and r.get("predicted_seconds")]
rows.sort(key=lambda r: (r["P"], r["strategy"], r["layout"], r["H"], r["D"], r["mask"], r["pass"], r["S_global"]))
print(f"{'P':>2} {'strategy':<9} {'layout':<10} {'H':>2} {'Hkv':>3} {'D':>3} {'mask':<21} {'pass':<4} {'S':>5} "
      f"{'measured ms':>11} {'predicted ms':>12} {'pred/meas':>9} {'±20%':>4} {'load':>5} {'max err':>8}")
tally = collections.defaultdict(lambda: [0, 0])
for r in rows:
    ratio = r["predicted_seconds"] / r["seconds"]
    hit = 0.8 <= ratio <= 1.2
    insample = r["H"] == cal_h and r["D"] == cal_d and r["mask"] in ("causal", "full")
    group = "in-sample" if insample else ("oversubscribed" if r["P"] > cores else "out-of-sample")
    for key in ((group, r["strategy"]), (group, "all"), (group, f"P={r['P']}")):
        tally[key][0] += hit
        tally[key][1] += 1
    err = r.get("max_error")
    print(f"{r['P']:>2} {r['strategy']:<9} {r['layout']:<10} {r['H']:>2} {r['H_kv']:>3} {r['D']:>3} {r['mask']:<21} "
          f"{r['pass']:<4} {r['S_global']:>5} {r['seconds']*1e3:>11.2f} {r['predicted_seconds']*1e3:>12.2f} "
          f"{ratio:>9.2f} {'yes' if hit else 'NO':>4} {r.get('load_1m', -1):>5.1f} "
          f"{'' if err is None else format(err, '.1e'):>8}")
print()
for group in ("out-of-sample", "oversubscribed", "in-sample"):
    keys = sorted(k for k in tally if k[0] == group)
    if not keys:
        continue
    print(f"{group} (P <= {cores} ranks on {cores} cores)" if group == "out-of-sample" else
          f"{group} (P > {cores}: ranks share cores)" if group == "oversubscribed" else group)
    for _, name in keys:
        ok, n = tally[(group, name)]
        print(f"  {name:<10} {ok:>4}/{n:<4} within ±20 % ({100.0 * ok / n:.0f} %)")
EOF
