// burst/mask.h — attention masks on GLOBAL token positions, and the tile classifier.
//
// Owns: the one mask representation every kernel and strategy uses — a union of range slices
// (q_range × k_range, kind ∈ full / causal / inverse-causal / bi-causal, optional window band),
// the MagiAttention / LongCA-bench "AttnSlice" IR (arXiv 2510.17896; MagiAttention, arXiv 2505.13211) — plus
// the flash_attn shorthands `causal` and `window_size=(left, right)`, and builders for the 14 mask types of
// the Long-Context Attention Benchmark.
//
// Semantics (query position q, key position k, both global, 0-based):
//   slice s covers q ∈ [q_begin, q_end), k ∈ [k_begin, k_end);
//   its diagonal is bottom-right aligned: diag(q) = q − q_end + k_end (flash_attn ≥ 2.1);
//   Full: no further condition;  Causal: k ≤ diag(q);  InvCausal: k ≥ q − q_begin + k_begin;
//   BiCausal: both;  window (−1 = unbounded): diag(q) − window_left ≤ k ≤ diag(q) + window_right.
//   (q, k) is visible iff some slice admits it. A query row with no visible key yields out = 0,
//   lse = −inf and zero gradients (never NaN).
// Invariants: a ResolvedMask is immutable and thread-safe to query. Does not: know about
// tensors, ranks or layouts (a strategy passes each rank's global positions to the kernel).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace burst {

enum class SliceKind : std::uint8_t { Full, Causal, InvCausal, BiCausal };

/// "full", "causal", "inv_causal", "bi_causal". Never throws.
const char* to_string(SliceKind kind) noexcept;
/// Inverse of to_string. Throws: Error(InvalidArgument) listing the valid names.
SliceKind slice_kind_from_string(const std::string& name);

/// One rectangle of the mask union. Positions are global and half-open; windows are in tokens,
/// inclusive, measured from the slice's bottom-right-aligned diagonal; −1 = unbounded.
struct MaskSlice {
  std::int64_t q_begin = 0, q_end = 0, k_begin = 0, k_end = 0;
  SliceKind kind = SliceKind::Full;
  std::int64_t window_left = -1, window_right = -1;
  bool operator==(const MaskSlice&) const = default;
};

/// Verdict of the tile classifier for a (q-tile, k-tile) pair.
enum class TileClass : std::uint8_t { Empty, Full, Partial };

/// The 14 mask types of the Long-Context Attention Benchmark (LongCA-bench, arXiv 2510.17896), in its order.
enum class MaskType : std::uint8_t {
  Full,
  Causal,
  CausalDocument,
  FullDocument,
  ShareQuestion,
  CausalBlockwise,
  PrefixLmDocument,
  PrefixLmCausal,
  QkSparse,
  HashSparse,
  SlidingWindow,
  SlidingWindowCausal,
  GlobalSlidingWindow,
  BlockCausalDocument
};
inline constexpr int kNumMaskTypes = 14;

/// "full", "causal", "causal_document", ... (the benchmark's snake_case names).
const char* to_string(MaskType type) noexcept;
/// Inverse of to_string. Throws: Error(InvalidArgument) listing the valid names.
MaskType mask_type_from_string(const std::string& name);
/// All 14 types in benchmark order.
std::vector<MaskType> all_mask_types();

/// A mask as the user states it: flash_attn shorthands (resolved against the global lengths)
/// and/or explicit slices. An empty Mask is `full`.
struct Mask {
  bool causal = false;             ///< shorthand: causal over [0,S_q)×[0,S_kv)
  std::int64_t window_left = -1;   ///< shorthand window, flash_attn window_size[0]
  std::int64_t window_right = -1;  ///< flash_attn window_size[1]; causal forces 0
  std::vector<MaskSlice> slices;   ///< explicit IR; when non-empty the shorthands must be unset

  static Mask full() { return {}; }
  static Mask causal_mask() {
    Mask m;
    m.causal = true;
    return m;
  }
  /// flash_attn window_size=(left, right) (−1 = infinite), optionally causal.
  static Mask sliding_window(std::int64_t left, std::int64_t right, bool causal = false);
  static Mask from_slices(std::vector<MaskSlice> slices);
  /// Documents given by cu_seqlens (int32 offsets, cu[0] = 0, non-decreasing): each document
  /// attends only within itself, causally or fully. Throws: Error(InvalidArgument) on bad offsets.
  static Mask document(const std::vector<std::int32_t>& cu_seqlens, bool causal);

  bool is_shorthand() const { return slices.empty(); }
  /// Stable 64-bit hash of the mask content, for cross-rank agreement checks.
  std::uint64_t fingerprint() const;
  /// Human-readable one-liner for error messages and plans.
  std::string describe() const;
};

/// One bin of a document-length distribution: lengths uniform in [lo, hi] (inclusive, tokens),
/// the bin chosen with probability weight / Σ weights.
struct LengthBin {
  std::int64_t lo = 0, hi = 0;
  double weight = 0;
};

/// LongCA-bench's document-length distribution for sequences ≤ 64K tokens
/// (`varlen_short_seqlen_distribution` in its dist_attn/benchmark/utils.py): 18 bins from
/// [0, 256] to [20480, 65536] tokens, weighted by corpus frequency: 3.3 documents on average
/// at S = 4096.
const std::vector<LengthBin>& benchmark_short_length_bins();

/// How the benchmark's document masks split the sequence into documents.
enum class DocumentLengths : std::uint8_t {
  FixedCount,  ///< num_documents ragged segments (lengths ∝ seeded weights uniform in [0.25, 1.75])
  Drawn,       ///< lengths drawn from length_bins until S is filled (LongCA-bench's generate_seqlens)
};

/// Parameters of the benchmark masks; every field has a documented default so that
/// make_benchmark_mask(type, S) alone is meaningful. Random parts are seeded (deterministic,
/// identical on every platform: SplitMix64, not the benchmark's Python RNG — same distributions,
/// other draws).
struct BenchmarkMaskConfig {
  std::uint64_t seed = 0;
  DocumentLengths document_lengths = DocumentLengths::FixedCount;
  std::int64_t num_documents = 8;      ///< FixedCount: lengths drawn around S/num_documents
  std::vector<LengthBin> length_bins;  ///< Drawn: empty → benchmark_short_length_bins()
  std::int64_t window = 0;             ///< sliding windows: 0 → max(1, S/8)
  std::int64_t global_tokens = 0;      ///< global_sliding_window: 0 → 2·window (the benchmark kernel's)
  std::int64_t block = 64;             ///< qk_sparse / hash_sparse / block_causal_document block size
  double density = 0.25;               ///< qk_sparse: fraction of (q-block, k-block) pairs kept
  double prefix_fraction = 0.25;       ///< prefix_lm_causal: prefix share of the sequence
  std::int64_t prefix_length = 0;      ///< prefix_lm_document: one absolute prefix p for every
                                       ///< document; 0 → seeded draw uniform in [1, |document 0|]
};

/// Document boundaries of the benchmark's document masks as offsets (cu[0] = 0, cu.back() =
/// S_global, non-decreasing): FixedCount gives num_documents ragged segments (size
/// num_documents + 1); Drawn draws lengths from the bins until the sequence is full (the last one
/// cut to fit, every length ≥ 1). Depends on the seed and the length settings only, so every
/// document type of one config shares them (and varlen runs can reuse them as cu_seqlens).
/// Throws: Error(InvalidArgument) for S_global < 0, num_documents < 1, or bins with lo > hi,
/// lo < 0, negative weights or no positive weight.
std::vector<std::int64_t> benchmark_document_offsets(std::int64_t S_global,
                                                     const BenchmarkMaskConfig& cfg = {});

/// block_causal_document's documents, as LongCA-bench builds them: consecutive documents of a
/// seeded number of whole `block`s uniform in [1, 8] (the last cut to the blocks left; a partial
/// last block when block ∤ S_global). Offsets as benchmark_document_offsets. Throws as it.
std::vector<std::int64_t> benchmark_block_document_offsets(std::int64_t S_global,
                                                           const BenchmarkMaskConfig& cfg = {});

/// prefix_lm_document's prefix length p: cfg.prefix_length if > 0, else a seeded draw uniform in
/// [1, length of the first document] (LongCA-bench's draw; 0 when S_global = 0).
std::int64_t benchmark_prefix_length(std::int64_t S_global, const BenchmarkMaskConfig& cfg = {});

/// Builds one of the 14 benchmark masks over a sequence of S_global tokens (q and k share
/// positions), as explicit slices over [0, S_global)². Documents are benchmark_document_offsets
/// (seeded); empty documents are dropped. Source: LongCA-bench (NJUDeepEngine/LongCA-bench,
/// dist_attn/benchmark/mask.py and the FlexAttention mask functions of attn/baselines/utils.py);
/// docs/api.md lists where burst follows which of its forms.
///   full, causal — one slice;  causal_document / full_document — each document causal / full;
///   share_question — document 0 is the question (causal); every later document (an answer)
///     sees the whole question and itself causally;
///   causal_blockwise — each document causal; the last one also sees all earlier documents;
///   prefix_lm_document — one absolute prefix p (benchmark_prefix_length) for every document: the
///     document's first p keys are seen by all its queries, the rest causally; a document of at
///     most p tokens is fully bidirectional;
///   prefix_lm_causal — the first round(prefix_fraction·S) keys seen by everyone, the rest causal;
///   qk_sparse — burst's own (the benchmark names it without a generator): causal block-sparse,
///     q-block i sees its own block causally and each earlier k-block with seeded probability
///     `density`;  hash_sparse — burst's own: each block gets a seeded bucket among
///     round(1/density); a q-block sees its own block causally and earlier blocks of its bucket;
///   sliding_window — |q − k| ≤ window;  sliding_window_causal — 0 ≤ q − k ≤ window;
///   global_sliding_window — the benchmark kernel's: |q − k| ≤ window, or q or k among the
///     first global_tokens (default 2·window);
///   block_causal_document — documents of whole blocks (benchmark_block_document_offsets); a
///     token sees its document from the start to the end of its own `block`.
/// Throws: Error(InvalidArgument) for S_global < 0 or nonsensical config values.
Mask make_benchmark_mask(MaskType type, std::int64_t S_global, const BenchmarkMaskConfig& cfg = {});

/// A mask made concrete for global lengths (S_q_global, S_kv_global): shorthands expanded into
/// slices, slices validated and indexed for fast queries.
/// Throws (constructor): Error(InvalidArgument) for slices with begin > end, negative positions,
/// positions beyond the global lengths, or shorthand and explicit slices mixed.
class ResolvedMask {
 public:
  ResolvedMask(const Mask& mask, std::int64_t S_q_global, std::int64_t S_kv_global);
  /// The constructor's checks alone (no slices expanded, no index built): throws what it throws.
  static void validate(const Mask& mask, std::int64_t S_q_global, std::int64_t S_kv_global);
  /// Mask::describe() of the mask this was resolved from.
  const std::string& describe() const { return description_; }

  const std::vector<MaskSlice>& slices() const { return slices_; }
  std::int64_t seq_q() const { return S_q_; }
  std::int64_t seq_kv() const { return S_kv_; }

  bool visible(std::int64_t q, std::int64_t k) const;
  /// Classifies all pairs of the position hulls [q_lo, q_hi] × [k_lo, k_hi] (inclusive).
  /// Conservative: Full and Empty are exact claims about every pair in the hulls; Partial means
  /// "evaluate per element". Cost: O(slices overlapping the q hull).
  TileClass classify(std::int64_t q_lo, std::int64_t q_hi, std::int64_t k_lo, std::int64_t k_hi) const;
  /// Calls fn(lo, hi) for each maximal interval of visible key positions in [k_lo, k_hi]
  /// (inclusive) for query position q; intervals are disjoint and increasing.
  void visible_ranges(std::int64_t q, std::int64_t k_lo, std::int64_t k_hi,
                      const std::function<void(std::int64_t, std::int64_t)>& fn) const;
  /// A mask that is one linear band: a row q ∈ [q_begin, q_end) sees the key positions
  /// [max(k_begin, q + lo_off), min(k_end − 1, q + hi_off)] (none where that is empty), other
  /// rows none; an open side (or a window of 2⁶⁰ tokens or more) has an offset of about ±2⁶⁰,
  /// past every position.
  struct LinearBand {
    std::int64_t q_begin = 0, q_end = 0, k_begin = 0, k_end = 0, lo_off = 0, hi_off = 0;
  };
  /// The band when the mask is one non-empty slice (any kind — all keys, causal, inverse- or
  /// bi-causal — with or without windows, over any ranges; the shorthands): within its query
  /// range both bounds move by 0 or 1 key position per query position. nullopt for any other
  /// mask, the empty one included. Positions in tokens, as everywhere here. Not collective
  /// (local, pure); never throws. O(1).
  std::optional<LinearBand> linear_band() const noexcept;
  /// Number of visible (q, k) pairs for the given sorted position lists — the "mask area"
  /// of the FLOP formulas. Cost: O(|q| · slices).
  std::int64_t visible_pairs(const std::vector<std::int64_t>& q_pos,
                             const std::vector<std::int64_t>& k_pos) const;
  /// Visible pairs over the full [0,S_q) × [0,S_kv) square.
  std::int64_t visible_pairs() const;

 private:
  /// A slice reduced to linear bounds: row q sees k ∈ [max(k_begin, q + lo_off),
  /// min(k_end − 1, q + hi_off)] when q ∈ [q_begin, q_end); ±kUnbounded when absent.
  struct Bounds {
    std::int64_t q_begin, q_end, k_begin, k_end, lo_off, hi_off;
  };
  template <typename Fn>
  void for_each_candidate(std::int64_t q_lo, std::int64_t q_hi, std::int64_t k_lo, std::int64_t k_hi,
                          Fn&& fn) const;

  std::vector<MaskSlice> slices_;
  std::int64_t S_q_ = 0, S_kv_ = 0;
  std::string description_;
  // Index: q positions are cut into buckets of 2^bucket_shift_ rows; bucket j lists (CSR) the
  // slices whose q range meets it, sorted by k_begin with a running max of k_end. A query over
  // [q_lo, q_hi] × [k_lo, k_hi] visits its buckets, binary-searches the k window and takes each
  // slice once (in the first visited bucket it meets): O(log + slices overlapping) per query.
  std::vector<Bounds> bounds_;
  int bucket_shift_ = 0;
  std::vector<std::int32_t> bucket_start_, bucket_items_;
  std::vector<std::int64_t> item_k_begin_, item_k_end_max_;  // parallel to bucket_items_
};

}  // namespace burst
