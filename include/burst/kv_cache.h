// burst/kv_cache.h — a KV cache sharded over ranks, and distributed decode attention over it.
//
// Owns: DistKVCache, the inference half of long context (Infinite-LLM's DistAttention, arXiv
// 2401.02669 §4; flash-decoding's split-KV, Dao et al. 2023). Each rank keeps the K/V of ITS
// tokens of every sequence — after a prefill through any strategy, exactly the rows that
// DistAttention::positions() put there; K and V never move again. decode() computes, on every
// rank, partial attention of the new query rows over the local shard (split-KV: one partial per
// storage chunk, chunks spread over the rank's threads), then one all-gather of the per-rank
// partials (out, lse) and the lse merge (burst/softmax_merge.h, merge form B) give every rank the
// exact result. Bytes per decode call: B·S_new·H·(D + 1)·4·(P − 1) per rank, independent of the
// context length.
// Invariants: a sequence's tokens are split over ranks with increasing global positions on each
// rank; every rank holds the same metadata (sequence ids, global lengths, per-rank counts) and
// checks it against its peers (a fingerprint) before each collective call; storage grows by
// fixed-size chunks (no reallocation, no copy of cached tokens, ever).
// Does not: page out to disk, evict, or run the model (apps/lm does).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "burst/attention.h"
#include "burst/comm.h"
#include "burst/tensor.h"

namespace burst {

/// Where an appended token's K/V goes. LeastLoaded: the rank holding the fewest tokens of that
/// sequence (ties → lowest rank), so ranks stay within one token of each other once balanced
/// (a prefill through a layout with S_global % P == 0 is balanced). RoundRobin: token at global
/// position t goes to rank t mod P (the striped layout's rule; balanced appends whatever the
/// prefill was).
enum class AppendPolicy : std::uint8_t { LeastLoaded, RoundRobin };
const char* to_string(AppendPolicy policy) noexcept;

struct KVCacheConfig {
  std::int64_t H = 0;     ///< query heads of decode() queries
  std::int64_t H_kv = 0;  ///< cached K/V heads (GQA: H % H_kv == 0)
  std::int64_t D = 0;     ///< head dim, 1..256
  /// Tokens this rank may hold, summed over sequences; appends/prefills past it fail (all ranks).
  std::int64_t capacity_per_rank = 0;
  /// Tokens per storage chunk (and per flash-decoding split): a positive multiple of 64.
  std::int64_t chunk_tokens = 1024;
  AppendPolicy policy = AppendPolicy::LeastLoaded;
  std::optional<float> softmax_scale;     ///< unset → 1/sqrt(D)
  int num_threads = 0;                    ///< split-KV threads per rank; 0 → OpenMP default
  KernelImpl kernel = KernelImpl::Tiled;  ///< Reference: the fp64 per-chunk oracle (tests)
  Isa isa = Isa::Auto;
  /// Storage of cached K/V: F32, or BF16 (half the bytes kept and streamed per token; K/V are
  /// rounded to nearest even when stored, decode widens them exactly and computes in fp32, so it
  /// is exact attention over the rounded K/V — the fp64 Reference sees the same rounded values).
  /// Inputs and outputs of every call stay fp32.
  DType dtype = DType::F32;
};

/// Counters of the last decode() on this rank.
struct DecodeStats {
  double seconds = 0;              ///< wall time of the call
  double check_seconds = 0;        ///< the call's agreement (+ append, for decode(k_new, v_new))
  double local_seconds = 0;        ///< partial attention over the local shard (incl. chunk merge)
  double merge_seconds = 0;        ///< all-gather + rank merge
  std::int64_t bytes_sent = 0;     ///< payload bytes this rank sent (comm.h convention)
  std::int64_t kv_bytes_read = 0;  ///< K/V bytes the local kernels streamed (incl. row padding; dtype size)
  std::int64_t chunks = 0;         ///< flash-decoding splits computed on this rank
};

class DistKVCache {
 public:
  /// An empty cache. Collective over comm (dups it): every rank passes the same cfg.
  /// Throws (every rank): Error(InvalidArgument) for H, H_kv, D out of range, H % H_kv ≠ 0,
  /// capacity ≤ 0, chunk_tokens not a positive multiple of 64, a bad softmax_scale, or cfg
  /// differing between ranks; Error(Unsupported) for an Isa this CPU lacks.
  DistKVCache(const Communicator& comm, const KVCacheConfig& cfg);
  ~DistKVCache();
  DistKVCache(DistKVCache&&) noexcept;
  DistKVCache& operator=(DistKVCache&&) noexcept;

  const KVCacheConfig& config() const;
  int rank() const;
  int ranks() const;

  /// Adds sequences `seq_ids` from a prefill: this rank's K/V rows exactly as a strategy holds
  /// them. k_local, v_local [B, S_local, H_kv, D] (any strides, D contiguous; B = seq_ids.size()),
  /// `positions` [S_local] the global positions of those rows (DistAttention::positions()),
  /// strictly increasing, in [0, S_global); over all ranks they must partition [0, S_global)
  /// (checked: counts, Σt and Σt² over ranks). S_local may be 0 on some ranks.
  /// Collective: identical seq_ids and S_global on every rank.
  /// Throws (every rank, cache unchanged): Error(InvalidArgument) for shape / head mismatch, an id
  /// already present or repeated, bad positions, positions not partitioning [0, S_global),
  /// capacity overflow on any rank, a NaN or infinity in any rank's rows (docs/api.md § NaN and
  /// inf), arguments or cache state differing between ranks.
  /// Cost: copies the local rows once; 3 small collectives.
  void prefill(const std::vector<std::int64_t>& seq_ids, const TensorView& k_local, const TensorView& v_local,
               const std::vector<std::int64_t>& positions, std::int64_t S_global);

  /// Appends S_new tokens to each sequence (new sequences are created with length 0).
  /// k_new, v_new [B, S_new, H_kv, D] are the SAME on every rank (the model runs replicated over
  /// the new tokens); token i of sequence b gets global position length(b) + i and is stored
  /// only on the rank the policy picks. Collective: identical seq_ids and shapes everywhere.
  /// Throws (every rank, cache unchanged): Error(InvalidArgument) for a shape / head mismatch, a
  /// repeated id, capacity overflow on any rank, a NaN or infinity in k_new or v_new, arguments
  /// or state differing between ranks.
  /// Cost: copies this rank's share of the new rows; 1 small collective (the agreement), no payload.
  void append(const std::vector<std::int64_t>& seq_ids, const TensorView& k_new, const TensorView& v_new);

  /// Attention of new query rows over the whole cached sequences: out = softmax(τ·q·Kᵀ)·V.
  /// q [B, S_q, H, D] (any strides, D contiguous), the same on every rank; out [B, S_q, H, D]
  /// (written on every rank, identical), lse [B, H, S_q] fp32 natural log, contiguous.
  /// causal: query row i of sequence b sits at position length(b) − S_q + i (the newest S_q
  /// tokens, flash_attn_with_kvcache's bottom-right alignment: append the new K/V first) and
  /// sees keys at positions ≤ its own; rows before position 0 see nothing (out 0, lse −inf).
  /// Not causal: every row sees the whole sequence. Collective: identical arguments.
  /// Throws (every rank, cache unchanged): Error(InvalidArgument) for an unknown or repeated id,
  /// a shape / head mismatch, output overlapping q, a NaN or infinity in q, arguments or state
  /// differing between ranks.
  /// Cost: reads this rank's K/V of the B sequences once (memory-bound: 2·H_kv·(D + D_pad)·
  /// sizeof(dtype) bytes per token), 4·D·H flop per (row, key); two collectives: the agreement
  /// (5 values per rank) and the all-gather of B·S_q·H·(D+1)·4·(P−1) bytes.
  /// Source: Infinite-LLM §4 (DistAttention), flash-decoding; merge: softmax_merge.h form B.
  void decode(const std::vector<std::int64_t>& seq_ids, const TensorView& q, const TensorView& out,
              const TensorView& lse, bool causal = true);

  /// append(seq_ids, k_new, v_new) then decode(seq_ids, q, out, lse, causal) under ONE agreement
  /// (two collectives in all instead of three): one model layer's decode step, as
  /// flash_attn_with_kvcache(q, k_cache, v_cache, k, v) does. Sequence ids need not exist yet.
  /// Throws (every rank, cache unchanged): as append and decode together.
  void decode(const std::vector<std::int64_t>& seq_ids, const TensorView& k_new, const TensorView& v_new,
              const TensorView& q, const TensorView& out, const TensorView& lse, bool causal = true);

  /// Drops a sequence on THIS rank only (no messages): every rank must call it alike, or the
  /// next collective call throws on every rank (state fingerprints differ). Throws
  /// Error(InvalidArgument) for an unknown id.
  void remove(std::int64_t seq_id);

  bool contains(std::int64_t seq_id) const;
  std::vector<std::int64_t> sequences() const;                        ///< ids, increasing
  std::int64_t length(std::int64_t seq_id) const;                     ///< global tokens
  std::vector<std::int64_t> rank_lengths(std::int64_t seq_id) const;  ///< tokens per rank [P]
  /// This rank's cached tokens of a sequence: positions (increasing) and K/V copied out as
  /// [n, H_kv, D] contiguous (for tests and verification; decode never copies).
  std::vector<std::int64_t> local_positions(std::int64_t seq_id) const;
  void local_kv(std::int64_t seq_id, std::vector<float>& k, std::vector<float>& v) const;
  std::int64_t local_tokens() const;  ///< this rank's tokens over all sequences
  std::int64_t local_bytes() const;   ///< K/V storage allocated on this rank (bytes, in dtype)
  const DecodeStats& last_stats() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace burst
