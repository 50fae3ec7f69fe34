// apps/lm/generate.h — `burst generate`: sampling from the KJV model with the whole Bible as
// context, the KV cache sharded over the ranks (burst/kv_cache.h).
//
// Prefill: the context (the whole KJV, or its first tokens) as ONE sequence under the
// document-causal mask the model was trained and evaluated with (each book a document), or plain
// causal (prefill_causal; over the whole KJV that is 16× the document mask's attention FLOPs),
// padded as `burst eval` pads it — exactly eval's forward, so its K/V are the ones `burst eval
// --save-kv` keeps: with kv_from naming them (and their key matching this run on every rank:
// weights, data, context, mask, P, strategy, layout, threads; kv_dump.h) they are loaded instead
// of recomputed, bitwise the same. Otherwise one distributed forward per layer through burst's
// DistAttention (any strategy / layout), the last layer's attention skipped (its output reaches
// only the context rows' own hidden states, which nothing reads), so it costs (L−1)/L of an
// eval's attention. Each layer's local K/V goes into that layer's DistKVCache where the layout
// put it — nothing moves afterwards. The prompt (with an empty prompt, the context's last token)
// and every sampled token then run as decode steps: the model on the new tokens, replicated on
// every rank; each layer appends the new K/V to the least-loaded rank and decodes causally over
// the WHOLE cache — the new tokens see the whole Bible — with local split-KV partials, one
// all-gather and the lse merge. Sampling (temperature, top-k, seeded) happens on rank 0 and is
// broadcast.
// Self-check (rank 0 alone; exact but bounded — a single-rank recomputation of the whole
// prefill would cost two evals):
//  1. K/V: every layer's K/V of self-contained prefill ranges (the first verify_kv_tokens tokens
//     of the context's last document and of the document that crosses a rank boundary soonest;
//     under the causal-type mask they depend on nothing outside the range) recomputed from the
//     tokens by a LocalEngine with the full model (last layer included), compared with the
//     cache (prefilled or loaded), then written over it;
//  2. logits: the first verify_tokens decode steps recomputed over that whole gathered cache
//     (rank 0 receives every rank's K/V), attention by the kernel API's fp64 Reference, no
//     sharding, no merge.
// verified = both within verify_rtol relative (max |Δ| / max |reference|); with a bf16 cache the
// K/V check allows its rounding too (verify_rtol + 2^-8), and the oracle holds the recomputed K/V
// and the new tokens' K/V rounded to bf16 — exact attention over the values the cache holds.
// Dtype (run.dtype, `--dtype`): F32, or BF16 for the KV cache only (DistKVCache stores K/V rounded
// to bf16: half the bytes kept and streamed per token; decode widens them exactly and
// accumulates in fp32); the model and the prefill run fp32 either way.
// The entry point, run_generate, and its GenerateOptions are declared in options.h (torch-free, for
// the command line).
#pragma once

#include "options.h"
