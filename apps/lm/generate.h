// apps/lm/generate.h — `burst generate`: sampling from the KJV model with the whole Bible as
// context, the KV cache sharded over the ranks (burst/kv_cache.h).
//
// Prefill: the context (the whole KJV, or its first tokens) plus the prompt as ONE sequence
// through burst's DistAttention (any strategy / layout) under the document-causal mask the model
// was trained and evaluated with (each book a document; the prompt continues the last one), or
// plain causal (prefill_causal; over the whole KJV that is 77 TFLOP of attention for the default
// model, 16× the document mask's); each layer's local K/V goes into
// that layer's DistKVCache where the layout put it — nothing moves afterwards. The last 1..4P
// tokens (so that the prefill length divides every layout) and every sampled token then run as
// decode steps: the model on the new tokens, replicated on every rank; each layer appends the new
// K/V to the least-loaded rank and decodes causally over the WHOLE cache (local split-KV partials + one all-gather + lse merge).
// Sampling (temperature, top-k, seeded) happens on rank 0 and is broadcast.
// Self-check: rank 0 gathers the prefilled K/V of every layer and recomputes the first
// verify_tokens steps alone (the kernel API's attention_forward over the whole gathered cache,
// one process, no sharding, no merge); verified = every logit within verify_rtol relative
// (max |Δ| / max |logit|).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "burst/comm.h"
#include "train.h"

namespace burst::lm {

struct GenerateOptions {
  RunOptions run;
  std::filesystem::path checkpoint = "runs/kjv/checkpoint.bin";
  std::int64_t context_tokens = -1;   ///< −1: the whole KJV ("all"); else its first n tokens
  std::string prompt;
  int max_new_tokens = 32;
  double temperature = 0.8;           ///< 0: greedy
  int top_k = 40;                     ///< 0: the whole vocabulary
  std::uint64_t seed = 1;
  int verify_tokens = 2;              ///< decode steps recomputed on one rank (0: none)
  double verify_rtol = 1e-5;
  std::int64_t chunk_tokens = 1024;   ///< KV-cache chunk (flash-decoding split)
  bool prefill_causal = false;        ///< plain causal prefill instead of document-causal
};

/// Generates; rank 0 prints the text and progress on stderr. Returns the summary (the JSON line
/// `burst generate` prints): tokens, timings, bytes per token, verified. Collective.
/// Throws Error(InvalidArgument) (every rank, before any payload) for a missing cache or
/// checkpoint, a checkpoint of other data, or bad options.
nlohmann::json run_generate(const GenerateOptions& opts, const Communicator& comm);

}  // namespace burst::lm
