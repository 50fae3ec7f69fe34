#!/usr/bin/env bash
# Validates the cost model on this machine: calibrate (per rank count), run `burst bench matrix`
# with the calibrated spec for 1 and 2 ranks on causal and full masks at several lengths, and
# print predicted vs measured seconds side by side (target: within ±20 %).
#
# Usage: scripts/validate_cost_model.sh [OUTDIR]       (default: validate-out)
# Env:   BURST=path/to/burst (default build/tools/burst), SEQS (default 512,1024,2048,4096),
#        HEADS (4), DIM (64), STRATEGIES (burst,ring), PASSES (fwd,bwd), REPEATS (5),
#        CAL_REPEATS (15: timed repeats per calibration point)
# Calibration and benchmark run back to back so that they see the same machine load (the VM
# is shared; every record carries load_1m); the calibration is repeated after the benchmark and
# a run during which the machine changed speed is repeated. Exit status 0 even when cases miss
# the target: the table is the result.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-validate-out}
burst=${BURST:-${BURST_BUILD_DIR:-build}/tools/burst}
seqs=${SEQS:-512,1024,2048,4096}
heads=${HEADS:-4}
dim=${DIM:-64}
strategies=${STRATEGIES:-burst,ring}
passes=${PASSES:-fwd,bwd}
repeats=${REPEATS:-5}
cal_repeats=${CAL_REPEATS:-15}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
mkdir -p "$out"
rm -f "$out/matrix.jsonl"
[ -x "$burst" ] || { echo "validate: $burst not built (set BURST=...)" >&2; exit 2; }

calibrate() {   # calibrate P FILE
  mpirun -n "$1" --bind-to core "$burst" calibrate --threads 1 --heads "$heads" --head-dim "$dim" \
         --repeats "$cal_repeats" --name "calibrated_P$1" -o "$2" > /dev/null
}
rate() { /usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["matmul_flops"])' "$1"; }

# A prediction is for the machine as calibrated. This VM's cores switch between two speeds
# (~25 % apart) with nothing else running, so the kernel rate is measured again after the
# benchmark: a run whose rate moved by more than 8 % is discarded and repeated (up to 3 tries).
for P in 1 2; do
  for attempt in 1 2 3; do
    echo "== P=$P: calibrating (attempt $attempt)" >&2
    calibrate "$P" "$out/calibrated_P$P.json"
    echo "== P=$P: benchmarking ($strategies; causal, full; S in $seqs; $passes)" >&2
    rm -f "$out/matrix_P$P.jsonl"
    mpirun -n "$P" --bind-to core "$burst" bench matrix --strategies "$strategies" \
           --layouts contiguous,zigzag --masks causal,full --seqs "$seqs" --passes "$passes" \
           --heads "$heads" --dim "$dim" --threads 1 --repeats "$repeats" --warmup 1 \
           --check-max-seq 1024 --cluster "$out/calibrated_P$P.json" -o "$out/matrix_P$P.jsonl" > /dev/null
    calibrate "$P" "$out/recheck_P$P.json"
    before=$(rate "$out/calibrated_P$P.json"); after=$(rate "$out/recheck_P$P.json")
    if /usr/bin/python3 -c 'import sys; b, a = map(float, sys.argv[1:]); sys.exit(0 if abs(a / b - 1) <= 0.08 else 1)' "$before" "$after"; then
      echo "== P=$P: kernel rate $before -> $after FLOP/s after the benchmark: kept" >&2
      break
    fi
    echo "== P=$P: kernel rate $before -> $after FLOP/s after the benchmark: machine changed speed, repeating" >&2
  done
  echo "P=$P calibration rate before/after the benchmark: $before / $after FLOP/s (attempt $attempt)"
  cat "$out/matrix_P$P.jsonl" >> "$out/matrix.jsonl"
done

/usr/bin/python3 - "$out/matrix.jsonl" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
rows = [r for r in rows if r.get("status") == "ok" and r.get("predicted_seconds")]
rows.sort(key=lambda r: (r["P"], r["strategy"], r["layout"], r["mask"], r["pass"], r["S_global"]))
print(f"{'P':>2} {'strategy':<8} {'layout':<10} {'mask':<7} {'pass':<4} {'S':>6} "
      f"{'measured ms':>12} {'predicted ms':>13} {'pred/meas':>9} {'±20%':>5} {'load':>5} {'max err':>9}")
ok = 0
for r in rows:
    ratio = r["predicted_seconds"] / r["seconds"]
    hit = 0.8 <= ratio <= 1.2
    ok += hit
    err = r.get("max_error")
    print(f"{r['P']:>2} {r['strategy']:<8} {r['layout']:<10} {r['mask']:<7} {r['pass']:<4} {r['S_global']:>6} "
          f"{r['seconds']*1e3:>12.2f} {r['predicted_seconds']*1e3:>13.2f} {ratio:>9.2f} {'yes' if hit else 'NO':>5} "
          f"{r.get('load_1m', -1):>5.1f} {'' if err is None else format(err, '.1e'):>9}")
print(f"{ok}/{len(rows)} cases within ±20 %")
EOF
