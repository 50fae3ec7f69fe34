// Mask IR: every benchmark type against an independent brute-force definition, hand-checked
// bitmaps, the tile classifier and visible_ranges against per-element `visible`, shorthand
// semantics (bottom-right alignment for S_q != S_kv) and validation errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "burst/error.h"
#include "burst/mask.h"
#include "random_masks.h"
#include "test_util.h"

namespace burst {
namespace {

using Pred = std::function<bool(std::int64_t, std::int64_t)>;

std::int64_t doc_of(const std::vector<std::int64_t>& cu, std::int64_t x) {
  return std::upper_bound(cu.begin(), cu.end(), x) - cu.begin() - 1;  // cu[i] <= x < cu[i+1]
}

// The benchmark masks written directly from their definitions (mask.h), independent of slices.
// Returns an empty function for the two random block-sparse types (checked by properties).
Pred brute_force(MaskType type, std::int64_t S, const BenchmarkMaskConfig& cfg) {
  const auto cu = benchmark_document_offsets(S, cfg);
  const std::int64_t w = cfg.window > 0 ? cfg.window : std::max<std::int64_t>(1, S / 8);
  const std::int64_t g = cfg.global_tokens > 0 ? cfg.global_tokens : 2 * w;  // the benchmark kernel's 2w
  auto same = [cu](std::int64_t q, std::int64_t k) { return doc_of(cu, q) == doc_of(cu, k); };
  switch (type) {
    case MaskType::Full: return [](std::int64_t, std::int64_t) { return true; };
    case MaskType::Causal: return [](std::int64_t q, std::int64_t k) { return k <= q; };
    case MaskType::CausalDocument:
      return [same](std::int64_t q, std::int64_t k) { return same(q, k) && k <= q; };
    case MaskType::FullDocument: return same;
    case MaskType::ShareQuestion:
      return [same, lq = cu[1]](std::int64_t q, std::int64_t k) {
        if (q < lq) return k <= q;
        return k < lq || (same(q, k) && k <= q);
      };
    case MaskType::CausalBlockwise: {
      std::int64_t last = 0;
      for (std::size_t i = 0; i + 1 < cu.size(); ++i)
        if (cu[i + 1] > cu[i]) last = cu[i];
      return [same, last](std::int64_t q, std::int64_t k) { return k <= q && (q >= last || same(q, k)); };
    }
    case MaskType::PrefixLmDocument:
      return [cu, p = benchmark_prefix_length(S, cfg)](std::int64_t q, std::int64_t k) {
        const auto d = static_cast<std::size_t>(doc_of(cu, q));
        if (doc_of(cu, k) != static_cast<std::int64_t>(d)) return false;
        return k - cu[d] < p || k <= q;  // one absolute prefix p in every document
      };
    case MaskType::PrefixLmCausal:
      return [P = std::llround(cfg.prefix_fraction * static_cast<double>(S))](
                 std::int64_t q, std::int64_t k) { return k < P || k <= q; };
    case MaskType::SlidingWindow: return [w](std::int64_t q, std::int64_t k) { return std::abs(q - k) <= w; };
    case MaskType::SlidingWindowCausal:
      return [w](std::int64_t q, std::int64_t k) { return k <= q && q - k <= w; };
    case MaskType::GlobalSlidingWindow:
      return [w, g](std::int64_t q, std::int64_t k) { return q < g || k < g || std::abs(q - k) <= w; };
    case MaskType::BlockCausalDocument:  // the benchmark kernel: same document, k < end of q's block
      return [cb = benchmark_block_document_offsets(S, cfg), bs = cfg.block](std::int64_t q, std::int64_t k) {
        return doc_of(cb, q) == doc_of(cb, k) && k < (q / bs + 1) * bs;
      };
    case MaskType::QkSparse:
    case MaskType::HashSparse: return {};
  }
  return {};
}

BenchmarkMaskConfig small_config(std::uint64_t seed) {
  BenchmarkMaskConfig cfg;
  cfg.seed = seed;
  cfg.num_documents = 5;
  cfg.block = 8;
  return cfg;
}

std::string bitmap(const ResolvedMask& m) {
  std::string s;
  for (std::int64_t q = 0; q < m.seq_q(); ++q) {
    for (std::int64_t k = 0; k < m.seq_kv(); ++k) s += m.visible(q, k) ? '1' : '.';
    s += '\n';
  }
  return s;
}

TEST(MaskTypes, NamesRoundTrip) {
  ASSERT_EQ(all_mask_types().size(), static_cast<std::size_t>(kNumMaskTypes));
  for (MaskType t : all_mask_types()) EXPECT_EQ(mask_type_from_string(to_string(t)), t);
  try {
    mask_type_from_string("diagonal");
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("diagonal"), std::string::npos);
    EXPECT_NE(e.message().find("block_causal_document"), std::string::npos);
  }
}

TEST(MaskTypes, DocumentOffsetsAreRaggedAndCoverTheSequence) {
  BenchmarkMaskConfig cfg;
  cfg.seed = 7;
  const auto cu = benchmark_document_offsets(1000, cfg);
  ASSERT_EQ(cu.size(), 9u);
  EXPECT_EQ(cu.front(), 0);
  EXPECT_EQ(cu.back(), 1000);
  std::vector<std::int64_t> len;
  for (std::size_t i = 0; i + 1 < cu.size(); ++i) len.push_back(cu[i + 1] - cu[i]);
  EXPECT_GT(*std::min_element(len.begin(), len.end()), 0);
  EXPECT_NE(*std::min_element(len.begin(), len.end()), *std::max_element(len.begin(), len.end()));
  EXPECT_EQ(benchmark_document_offsets(1000, cfg), cu);  // seeded
  cfg.seed = 8;
  EXPECT_NE(benchmark_document_offsets(1000, cfg), cu);
}

TEST(MaskTypes, DrawnDocumentLengthsFollowTheBenchmarkDistribution) {
  // LongCA-bench's short-document table: 3.3 documents on average at S = 4096 (the same draw in
  // Python over 2000 seeds gives 3.29).
  BenchmarkMaskConfig cfg;
  cfg.document_lengths = DocumentLengths::Drawn;
  double documents = 0;
  for (std::uint64_t seed = 0; seed < 200; ++seed) {
    cfg.seed = seed;
    const auto cu = benchmark_document_offsets(4096, cfg);
    ASSERT_EQ(cu.front(), 0);
    ASSERT_EQ(cu.back(), 4096);
    for (std::size_t i = 0; i + 1 < cu.size(); ++i) ASSERT_GE(cu[i + 1] - cu[i], 1);
    documents += static_cast<double>(cu.size() - 1);
    EXPECT_EQ(benchmark_document_offsets(4096, cfg), cu);  // seeded
  }
  EXPECT_GT(documents / 200, 2.6);
  EXPECT_LT(documents / 200, 4.0);
  // A one-bin distribution: every length but the last exactly 100.
  cfg.length_bins = {{100, 100, 1.0}};
  const auto cu = benchmark_document_offsets(1050, cfg);
  ASSERT_EQ(cu.size(), 12u);
  EXPECT_EQ(cu[10], 1000);
  cfg.length_bins = {{5, 3, 1.0}};
  EXPECT_THROW(benchmark_document_offsets(10, cfg), Error);
  cfg.length_bins = {{1, 3, 0.0}};
  EXPECT_THROW(benchmark_document_offsets(10, cfg), Error);
}

TEST(MaskTypes, BlockDocumentsAreBlockAlignedAndSeveral) {
  BenchmarkMaskConfig cfg;
  cfg.block = 16;
  for (std::uint64_t seed = 0; seed < 20; ++seed) {
    cfg.seed = seed;
    const auto cu = benchmark_block_document_offsets(64 * 16 + 5, cfg);
    EXPECT_GE(cu.size(), 9u) << "64 blocks in documents of at most 8 blocks";
    for (std::size_t i = 0; i + 1 < cu.size(); ++i) {
      const std::int64_t len = cu[i + 1] - cu[i];
      EXPECT_GE(len, 1);
      EXPECT_LE(len, 8 * 16);
      if (i + 2 < cu.size()) { EXPECT_EQ(len % 16, 0); }
    }
  }
}

TEST(MaskTypes, PrefixLmDocumentSharesOneAbsolutePrefix) {
  BenchmarkMaskConfig cfg = small_config(3);
  const std::int64_t S = 131;
  const auto cu = benchmark_document_offsets(S, cfg);
  const std::int64_t p = benchmark_prefix_length(S, cfg);
  EXPECT_GE(p, 1);
  EXPECT_LE(p, cu[1] - cu[0]);  // drawn in [1, |document 0|]
  cfg.prefix_length = 1000;     // longer than every document: each one fully bidirectional
  EXPECT_EQ(ResolvedMask(make_benchmark_mask(MaskType::PrefixLmDocument, S, cfg), S, S).visible_pairs(),
            ResolvedMask(make_benchmark_mask(MaskType::FullDocument, S, cfg), S, S).visible_pairs());
  cfg.prefix_length = -1;
  EXPECT_THROW(make_benchmark_mask(MaskType::PrefixLmDocument, S, cfg), Error);
}

// Every deterministic type equals its brute-force definition, for several seeds and lengths
// (including tiny ones where documents are empty).
TEST(MaskTypes, MatchBruteForceDefinitions) {
  for (MaskType type : all_mask_types()) {
    for (std::int64_t S : {1, 2, 7, 50, 131}) {
      for (std::uint64_t seed : {0u, 1u, 2u}) {
        const BenchmarkMaskConfig cfg = small_config(seed);
        const Pred expect = brute_force(type, S, cfg);
        if (!expect) continue;
        const ResolvedMask m(make_benchmark_mask(type, S, cfg), S, S);
        for (std::int64_t q = 0; q < S; ++q)
          for (std::int64_t k = 0; k < S; ++k)
            ASSERT_EQ(m.visible(q, k), expect(q, k))
                << to_string(type) << " S=" << S << " seed=" << seed << " q=" << q << " k=" << k;
      }
    }
  }
}

TEST(MaskTypes, HandCheckedBitmaps) {
  BenchmarkMaskConfig cfg;
  cfg.window = 1;
  cfg.global_tokens = 1;
  cfg.prefix_fraction = 0.5;
  cfg.prefix_length = 2;
  cfg.num_documents = 1;
  cfg.block = 2;
  auto bm = [&](MaskType t, std::int64_t S) {
    return bitmap(ResolvedMask(make_benchmark_mask(t, S, cfg), S, S));
  };
  EXPECT_EQ(bm(MaskType::Causal, 3), "1..\n11.\n111\n");
  EXPECT_EQ(bm(MaskType::SlidingWindow, 4), "11..\n111.\n.111\n..11\n");
  EXPECT_EQ(bm(MaskType::SlidingWindowCausal, 4), "1...\n11..\n.11.\n..11\n");
  EXPECT_EQ(bm(MaskType::PrefixLmCausal, 4), "11..\n11..\n111.\n1111\n");
  EXPECT_EQ(bm(MaskType::GlobalSlidingWindow, 5), "11111\n111..\n1111.\n1.111\n1..11\n");
  // Blocks of 2; seed 4 draws documents of 2 and 8 blocks (the second cut to the 2 left).
  cfg.seed = 4;
  ASSERT_EQ(benchmark_block_document_offsets(8, cfg), (std::vector<std::int64_t>{0, 4, 8}));
  EXPECT_EQ(bm(MaskType::BlockCausalDocument, 8),
            "11......\n11......\n1111....\n1111....\n....11..\n....11..\n....1111\n....1111\n");
  EXPECT_EQ(bm(MaskType::PrefixLmDocument, 4), "11..\n11..\n111.\n1111\n");  // one document
  // Block-sparse with one block per 2 tokens and density 1: every earlier block kept = causal.
  cfg.density = 1.0;
  EXPECT_EQ(bm(MaskType::QkSparse, 5), bm(MaskType::Causal, 5));
  EXPECT_EQ(bm(MaskType::HashSparse, 5), bm(MaskType::Causal, 5));
}

// qk_sparse / hash_sparse: causal, own block always causal, whole blocks elsewhere, the seeded
// density, and (hash) bucket equality is an equivalence relation.
TEST(MaskTypes, BlockSparseProperties) {
  const std::int64_t S = 517, bs = 16, nb = (S + bs - 1) / bs;
  for (MaskType type : {MaskType::QkSparse, MaskType::HashSparse}) {
    BenchmarkMaskConfig cfg;
    cfg.block = bs;
    cfg.seed = 3;
    const ResolvedMask m(make_benchmark_mask(type, S, cfg), S, S);
    std::vector<char> kept(static_cast<std::size_t>(nb * nb), 0);
    std::int64_t n_kept = 0;
    for (std::int64_t q = 0; q < S; ++q)
      for (std::int64_t k = 0; k < S; ++k) {
        const bool vis = m.visible(q, k);
        if (k > q) {
          ASSERT_FALSE(vis) << q << "," << k;
          continue;
        }
        if (q / bs == k / bs) {
          ASSERT_TRUE(vis) << q << "," << k;
          continue;
        }
        auto& cell = kept[static_cast<std::size_t>((q / bs) * nb + k / bs)];
        if (q % bs == 0 && k % bs == 0) {
          cell = vis ? 1 : 0;
          n_kept += vis;
        } else
          ASSERT_EQ(vis, cell != 0) << to_string(type) << " not block-constant at " << q << "," << k;
      }
    const double frac = static_cast<double>(n_kept) / static_cast<double>(nb * (nb - 1) / 2);
    EXPECT_NEAR(frac, 0.25, type == MaskType::QkSparse ? 0.06 : 0.12) << to_string(type);
    if (type == MaskType::HashSparse)
      for (std::int64_t i = 0; i < nb; ++i)
        for (std::int64_t j = 0; j < i; ++j)
          for (std::int64_t l = 0; l < j; ++l) {
            const bool ij = kept[static_cast<std::size_t>(i * nb + j)],
                       jl = kept[static_cast<std::size_t>(j * nb + l)];
            const bool il = kept[static_cast<std::size_t>(i * nb + l)];
            if (ij && jl) {
              ASSERT_TRUE(il) << "bucket relation not transitive at " << i << "," << j << "," << l;
            }
            if (ij && il) {
              ASSERT_TRUE(jl) << "bucket relation not transitive at " << i << "," << j << "," << l;
            }
          }
  }
}

// classify over random hulls: Full and Empty are exact claims; Empty is returned whenever the
// tile is empty; for single-slice masks Full is returned whenever the tile is full.
TEST(MaskClassify, NeverWrongAgainstBruteForce) {
  std::uint64_t state = 12345;
  auto rnd = [&](std::int64_t n) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<std::int64_t>((state >> 33) % static_cast<std::uint64_t>(n));
  };
  const std::int64_t S = 97;
  for (MaskType type : all_mask_types()) {
    const Mask mask = make_benchmark_mask(type, S, small_config(5));
    const ResolvedMask m(mask, S, S);
    int full = 0, empty = 0;
    for (int trial = 0; trial < 2000; ++trial) {
      const std::int64_t qa = rnd(S), qb = std::min(S - 1, qa + rnd(20));
      const std::int64_t ka = rnd(S), kb = std::min(S - 1, ka + rnd(20));
      std::int64_t n_vis = 0;
      for (std::int64_t q = qa; q <= qb; ++q)
        for (std::int64_t k = ka; k <= kb; ++k) n_vis += m.visible(q, k);
      const std::int64_t n = (qb - qa + 1) * (kb - ka + 1);
      const TileClass c = m.classify(qa, qb, ka, kb);
      auto where = [&] {  // built only for a failure message
        return std::string(to_string(type)) + " tile [" + std::to_string(qa) + "," + std::to_string(qb) +
               "]x[" + std::to_string(ka) + "," + std::to_string(kb) + "]";
      };
      if (c == TileClass::Full) { ASSERT_EQ(n_vis, n) << where(); }
      if (c == TileClass::Empty) { ASSERT_EQ(n_vis, 0) << where(); }
      if (n_vis == 0) { ASSERT_EQ(c, TileClass::Empty) << where(); }
      if (n_vis == n && c != TileClass::Full && mask.slices.size() == 1)
        ADD_FAILURE() << "single-slice mask, full tile not Full: " << where();
      full += c == TileClass::Full;
      empty += c == TileClass::Empty;
    }
    if (type != MaskType::Full) {
      EXPECT_GT(empty, 0) << to_string(type);
    }  // the test exercised both verdicts
    EXPECT_GT(full, 0) << to_string(type);
  }
  // Hulls wider than the mask and inverted hulls.
  const ResolvedMask causal(Mask::causal_mask(), 10, 10);
  EXPECT_EQ(causal.classify(5, 3, 0, 9), TileClass::Empty);
  EXPECT_EQ(causal.classify(0, 9, 20, 30), TileClass::Empty);
  EXPECT_EQ(causal.classify(8, 9, 0, 3), TileClass::Full);
  EXPECT_EQ(causal.classify(8, 40, 0, 3), TileClass::Partial);  // rows >= 10 do not exist: not Full
}

TEST(MaskVisibleRanges, MatchVisibleAndAreMaximal) {
  const std::int64_t S = 83;
  for (MaskType type : all_mask_types()) {
    const ResolvedMask m(make_benchmark_mask(type, S, small_config(9)), S, S);
    for (std::int64_t q = 0; q < S; ++q)
      for (auto [lo, hi] : {std::pair<std::int64_t, std::int64_t>{0, S - 1}, {q / 2, q / 2 + 20}, {-5, 3}}) {
        std::vector<char> got(static_cast<std::size_t>(S + 30), 0);
        std::int64_t prev_hi = -1000;
        m.visible_ranges(q, lo, hi, [&](std::int64_t a, std::int64_t b) {
          ASSERT_LE(a, b);
          ASSERT_GT(a, prev_hi + 1) << "ranges must be disjoint, increasing and maximal";
          ASSERT_GE(a, std::max<std::int64_t>(lo, 0));
          ASSERT_LE(b, hi);
          prev_hi = b;
          for (std::int64_t k = a; k <= b; ++k) got[static_cast<std::size_t>(k)] = 1;
        });
        for (std::int64_t k = std::max<std::int64_t>(lo, 0); k <= std::min(hi, S - 1); ++k)
          ASSERT_EQ(got[static_cast<std::size_t>(k)] != 0, m.visible(q, k))
              << to_string(type) << " q=" << q << " k=" << k;
      }
  }
}

// linear_band: a mask of one slice (every kind, windows, partial ranges, the shorthands with
// unequal lengths) admits through its band exactly the visible pairs; any other mask has none.
TEST(MaskLinearBand, AdmitsExactlyTheVisiblePairs) {
  test::Lcg rnd(777);
  int bands = 0;
  for (int trial = 0; trial < 600; ++trial) {
    const std::int64_t S_q = 1 + rnd(40), S_kv = 1 + rnd(40);
    const auto window = [&] { return test::random_window(rnd, 12); };
    Mask mask;
    bool empty = false;
    if (trial % 2 == 0) {
      const int kind = static_cast<int>(rnd(3));
      mask = kind == 0   ? Mask::full()
             : kind == 1 ? Mask::causal_mask()
                         : Mask::sliding_window(window(), window(), rnd(2) == 0);
    } else {
      MaskSlice sl;
      sl.q_begin = rnd(S_q + 1);
      sl.q_end = sl.q_begin + rnd(S_q - sl.q_begin + 1);
      sl.k_begin = rnd(S_kv + 1);
      sl.k_end = sl.k_begin + rnd(S_kv - sl.k_begin + 1);
      sl.kind = static_cast<SliceKind>(rnd(4));
      sl.window_left = window();
      sl.window_right = window();
      empty = sl.q_begin == sl.q_end || sl.k_begin == sl.k_end;
      mask = Mask::from_slices({sl});
    }
    const ResolvedMask m(mask, S_q, S_kv);
    const std::optional<ResolvedMask::LinearBand> band = m.linear_band();
    ASSERT_EQ(band.has_value(), !empty) << mask.describe();
    if (!band) continue;
    ++bands;
    for (std::int64_t q = 0; q < S_q; ++q)
      for (std::int64_t k = 0; k < S_kv; ++k) {
        const bool in_band = q >= band->q_begin && q < band->q_end &&
                             k >= std::max(band->k_begin, q + band->lo_off) &&
                             k <= std::min(band->k_end - 1, q + band->hi_off);
        ASSERT_EQ(in_band, m.visible(q, k))
            << mask.describe() << " S_q " << S_q << " S_kv " << S_kv << " q " << q << " k " << k;
      }
  }
  EXPECT_GT(bands, 400);
  // A window of 2⁶³ − 1 is as wide as none (it used to overflow the bounds off the diagonal).
  MaskSlice wide{10,
                 20,
                 0,
                 5,
                 SliceKind::Full,
                 std::numeric_limits<std::int64_t>::max(),
                 std::numeric_limits<std::int64_t>::max()};
  const ResolvedMask w(Mask::from_slices({wide}), 20, 20);
  for (std::int64_t q = 0; q < 20; ++q)
    for (std::int64_t k = 0; k < 20; ++k) EXPECT_EQ(w.visible(q, k), q >= 10 && k < 5) << q << ", " << k;
  // Several slices: no band (documents; two slices over the rows).
  const std::int64_t S = 64;
  EXPECT_FALSE(ResolvedMask(Mask::document({0, 20, 64}, true), S, S).linear_band().has_value());
  EXPECT_FALSE(ResolvedMask(Mask::from_slices({{0, 32, 0, 64, SliceKind::Causal, -1, -1},
                                               {32, 64, 0, 64, SliceKind::Causal, -1, -1}}),
                            S, S)
                   .linear_band()
                   .has_value());
}

TEST(MaskVisiblePairs, CountsMatchBruteForce) {
  const std::int64_t S = 64;
  std::vector<std::int64_t> striped, all(S);
  for (std::int64_t i = 0; i < S; ++i) all[static_cast<std::size_t>(i)] = i;
  for (std::int64_t i = 1; i < S; i += 3) striped.push_back(i);
  for (MaskType type : all_mask_types()) {
    const ResolvedMask m(make_benchmark_mask(type, S, small_config(4)), S, S);
    std::int64_t n_all = 0, n_striped = 0;
    for (std::int64_t q : all)
      for (std::int64_t k : all) n_all += m.visible(q, k);
    for (std::int64_t q : striped)
      for (std::int64_t k : all) n_striped += m.visible(q, k);
    EXPECT_EQ(m.visible_pairs(), n_all) << to_string(type);
    EXPECT_EQ(m.visible_pairs(all, all), n_all) << to_string(type);
    EXPECT_EQ(m.visible_pairs(striped, all), n_striped) << to_string(type);
  }
}

// flash_attn semantics: diagonal bottom-right aligned, windows inclusive, causal forces right = 0.
TEST(MaskShorthand, FlashAttnSemanticsForUnequalLengths) {
  for (std::int64_t S_q : {1, 3, 5, 8})
    for (std::int64_t S_kv : {1, 3, 5, 8})
      for (bool causal : {false, true})
        for (std::int64_t wl : {-1, 0, 2})
          for (std::int64_t wr : {-1, 0, 1}) {
            const Mask mask = Mask::sliding_window(wl, wr, causal);
            const ResolvedMask m(mask, S_q, S_kv);
            const std::int64_t right = causal ? 0 : wr;
            for (std::int64_t q = 0; q < S_q; ++q)
              for (std::int64_t k = 0; k < S_kv; ++k) {
                const std::int64_t diag = q + S_kv - S_q;
                const bool expect = (right < 0 || k <= diag + right) && (wl < 0 || k >= diag - wl);
                ASSERT_EQ(m.visible(q, k), expect)
                    << mask.describe() << " S_q=" << S_q << " S_kv=" << S_kv << " q=" << q << " k=" << k;
              }
          }
  // The documented example: S_q = 2, S_kv = 5, causal → row 0 sees k <= 3, row 1 all.
  EXPECT_EQ(bitmap(ResolvedMask(Mask::causal_mask(), 2, 5)), "1111.\n11111\n");
  // S_q > S_kv: the first rows see nothing (they are fully masked).
  EXPECT_EQ(bitmap(ResolvedMask(Mask::causal_mask(), 3, 2)), "..\n1.\n11\n");
  EXPECT_EQ(bitmap(ResolvedMask(Mask::full(), 2, 3)), "111\n111\n");
}

TEST(MaskSlices, KindsFollowTheirDefinitions) {
  // One 4x6 slice at an offset inside an 8x10 square, each kind, with and without windows.
  for (SliceKind kind : {SliceKind::Full, SliceKind::Causal, SliceKind::InvCausal, SliceKind::BiCausal})
    for (std::int64_t wl : {-1, 1})
      for (std::int64_t wr : {-1, 0, 2}) {
        const MaskSlice s{2, 6, 3, 9, kind, wl, wr};
        const ResolvedMask m(Mask::from_slices({s}), 8, 10);
        for (std::int64_t q = 0; q < 8; ++q)
          for (std::int64_t k = 0; k < 10; ++k) {
            const std::int64_t diag = q - s.q_end + s.k_end, inv = q - s.q_begin + s.k_begin;
            bool expect = q >= 2 && q < 6 && k >= 3 && k < 9;
            if (kind == SliceKind::Causal || kind == SliceKind::BiCausal) expect = expect && k <= diag;
            if (kind == SliceKind::InvCausal || kind == SliceKind::BiCausal) expect = expect && k >= inv;
            if (wl >= 0) expect = expect && k >= diag - wl;
            if (wr >= 0) expect = expect && k <= diag + wr;
            ASSERT_EQ(m.visible(q, k), expect)
                << Mask::from_slices({s}).describe() << " q=" << q << " k=" << k;
          }
      }
}

TEST(MaskSlices, KindNamesRoundTrip) {
  for (SliceKind k : {SliceKind::Full, SliceKind::Causal, SliceKind::InvCausal, SliceKind::BiCausal})
    EXPECT_EQ(slice_kind_from_string(to_string(k)), k);
  EXPECT_THROW(slice_kind_from_string("diagonal"), Error);
}

TEST(MaskSlices, DocumentBuilder) {
  const ResolvedMask m(Mask::document({0, 2, 2, 5}, true), 5, 5);
  EXPECT_EQ(bitmap(m), "1....\n11...\n..1..\n..11.\n..111\n");
  EXPECT_THROW(Mask::document({1, 3}, false), Error);
  EXPECT_THROW(Mask::document({0, 3, 2}, false), Error);
  EXPECT_THROW(Mask::document({}, false), Error);
}

TEST(MaskSlices, InvalidSlicesThrowWithValues) {
  auto expect_error = [](const Mask& mask, std::int64_t S_q, std::int64_t S_kv, const std::string& needle) {
    try {
      ResolvedMask m(mask, S_q, S_kv);
      ADD_FAILURE() << "no error for " << mask.describe();
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
      EXPECT_NE(e.message().find(needle), std::string::npos) << e.message();
    }
  };
  expect_error(Mask::from_slices({{5, 3, 0, 4}}), 8, 8, "[5,3)");         // begin > end
  expect_error(Mask::from_slices({{-1, 3, 0, 4}}), 8, 8, "[-1,3)");       // negative
  expect_error(Mask::from_slices({{0, 9, 0, 4}}), 8, 8, "S_q_global=8");  // beyond the length
  expect_error(Mask::from_slices({{0, 4, 0, 9}}), 8, 8, "S_kv_global=8");
  expect_error(Mask::from_slices({{0, 4, 0, 4, SliceKind::Full, -2, -1}}), 8, 8, "window");
  Mask mixed = Mask::from_slices({{0, 4, 0, 4}});
  mixed.causal = true;
  expect_error(mixed, 8, 8, "mixes shorthands");
  expect_error(Mask::full(), -1, 8, "S_q_global=-1");
  EXPECT_THROW(Mask::sliding_window(-3, 0), Error);
  BenchmarkMaskConfig bad;
  bad.density = 0;
  EXPECT_THROW(make_benchmark_mask(MaskType::QkSparse, 64, bad), Error);
  EXPECT_THROW(make_benchmark_mask(MaskType::Full, -1), Error);
}

TEST(MaskFingerprint, StableAndDiscriminating) {
  const Mask a = make_benchmark_mask(MaskType::CausalDocument, 256, small_config(1));
  const Mask b = make_benchmark_mask(MaskType::CausalDocument, 256, small_config(1));
  const Mask c = make_benchmark_mask(MaskType::CausalDocument, 256, small_config(2));
  EXPECT_EQ(a.fingerprint(), b.fingerprint());
  EXPECT_NE(a.fingerprint(), c.fingerprint());
  EXPECT_NE(Mask::causal_mask().fingerprint(), Mask::full().fingerprint());
  EXPECT_NE(Mask::sliding_window(3, 3).fingerprint(), Mask::sliding_window(3, 2).fingerprint());
  EXPECT_EQ(Mask::full().describe(), "full");
  EXPECT_EQ(Mask::sliding_window(4, 0, true).describe(), "causal window=(4,0)");
  EXPECT_NE(a.describe().find("causal"), std::string::npos);
}

// The index must answer exactly also when many long slices overlap (they widen the buckets).
TEST(MaskIndex, ManyOverlappingSlices) {
  std::vector<MaskSlice> s;
  for (std::int64_t i = 0; i < 300; ++i)
    s.push_back({i, 1000 - i, (i * 7) % 900, (i * 7) % 900 + 50, SliceKind::Causal, -1, -1});
  const ResolvedMask m(Mask::from_slices(s), 1000, 1000);
  for (std::int64_t q = 0; q < 1000; q += 37)
    for (std::int64_t k = 0; k < 1000; k += 3) {
      bool expect = false;
      for (const MaskSlice& x : s)
        expect = expect || (q >= x.q_begin && q < x.q_end && k >= x.k_begin && k < x.k_end &&
                            k <= q - x.q_end + x.k_end);
      ASSERT_EQ(m.visible(q, k), expect) << q << "," << k;
    }
}

}  // namespace
}  // namespace burst
