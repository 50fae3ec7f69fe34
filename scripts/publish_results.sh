#!/usr/bin/env bash
# The published comparison (docs/results/): every strategy x layout x benchmark mask x length x rank
# count through `burst bench matrix`, fp32 and bf16, plus the language-model comparison
# (`burst-lm train` tokens/s and peak RSS per strategy), then `burst report` tables and figures, a
# headline figure and a README.md naming the date, the host and the exact commands.
#
# Usage: scripts/publish_results.sh [OUTDIR]            (default: docs/results)
# Env (defaults are the grid that fits about an hour on a 2-core machine; PUBLISH_FULL=1 is the
# whole grid of the comparison — S 4K..64K and the LM at 16K..64K — which takes days there):
#   RANKS ("1 2 4"; empty: no matrix), STRATEGIES (all), LAYOUTS (contiguous,zigzag,striped,balanced), MASKS (all),
#   SEQS (4096), HEADS (4), DIM (64), REPEATS (3), BF16_RANKS ("2": bf16 runs at these P),
#   BF16_MASKS (causal,full,causal_document,sliding_window_causal; "all" in the full grid),
#   LM_STRATEGIES ("burst ring usp tp allgather"; empty: no LM runs), LM_SEQS (16384), LM_STEPS (8: the median of 7 timed steps; 3 left the median of 2 at the noise), LM_RANKS (2),
#   BURST (build/tools/burst).
# Resumable: bench matrix skips cases already in OUTDIR/matrix_*.jsonl, and the LM runs already in
# OUTDIR/lm.jsonl are skipped; an LM run recorded as failed is retried. Every record carries the
# 1-minute load average: this machine is shared, so compare within one run.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${BURST_PYTHON:-/usr/bin/python3}   # JSON and tables: the standard library only
out=${1:-docs/results}
burst=${BURST:-${BURST_BUILD_DIR:-build}/tools/burst}
if [[ "${PUBLISH_FULL:-0}" == 1 ]]; then
  seqs_default=4096,8192,16384,32768,65536
  lm_seqs_default="16384 32768 65536"
  bf16_masks_default=all
else
  seqs_default=4096
  lm_seqs_default=16384
  bf16_masks_default=causal,full,causal_document,sliding_window_causal
fi
ranks=${RANKS-1 2 4}
strategies=${STRATEGIES:-all}
layouts=${LAYOUTS:-contiguous,zigzag,striped,balanced}
masks=${MASKS:-all}
seqs=${SEQS:-$seqs_default}
heads=${HEADS:-4}
dim=${DIM:-64}
repeats=${REPEATS:-3}
bf16_ranks=${BF16_RANKS:-2}
bf16_masks=${BF16_MASKS:-$bf16_masks_default}
lm_strategies=${LM_STRATEGIES-burst ring usp tp allgather}
lm_seqs=${LM_SEQS:-$lm_seqs_default}
lm_steps=${LM_STEPS:-8}
lm_ranks=${LM_RANKS:-2}
data=${BURST_LM_DATA:-data/kjv-v2048}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
export OMPI_MCA_rmaps_base_oversubscribe=1
[[ -x "$burst" ]] || { echo "publish: $burst not built (scripts/build.sh, or set BURST=...)" >&2; exit 2; }
mkdir -p "$out"
log="$out/commands.txt"
run() {  # run CMD...: log the exact command, then run it
  printf '%s\n' "$*" >> "$log"
  "$@"
}
stamp() { printf '[publish %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
printf '# %s: scripts/publish_results.sh %s (BURST=%s: %s)\n' "$(date -u +%FT%TZ)" "$out" "$burst" \
  "$("$burst" --version)" >> "$log"  # appended: a resumed run keeps the earlier runs' commands

# 1. The kernel-level matrix, fp32 at every P, bf16 at BF16_RANKS. At P = 1 every strategy is the
# single-device kernel on the whole sequence: one strategy and layout stand for all (the baseline).
for P in $ranks; do
  for dtype in fp32 bf16; do
    if [[ $dtype == bf16 && " $bf16_ranks " != *" $P "* ]]; then continue; fi
    s=$strategies l=$layouts m=$masks
    if ((P == 1)); then s=burst l=contiguous; fi
    if [[ $dtype == bf16 ]]; then m=$bf16_masks; fi
    stamp "matrix P=$P $dtype: $s x $l x $m x S $seqs"
    run mpirun -n "$P" --bind-to none "$burst" bench matrix --strategies "$s" --layouts "$l" \
      --masks "$m" --seqs "$seqs" --passes fwd,bwd --heads "$heads" --dim "$dim" --threads 1 \
      --repeats "$repeats" --warmup 1 --check-max-seq 1024 --dtype "$dtype" \
      -o "$out/matrix_P${P}_${dtype}.jsonl" > /dev/null
  done
done

# 2. The language model: tokens/s and peak RSS per rank of `burst-lm train` per strategy and context.
if [[ -n "$lm_strategies" ]]; then
  burst_lm=$(dirname "$burst")/burst-lm
  if [[ ! -x $burst_lm ]]; then
    echo "publish: no $burst_lm (built without libtorch): the LM comparison is skipped" >&2
  else
    [[ -f "$data/tokens.bin" ]] || run "$(dirname "$burst")/../apps/kjv_prepare" --data "$data" --vocab 2048 > /dev/null
    touch "$out/lm.jsonl"
    for S in $lm_seqs; do
      for s in $lm_strategies; do
        key="\"strategy\":\"$s\",\"seq_len\":$S,"
        # A case that ran is kept; a case recorded as failed is dropped and retried.
        if [[ -n "$(grep -F "$key" "$out/lm.jsonl" | grep -v '"status":"failed"' || true)" ]]; then continue; fi
        grep -vF "$key" "$out/lm.jsonl" > "$out/lm.jsonl.tmp" || true
        mv "$out/lm.jsonl.tmp" "$out/lm.jsonl"
        stamp "lm: $s at $S tokens on $lm_ranks ranks"
        dir=$(mktemp -d)
        # Each rank under GNU time: its peak RSS (KiB) in rss.<rank>.
        if run mpirun -n "$lm_ranks" --bind-to none sh -c "exec /usr/bin/time -f %M -o $dir/rss.\$OMPI_COMM_WORLD_RANK \
             $burst_lm train --data $data --out $dir/run --steps $lm_steps --seq-len $S --strategy $s \
             --layers 2 --d-model 128 --heads 4 --kv-heads 4 --head-dim 16 --ffn 256" > "$dir/train.log" 2>&1; then
          "$py" - "$dir" "$s" "$S" "$lm_ranks" >> "$out/lm.jsonl" <<'PY'
import glob, json, os, sys
d, s, S, P = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
log = [json.loads(l) for l in open(f"{d}/run/train_log.jsonl") if l.strip()]
timed = log[1:] or log  # the first step warms up (allocations, plan)
tps = sorted(r["tokens_per_second"] for r in timed)
rss = [int(open(p).read().split()[-1]) * 1024 for p in glob.glob(f"{d}/rss.*")]
print(json.dumps({"bench": "lm", "strategy": s, "seq_len": S, "ranks": P, "steps": len(log),
                  "tokens_per_second_median": tps[len(tps) // 2], "loss_last": log[-1]["loss"],
                  "bytes_sent_per_rank_per_step": log[-1].get("bytes_sent"),
                  "attention_share": log[-1].get("attention_share"), "peak_rss_bytes_max_rank": max(rss),
                  "load_1m": float(open("/proc/loadavg").read().split()[0])}, separators=(",", ":")))
PY
        else
          reason=$(grep -m1 -i -E "error|unsupported" "$dir/train.log" | cut -c1-200 || true)
          printf '{"bench":"lm","strategy":"%s","seq_len":%d,"ranks":%d,"status":"failed","reason":%s}\n' \
            "$s" "$S" "$lm_ranks" "$("$py" -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$reason")" >> "$out/lm.jsonl"
        fi
        rm -rf "$dir"
      done
    done
  fi
fi

# 3. Tables and figures, the headline figure, and the provenance README.
stamp "report"
run "$burst" report "$out"/matrix_P*.jsonl -o "$out" > /dev/null
run "$py" scripts/publish_headline.py "$out" > /dev/null
"$py" - "$out" "$seqs" "$heads" "$dim" "$burst" <<'PY'
import datetime, json, os, subprocess, sys
out, seqs, heads, dim, burst = sys.argv[1:6]
lscpu = dict(l.split(":", 1) for l in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines() if ":" in l)
model = f'{lscpu.get("Model name", "?").strip()} (family {lscpu.get("CPU family", "?").strip()}, model {lscpu.get("Model", "?").strip()})'
flags = open("/proc/cpuinfo").read()
isa = [f for f in ("avx512f", "avx512_bf16", "amx_tile", "avx2") if f" {f}" in flags]
lm = [json.loads(l) for l in open(f"{out}/lm.jsonl")] if os.path.exists(f"{out}/lm.jsonl") else []
lines = [f"# Published comparison ({datetime.date.today().isoformat()})", "",
         f"Host: {model}, {os.cpu_count()} logical CPUs, ISA flags {', '.join(isa)}; "
         f"`burst --version`: {subprocess.run([burst, '--version'], capture_output=True, text=True).stdout.strip()}.",
         f"Kernel-level grid: S {seqs}, H {heads}, D {dim}, B 1, 1 thread per rank; median of the repeats; "
         "every record carries the 1-minute load average (`load_1m`): this machine is shared, compare within one run.", "",
         "![headline](headline.png)", "",
         "Headline numbers: [headline.md](headline.md). Tables and per-pass figures: [report.md](report.md). Raw JSON lines: `matrix_P*_*.jsonl`, `lm.jsonl`. "
         "Exact commands, in order: [commands.txt](commands.txt) (`scripts/publish_results.sh` ran them).", ""]
if lm:
    lines += ["## Language model (`burst-lm train`, 2 layers, d 128, H 4, D 16)", "",
              "| strategy | context | ranks | tokens/s (median) | peak RSS per rank | bytes sent per rank and step | status | load |",
              "|---|---:|---:|---:|---:|---:|---|---:|"]
    for r in lm:
        if r.get("status") == "failed":
            lines.append(f"| {r['strategy']} | {r['seq_len']} | {r['ranks']} | | | | failed: {r.get('reason', '')} | |")
        else:
            lines.append(f"| {r['strategy']} | {r['seq_len']} | {r['ranks']} | {r['tokens_per_second_median']:,.0f} | "
                         f"{r['peak_rss_bytes_max_rank'] / 2**20:,.0f} MiB | {(r['bytes_sent_per_rank_per_step'] or 0) / 1e6:.1f} MB | ok | {r['load_1m']:.1f} |")
open(f"{out}/README.md", "w").write("\n".join(lines) + "\n")
PY
stamp "done: $out/README.md"
