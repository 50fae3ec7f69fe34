// The 14 mask types of the Long-Context Attention Benchmark (LongCA-bench, arXiv 2510.17896) as
// Mask slices. Definitions are stated beside make_benchmark_mask in burst/mask.h; docs/api.md says
// which of the benchmark's forms (generator ranges or FlexAttention kernels) each one follows.
#include <algorithm>
#include <cmath>
#include <sstream>

#include "burst/error.h"
#include "burst/mask.h"
#include "burst/splitmix64.h"

namespace burst {
namespace {

constexpr const char* kNames[kNumMaskTypes] = {"full",
                                               "causal",
                                               "causal_document",
                                               "full_document",
                                               "share_question",
                                               "causal_blockwise",
                                               "prefix_lm_document",
                                               "prefix_lm_causal",
                                               "qk_sparse",
                                               "hash_sparse",
                                               "sliding_window",
                                               "sliding_window_causal",
                                               "global_sliding_window",
                                               "block_causal_document"};

// Ragged document boundaries: n documents whose lengths are proportional to weights drawn
// uniformly from [0.25, 1.75] (mean 1, so lengths scatter around S/n); cu[0] = 0, cu[n] = S.
std::vector<std::int64_t> ragged_documents(std::int64_t S, std::int64_t n, SplitMix64& rng) {
  std::vector<double> w(static_cast<std::size_t>(n));
  double total = 0;
  for (double& x : w) total += (x = 0.25 + 1.5 * rng.uniform());
  std::vector<std::int64_t> cu(1, 0);
  double acc = 0;
  for (std::size_t i = 0; i < w.size(); ++i) {
    acc += w[i];
    const auto e = i + 1 == w.size() ? S : std::llround(static_cast<double>(S) * acc / total);
    cu.push_back(std::clamp<std::int64_t>(e, cu.back(), S));
  }
  return cu;
}

// Uniform integer in [lo, hi] (hi ≥ lo; modulo bias below 2^-40 for the spans used here).
std::int64_t uniform_int(SplitMix64& rng, std::int64_t lo, std::int64_t hi) {
  return lo + static_cast<std::int64_t>(rng.next() % static_cast<std::uint64_t>(hi - lo + 1));
}

// LongCA-bench's generate_seqlens: pick a bin by weight, a length uniform in it, cut to what
// is left, at least 1; until S is filled.
std::vector<std::int64_t> drawn_documents(std::int64_t S, const std::vector<LengthBin>& bins,
                                          SplitMix64& rng) {
  double total = 0;
  for (const LengthBin& b : bins) {
    BURST_CHECK(b.lo >= 0 && b.lo <= b.hi && b.weight >= 0, InvalidArgument, "document length bin [", b.lo,
                ", ", b.hi, "] weight ", b.weight, ": needs 0 <= lo <= hi and weight >= 0");
    total += b.weight;
  }
  BURST_CHECK(total > 0, InvalidArgument, "document length bins need a positive total weight");
  std::vector<std::int64_t> cu(1, 0);
  while (cu.back() < S) {
    double x = rng.uniform() * total;
    std::size_t i = 0;
    while (i + 1 < bins.size() && (bins[i].weight <= 0 || x >= bins[i].weight)) x -= bins[i++].weight;
    const std::int64_t len =
        std::max<std::int64_t>(1, std::min(uniform_int(rng, bins[i].lo, bins[i].hi), S - cu.back()));
    cu.push_back(cu.back() + len);
  }
  return cu;
}

MaskSlice square(std::int64_t b, std::int64_t e, SliceKind kind) { return {b, e, b, e, kind, -1, -1}; }

// Causal block-sparse mask: q-block i sees its own block causally and the earlier k-blocks j < i
// for which keep(i, j) holds (whole blocks). A run of kept blocks ending at i−1 shares one Causal
// slice with the diagonal block (bottom-right alignment makes that exact); other runs are Full.
template <typename Keep>
std::vector<MaskSlice> block_sparse(std::int64_t S, std::int64_t block, Keep keep) {
  std::vector<MaskSlice> out;
  const std::int64_t nb = (S + block - 1) / block;
  for (std::int64_t i = 0; i < nb; ++i) {
    const std::int64_t qb = i * block, qe = std::min(S, qb + block);
    std::int64_t run = -1;  // first block of the current run of kept blocks
    for (std::int64_t j = 0; j < i; ++j) {
      const bool k = keep(i, j);
      if (k && run < 0) run = j;
      if (!k && run >= 0) {
        out.push_back({qb, qe, run * block, j * block, SliceKind::Full, -1, -1});
        run = -1;
      }
    }
    out.push_back({qb, qe, run >= 0 ? run * block : qb, qe, SliceKind::Causal, -1, -1});
  }
  return out;
}

}  // namespace

const std::vector<LengthBin>& benchmark_short_length_bins() {
  // LongCA-bench dist_attn/benchmark/utils.py, varlen_short_seqlen_distribution (×1024 tokens).
  static const std::vector<LengthBin> bins = {
      {0, 256, 0.0766},       {256, 512, 0.1651},    {512, 768, 0.1246},    {768, 1024, 0.0972},
      {1024, 1536, 0.1324},   {1536, 2048, 0.0927},  {2048, 2560, 0.0720},  {2560, 3072, 0.0519},
      {3072, 3584, 0.0379},   {3584, 4096, 0.0264},  {4096, 5120, 0.0380},  {5120, 6144, 0.0245},
      {6144, 7168, 0.0145},   {7168, 8192, 0.0097},  {8192, 10240, 0.0122}, {10240, 15360, 0.0128},
      {15360, 20480, 0.0051}, {20480, 65536, 0.0064}};
  return bins;
}

std::vector<std::int64_t> benchmark_document_offsets(std::int64_t S, const BenchmarkMaskConfig& cfg) {
  BURST_CHECK(S >= 0 && cfg.num_documents >= 1, InvalidArgument, "document offsets need S_global >= 0 (", S,
              ") and num_documents >= 1 (", cfg.num_documents, ")");
  SplitMix64 rng(cfg.seed);
  if (cfg.document_lengths == DocumentLengths::Drawn)
    return drawn_documents(S, cfg.length_bins.empty() ? benchmark_short_length_bins() : cfg.length_bins, rng);
  return ragged_documents(S, cfg.num_documents, rng);
}

std::vector<std::int64_t> benchmark_block_document_offsets(std::int64_t S, const BenchmarkMaskConfig& cfg) {
  BURST_CHECK(S >= 0 && cfg.block >= 1, InvalidArgument, "block document offsets need S_global >= 0 (", S,
              ") and block >= 1 (", cfg.block, ")");
  SplitMix64 rng(cfg.seed ^ 0xbb67ae8584caa73bull);
  std::vector<std::int64_t> cu(1, 0);
  while (cu.back() < S) cu.push_back(std::min(S, cu.back() + uniform_int(rng, 1, 8) * cfg.block));
  return cu;
}

std::int64_t benchmark_prefix_length(std::int64_t S, const BenchmarkMaskConfig& cfg) {
  BURST_CHECK(cfg.prefix_length >= 0, InvalidArgument, "prefix_length=", cfg.prefix_length, " must be >= 0");
  if (cfg.prefix_length > 0 || S == 0) return cfg.prefix_length;
  const auto cu = benchmark_document_offsets(S, cfg);
  std::int64_t first = 0;  // the first non-empty document
  for (std::size_t i = 0; i + 1 < cu.size() && first == 0; ++i) first = cu[i + 1] - cu[i];
  SplitMix64 rng(cfg.seed ^ 0x3c6ef372fe94f82bull);
  return uniform_int(rng, 1, first);
}

const char* to_string(MaskType type) noexcept {
  const auto i = static_cast<std::size_t>(type);
  return i < static_cast<std::size_t>(kNumMaskTypes) ? kNames[i] : "?";
}

MaskType mask_type_from_string(const std::string& name) {
  for (int i = 0; i < kNumMaskTypes; ++i)
    if (name == kNames[i]) return static_cast<MaskType>(i);
  std::ostringstream valid;
  for (int i = 0; i < kNumMaskTypes; ++i) valid << (i ? ", " : "") << kNames[i];
  BURST_FAIL(InvalidArgument, "unknown mask type '", name, "'; valid: ", valid.str());
}

std::vector<MaskType> all_mask_types() {
  std::vector<MaskType> v;
  for (int i = 0; i < kNumMaskTypes; ++i) v.push_back(static_cast<MaskType>(i));
  return v;
}

Mask make_benchmark_mask(MaskType type, std::int64_t S, const BenchmarkMaskConfig& cfg) {
  BURST_CHECK(S >= 0, InvalidArgument, "benchmark mask length S_global=", S, " must be >= 0");
  BURST_CHECK(cfg.num_documents >= 1 && cfg.window >= 0 && cfg.global_tokens >= 0 && cfg.block >= 1,
              InvalidArgument, "benchmark mask config needs num_documents >= 1 (", cfg.num_documents,
              "), window >= 0 (", cfg.window, "), global_tokens >= 0 (", cfg.global_tokens, "), block >= 1 (",
              cfg.block, ")");
  BURST_CHECK(cfg.density > 0 && cfg.density <= 1 && cfg.prefix_fraction >= 0 && cfg.prefix_fraction <= 1,
              InvalidArgument, "benchmark mask config needs density in (0, 1] (", cfg.density,
              ") and prefix_fraction in [0, 1] (", cfg.prefix_fraction, ")");
  BURST_CHECK(static_cast<int>(type) < kNumMaskTypes, InvalidArgument, "unknown mask type ",
              static_cast<int>(type));

  // Document boundaries depend on the seed only (every document type of one seed shares them);
  // the sparse masks draw from a stream of their own.
  SplitMix64 rng(cfg.seed ^ (0x6a09e667f3bcc909ull * (static_cast<std::uint64_t>(type) + 1)));
  const std::int64_t window = cfg.window > 0 ? cfg.window : std::max<std::int64_t>(1, S / 8);
  const std::int64_t globals = std::min(S, cfg.global_tokens > 0 ? cfg.global_tokens : 2 * window);
  std::vector<std::int64_t> cu;
  if (type == MaskType::CausalDocument || type == MaskType::FullDocument || type == MaskType::ShareQuestion ||
      type == MaskType::CausalBlockwise || type == MaskType::PrefixLmDocument)
    cu = benchmark_document_offsets(S, cfg);
  if (type == MaskType::BlockCausalDocument) cu = benchmark_block_document_offsets(S, cfg);

  std::vector<MaskSlice> s;
  auto for_docs = [&](auto&& fn) {
    for (std::size_t i = 0; i + 1 < cu.size(); ++i)
      if (cu[i + 1] > cu[i]) fn(i, cu[i], cu[i + 1]);
  };
  switch (type) {
    case MaskType::Full:
      if (S > 0) s.push_back(square(0, S, SliceKind::Full));
      break;
    case MaskType::Causal:
      if (S > 0) s.push_back(square(0, S, SliceKind::Causal));
      break;
    case MaskType::CausalDocument:
    case MaskType::FullDocument: {
      const auto kind = type == MaskType::CausalDocument ? SliceKind::Causal : SliceKind::Full;
      for_docs([&](std::size_t, std::int64_t b, std::int64_t e) { s.push_back(square(b, e, kind)); });
      break;
    }
    case MaskType::ShareQuestion: {
      // Document 0 is the shared question (causal); every later document is an answer that sees
      // the whole question and itself causally, never another answer.
      const std::int64_t question = cu[1];
      for_docs([&](std::size_t i, std::int64_t b, std::int64_t e) {
        if (i > 0 && question > 0) s.push_back({b, e, 0, question, SliceKind::Full, -1, -1});
        s.push_back(square(b, e, SliceKind::Causal));
      });
      break;
    }
    case MaskType::CausalBlockwise: {
      // In-context-learning blocks: each block causal within itself; the last non-empty block
      // (the test example) also sees every earlier block in full.
      std::int64_t last_begin = 0;
      for_docs([&](std::size_t, std::int64_t b, std::int64_t) { last_begin = b; });
      for_docs([&](std::size_t, std::int64_t b, std::int64_t e) {
        if (b == last_begin && b > 0) s.push_back({b, e, 0, b, SliceKind::Full, -1, -1});
        s.push_back(square(b, e, SliceKind::Causal));
      });
      break;
    }
    case MaskType::PrefixLmDocument: {
      // LongCA-bench's generator: one absolute prefix for every document; a document of at most
      // p tokens is fully bidirectional. (Its FlexAttention kernel tests kv − start ≤ p, one
      // key more: the generator's ranges are the definition followed here.)
      const std::int64_t prefix = benchmark_prefix_length(S, cfg);
      for_docs([&](std::size_t, std::int64_t b, std::int64_t e) {
        const std::int64_t p = std::min(e, b + prefix);
        s.push_back(square(b, p, SliceKind::Full));                       // bidirectional prefix
        if (e > p) s.push_back({p, e, b, e, SliceKind::Causal, -1, -1});  // causal rest, sees prefix
      });
      break;
    }
    case MaskType::PrefixLmCausal: {
      const std::int64_t p = std::llround(cfg.prefix_fraction * static_cast<double>(S));
      if (p > 0) s.push_back(square(0, p, SliceKind::Full));
      if (S > p) s.push_back({p, S, 0, S, SliceKind::Causal, -1, -1});
      break;
    }
    case MaskType::QkSparse: {
      // Each earlier (q-block, k-block) pair is kept with probability `density`, seeded.
      const std::int64_t nb = (S + cfg.block - 1) / cfg.block;
      std::vector<char> kept(static_cast<std::size_t>(nb * nb));
      for (char& c : kept) c = rng.uniform() < cfg.density ? 1 : 0;
      s = block_sparse(S, cfg.block, [&](std::int64_t i, std::int64_t j) {
        return kept[static_cast<std::size_t>(i * nb + j)] != 0;
      });
      break;
    }
    case MaskType::HashSparse: {
      // Reformer-style buckets: every block gets a seeded bucket among round(1/density); a q-block
      // sees the earlier k-blocks of its own bucket.
      const std::int64_t nb = (S + cfg.block - 1) / cfg.block;
      const auto buckets =
          std::max<std::uint64_t>(1, static_cast<std::uint64_t>(std::llround(1.0 / cfg.density)));
      std::vector<std::uint64_t> bucket(static_cast<std::size_t>(nb));
      for (auto& x : bucket) x = rng.next() % buckets;
      s = block_sparse(S, cfg.block, [&](std::int64_t i, std::int64_t j) {
        return bucket[static_cast<std::size_t>(i)] == bucket[static_cast<std::size_t>(j)];
      });
      break;
    }
    case MaskType::SlidingWindow:
      if (S > 0) s.push_back({0, S, 0, S, SliceKind::Full, window, window});
      break;
    case MaskType::SlidingWindowCausal:
      if (S > 0) s.push_back({0, S, 0, S, SliceKind::Causal, window, -1});
      break;
    case MaskType::GlobalSlidingWindow:
      // The benchmark kernel's form (globle_sliding_window_mask_func): the first `globals`
      // (2·window) tokens see and are seen by everything; the rest see a symmetric window.
      if (S > 0) {
        s.push_back({0, globals, 0, S, SliceKind::Full, -1, -1});
        if (S > globals) s.push_back({globals, S, 0, globals, SliceKind::Full, -1, -1});
        s.push_back({0, S, 0, S, SliceKind::Full, window, window});
      }
      break;
    case MaskType::BlockCausalDocument:
      // Within a (block-aligned) document, a token sees its own block and every earlier one.
      for_docs([&](std::size_t, std::int64_t b, std::int64_t e) {
        for (std::int64_t qb = b; qb < e; qb += cfg.block) {
          const std::int64_t qe = std::min(e, qb + cfg.block);
          s.push_back({qb, qe, b, qe, SliceKind::Full, -1, -1});
        }
      });
      break;
  }
  return Mask::from_slices(std::move(s));
}

}  // namespace burst
