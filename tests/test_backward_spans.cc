// backward_spans (src/strategies/backward_spans.h): how a ring backward step's kernel work is cut into
// calls — one per run of consecutive key positions, on the query rows that see it. Pure; the
// distributed exactness tests (test_strategies) hold the results of the split calls to the fp64
// oracle, this holds the cut itself to hand-worked zigzag cases.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

#include "burst/mask.h"
#include "random_masks.h"
#include "strategies/backward_spans.h"

namespace burst::strategies {
namespace {

/// Rank r's zigzag positions: chunks r and 2P−1−r of c tokens each.
std::vector<std::int64_t> zigzag(int P, int r, std::int64_t c) {
  std::vector<std::int64_t> pos;
  for (std::int64_t i = 0; i < c; ++i) pos.push_back(r * c + i);
  for (std::int64_t i = 0; i < c; ++i) pos.push_back((2 * P - 1 - r) * c + i);
  return pos;
}

bool same(const KernelSpan& a, const KernelSpan& b) {
  return a.q0 == b.q0 && a.q1 == b.q1 && a.k0 == b.k0 && a.k1 == b.k1;
}

TEST(BackwardSpans, ZigzagCausalOneCallPerKeyChunk) {
  const std::int64_t c = 8, S = 2 * 4 * c;  // P = 4
  const ResolvedMask causal(Mask::causal_mask(), S, S);
  // Queries of rank 0 (chunks 0, 7) against keys of rank 2 (chunks 2, 5): chunk 0 sees neither,
  // chunk 7 sees both: two calls on query rows [c, 2c).
  const auto q = zigzag(4, 0, c), k = zigzag(4, 2, c);
  auto spans = backward_spans(causal, q.data(), 2 * c, k.data(), 2 * c);
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_TRUE(same(spans[0], {c, 2 * c, 0, c}));
  EXPECT_TRUE(same(spans[1], {c, 2 * c, c, 2 * c}));
  // Queries of rank 2 (chunks 2, 5) against keys of rank 0 (chunks 0, 7): key chunk 0 is seen
  // by both query chunks, key chunk 7 by none: one call.
  spans = backward_spans(causal, k.data(), 2 * c, q.data(), 2 * c);
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_TRUE(same(spans[0], {0, 2 * c, 0, c}));
  // The own block: key chunk 0 is seen by both query chunks, key chunk 7 by chunk 7 only.
  spans = backward_spans(causal, q.data(), 2 * c, q.data(), 2 * c);
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_TRUE(same(spans[0], {0, 2 * c, 0, c}));
  EXPECT_TRUE(same(spans[1], {c, 2 * c, c, 2 * c}));
}

TEST(BackwardSpans, ContiguousStripedAndFull) {
  const std::int64_t S = 64;
  const ResolvedMask causal(Mask::causal_mask(), S, S), full(Mask::full(), S, S);
  std::vector<std::int64_t> lo(16), hi(16);
  std::iota(lo.begin(), lo.end(), 0);
  std::iota(hi.begin(), hi.end(), 48);
  // Contiguous: one run each, cut in halves; queries before the keys see nothing.
  EXPECT_TRUE(backward_spans(causal, lo.data(), 16, hi.data(), 16).empty());
  auto spans = backward_spans(causal, hi.data(), 16, lo.data(), 16);
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_TRUE(same(spans[0], {0, 16, 0, 8}));
  EXPECT_TRUE(same(spans[1], {0, 16, 8, 16}));
  // The diagonal block: key half [0, 8) is seen by both query halves, [8, 16) by the second.
  spans = backward_spans(causal, lo.data(), 16, lo.data(), 16);
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_TRUE(same(spans[0], {0, 16, 0, 8}));
  EXPECT_TRUE(same(spans[1], {8, 16, 8, 16}));
  // Striped (every position a run of one): the whole block in one call.
  std::vector<std::int64_t> striped;
  for (std::int64_t i = 1; i < S; i += 4) striped.push_back(i);
  spans = backward_spans(causal, striped.data(), 16, lo.data(), 16);
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_TRUE(same(spans[0], {0, 16, 0, 16}));
  // Full mask, zigzag: every chunk sees every chunk.
  const auto q = zigzag(4, 0, 8), k = zigzag(4, 1, 8);  // positions 0-7, 56-63 and 8-15, 48-55
  spans = backward_spans(full, q.data(), 16, k.data(), 16);
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_TRUE(same(spans[0], {0, 16, 0, 8}));
  EXPECT_TRUE(same(spans[1], {0, 16, 8, 16}));
  // Adjacent chunks (rank P − 1 of a zigzag layout) are one run, cut at the middle all the same.
  const auto last = zigzag(2, 1, 16);  // 16-31, 32-47
  spans = backward_spans(full, q.data(), 16, last.data(), 32);
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_TRUE(same(spans[0], {0, 16, 0, 16}));
  EXPECT_TRUE(same(spans[1], {0, 16, 16, 32}));
  // An empty side: the one whole (empty) call, as before the split.
  EXPECT_EQ(backward_spans(full, q.data(), 0, k.data(), 16).size(), 1u);
}

// forward_spans: one call per query chunk over the key chunks it sees, hand-worked on zigzag.
TEST(ForwardSpans, ZigzagCausalOneCallPerQueryChunk) {
  const std::int64_t c = 8, S = 2 * 4 * c;  // P = 4
  const ResolvedMask causal(Mask::causal_mask(), S, S);
  const auto r0 = zigzag(4, 0, c), r2 = zigzag(4, 2, c);
  // Queries of rank 0 (chunks 0, 7) against keys of rank 2 (chunks 2, 5): chunk 0 sees none (its
  // rows are left to the caller), chunk 7 sees both key chunks.
  auto spans = forward_spans(causal, r0.data(), 2 * c, r2.data(), 2 * c);
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_TRUE(same(spans[0], {c, 2 * c, 0, 2 * c}));
  // Queries of rank 2 (chunks 2, 5) against keys of rank 0 (chunks 0, 7): each query chunk sees
  // key chunk 0 only.
  spans = forward_spans(causal, r2.data(), 2 * c, r0.data(), 2 * c);
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_TRUE(same(spans[0], {0, c, 0, c}));
  EXPECT_TRUE(same(spans[1], {c, 2 * c, 0, c}));
  // The own block: chunk 0 over key chunk 0 (causal), chunk 7 over both (the second causal).
  spans = forward_spans(causal, r0.data(), 2 * c, r0.data(), 2 * c);
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_TRUE(same(spans[0], {0, c, 0, c}));
  EXPECT_TRUE(same(spans[1], {c, 2 * c, 0, 2 * c}));
}

// Every visible (query, key) pair lies in exactly one span, the spans' rows are disjoint and in
// order, and no query row outside the spans sees a key: zigzag at P = 2..4, contiguous and the
// full mask, against a brute-force scan of the mask. As a GPU cuts them (shaped_spans), the
// causal and full zigzag spans of both passes stay whole (cuDNN takes them so).
TEST(ForwardSpans, CoverEveryVisiblePairOnce) {
  for (const bool use_full : {false, true})
    for (int P : {2, 3, 4}) {
      const std::int64_t c = 6, S = 2 * P * c;
      const ResolvedMask mask(use_full ? Mask::full() : Mask::causal_mask(), S, S);
      for (int r = 0; r < P; ++r)
        for (int s = 0; s < P; ++s) {
          const auto qp = zigzag(P, r, c), kp = zigzag(P, s, c);
          const std::int64_t n = 2 * c;
          const auto spans = forward_spans(mask, qp.data(), n, kp.data(), n);
          // cuDNN takes causal and full zigzag spans whole: a GPU's cut (shaped_spans) keeps them.
          for (const auto& cut : {spans, backward_spans(mask, qp.data(), n, kp.data(), n)}) {
            const auto shaped = shaped_spans(mask, qp.data(), kp.data(), cut);
            ASSERT_EQ(shaped.size(), cut.size()) << "P " << P << " blocks " << r << ", " << s;
            for (std::size_t i = 0; i < cut.size(); ++i) EXPECT_TRUE(same(shaped[i], cut[i]));
          }
          std::int64_t done = 0;
          for (const KernelSpan& sp : spans) {
            EXPECT_LE(done, sp.q0);
            EXPECT_LT(sp.q0, sp.q1);
            done = sp.q1;
          }
          for (std::int64_t i = 0; i < n; ++i)
            for (std::int64_t j = 0; j < n; ++j) {
              if (!mask.visible(qp[static_cast<std::size_t>(i)], kp[static_cast<std::size_t>(j)])) continue;
              int in = 0;
              for (const KernelSpan& sp : spans) in += i >= sp.q0 && i < sp.q1 && j >= sp.k0 && j < sp.k1;
              EXPECT_EQ(in, 1) << "P " << P << " q rank " << r << " kv rank " << s << " pair " << i << ", "
                               << j;
            }
        }
    }
}

// Under sliding windows both passes' spans drop their leading and trailing rows that see none
// of the span's keys: on contiguous and zigzag blocks (P = 2..4) every span's first and last row
// sees a key, and still every visible pair lies in exactly one span (the forward's rows disjoint
// and in order); cut as on a GPU (shaped_spans), a span has more rows than keys only
// where its last row sees its first key (no left bound). The window 3
// below a half block of the block before the diagonal: only the rows it reaches back from, [0, 3), over the
// half block of keys they see.
TEST(Spans, WindowsDropTheRowsThatSeeNoKey) {
  const std::int64_t S = 96;
  std::vector<std::int64_t> p(static_cast<std::size_t>(S));
  std::iota(p.begin(), p.end(), 0);
  {
    const ResolvedMask w3(Mask::sliding_window(3, 0, true), S, S);
    const auto spans = forward_spans(w3, p.data() + 48, 48, p.data(), 48);  // rank 1 of 2, keys of rank 0
    ASSERT_EQ(spans.size(), 1u);
    EXPECT_TRUE(same(spans[0], {0, 3, 24, 48}));
  }
  for (const std::int64_t w : {3, 10, 20, 40})
    for (const bool two_sided : {false, true}) {
      const ResolvedMask mask(two_sided ? Mask::sliding_window(w, w / 2) : Mask::sliding_window(w, 0, true),
                              S, S);
      for (int P : {2, 3, 4})
        for (const bool zz : {false, true}) {
          const std::int64_t n = S / P;
          for (int r = 0; r < P; ++r)
            for (int s = 0; s < P; ++s) {
              const auto qp = zz ? zigzag(P, r, S / (2 * P))
                                 : std::vector<std::int64_t>(p.begin() + r * n, p.begin() + (r + 1) * n);
              const auto kp = zz ? zigzag(P, s, S / (2 * P))
                                 : std::vector<std::int64_t>(p.begin() + s * n, p.begin() + (s + 1) * n);
              const auto sees = [&](std::int64_t i, const KernelSpan& sp) {
                for (std::int64_t j = sp.k0; j < sp.k1; ++j)
                  if (mask.visible(qp[static_cast<std::size_t>(i)], kp[static_cast<std::size_t>(j)]))
                    return true;
                return false;
              };
              const auto fwd = forward_spans(mask, qp.data(), n, kp.data(), n),
                         bwd = backward_spans(mask, qp.data(), n, kp.data(), n);
              // forward, backward, and both as a GPU cuts them (shaped_spans).
              const std::vector<KernelSpan> lists[4] = {fwd, bwd,
                                                        shaped_spans(mask, qp.data(), kp.data(), fwd),
                                                        shaped_spans(mask, qp.data(), kp.data(), bwd)};
              for (int l = 0; l < 4; ++l) {
                SCOPED_TRACE("w " + std::to_string(w) + (two_sided ? " two-sided" : "") + " P " +
                             std::to_string(P) + " zigzag " + std::to_string(zz) + " blocks " +
                             std::to_string(r) + ", " + std::to_string(s) + " list " + std::to_string(l));
                std::int64_t done = 0;
                for (const KernelSpan& sp : lists[l]) {
                  if (l % 2 == 0) {  // forward: rows disjoint and in order
                    EXPECT_LE(done, sp.q0);
                    done = sp.q1;
                  }
                  ASSERT_LT(sp.q0, sp.q1);
                  EXPECT_TRUE(sees(sp.q0, sp));
                  EXPECT_TRUE(sees(sp.q1 - 1, sp));
                  // As on a GPU: more rows than keys only where the last row sees the first key.
                  if (l >= 2) {
                    EXPECT_TRUE(sp.q1 - sp.q0 <= sp.k1 - sp.k0 ||
                                mask.visible(qp[static_cast<std::size_t>(sp.q1 - 1)],
                                             kp[static_cast<std::size_t>(sp.k0)]));
                  }
                }
                for (std::int64_t i = 0; i < n; ++i)
                  for (std::int64_t j = 0; j < n; ++j) {
                    if (!mask.visible(qp[static_cast<std::size_t>(i)], kp[static_cast<std::size_t>(j)]))
                      continue;
                    int in = 0;
                    for (const KernelSpan& sp : lists[l])
                      in += i >= sp.q0 && i < sp.q1 && j >= sp.k0 && j < sp.k1;
                    EXPECT_EQ(in, 1) << "pair " << i << ", " << j;
                  }
              }
            }
        }
    }
}

// Both cuts trim a span's leading and trailing rows that see none of its keys; under a mask of
// one band by walking the band's bounds, else row by row through the mask's visible intervals.
// The same slice given twice has the same pairs but no band (two slices): the walk's spans must
// be the row-by-row trim's, for random slices of every kind and window, on contiguous, zigzag,
// striped and arbitrary positions.
TEST(Spans, TrimmedRowsMatchTheMask) {
  test::Lcg rnd(4242);
  int trimmed = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    const std::int64_t S = 8 + rnd(72);
    const MaskSlice sl = test::random_slice(rnd, S, 24);
    const ResolvedMask band(Mask::from_slices({sl}), S, S), twice(Mask::from_slices({sl, sl}), S, S);
    ASSERT_TRUE(band.linear_band().has_value());
    ASSERT_FALSE(twice.linear_band().has_value());
    const std::vector<std::int64_t> qp = test::random_positions(rnd, S), kp = test::random_positions(rnd, S);
    const auto n_q = static_cast<std::int64_t>(qp.size()), n_kv = static_cast<std::int64_t>(kp.size());
    for (const bool fwd : {true, false}) {
      const auto cut = [&](const ResolvedMask& m) {
        return fwd ? forward_spans(m, qp.data(), n_q, kp.data(), n_kv)
                   : backward_spans(m, qp.data(), n_q, kp.data(), n_kv);
      };
      const std::vector<KernelSpan> a = cut(band), b = cut(twice);
      ASSERT_EQ(a.size(), b.size()) << Mask::from_slices({sl}).describe() << (fwd ? " forward" : " backward");
      for (std::size_t i = 0; i < a.size(); ++i) {
        EXPECT_TRUE(same(a[i], b[i])) << "span " << i << (fwd ? " forward" : " backward");
        trimmed += a[i].q1 - a[i].q0 < n_q;
      }
    }
  }
  EXPECT_GT(trimmed, 1000);  // spans on fewer rows than the block's
}

// Under a mask of one linear band a GPU's cut (shaped_spans) makes every span into pieces that
// are each one of cuDNN's bands over the keys they see, as long as they can be: random single
// slices and shorthands, positions contiguous, zigzag, striped or any increasing subset, spans
// from both cuts and arbitrary rectangles. Checked by brute force over every pair: each piece
// lies in its span, the pieces' rows are disjoint and in order, every visible pair of the span
// is in exactly one piece and a row in none sees no key of the span; each piece's rows each see
// one contiguous run of its keys, [s_i, e_i), s_0 = 0 and e_last = its key count (the keys
// narrowed to what it sees), s stays then moves by one per row, e moves by one per row then
// stays, and where s moves the piece has no more rows than keys; and a piece followed directly
// by the next is no band with that next row (the cut is greedy: no longer piece was possible).
TEST(Spans, BandMasksAreCutIntoMaximalBands) {
  test::Lcg rnd(2026);
  // Is rows [a, b) × keys [c, d) one band as above? visible(i, j) on indices.
  const auto is_band = [](std::int64_t a, std::int64_t b, std::int64_t c, std::int64_t d,
                          const auto& visible) {
    std::int64_t s_prev = 0, e_prev = 0;
    bool s_moves = false, e_stays = false;
    for (std::int64_t i = a; i < b; ++i) {
      std::int64_t s = -1, e = -1;
      for (std::int64_t j = c; j < d; ++j)
        if (visible(i, j)) {
          if (s < 0) s = j;
          if (e >= 0 && e != j) return false;  // not one contiguous run
          e = j + 1;
        }
      if (s < 0) return false;  // a row without a key
      if (i == a) {
        if (s != c) return false;  // keys narrowed to what the rows see
      } else {
        const std::int64_t ds = s - s_prev, de = e - e_prev;
        if (ds != 0 && ds != 1) return false;
        if (de != 0 && de != 1) return false;
        if (ds == 0 && s_moves) return false;
        if (de == 1 && e_stays) return false;
        s_moves = s_moves || ds == 1;
        e_stays = e_stays || de == 0;
      }
      s_prev = s;
      e_prev = e;
    }
    return e_prev == d && (!s_moves || b - a <= d - c);
  };
  int pieces = 0, multi = 0, whole = 0;
  for (int trial = 0; trial < 1500; ++trial) {
    const std::int64_t S = 8 + rnd(56);
    const Mask mask = trial % 2 == 0
                          ? (rnd(4) == 0 ? Mask::causal_mask()
                                         : Mask::sliding_window(test::random_window(rnd, 16),
                                                                test::random_window(rnd, 16), rnd(2) == 0))
                          : Mask::from_slices({test::random_slice(rnd, S, 16)});
    const ResolvedMask m(mask, S, S);
    ASSERT_TRUE(m.linear_band().has_value());
    const std::vector<std::int64_t> qp = test::random_positions(rnd, S), kp = test::random_positions(rnd, S);
    const auto n_q = static_cast<std::int64_t>(qp.size()), n_kv = static_cast<std::int64_t>(kp.size());
    const auto visible = [&](std::int64_t i, std::int64_t j) {
      return m.visible(qp[static_cast<std::size_t>(i)], kp[static_cast<std::size_t>(j)]);
    };
    std::vector<KernelSpan> spans = forward_spans(m, qp.data(), n_q, kp.data(), n_kv);
    for (const KernelSpan& sp : backward_spans(m, qp.data(), n_q, kp.data(), n_kv)) spans.push_back(sp);
    for (int t = 0; t < 3; ++t) {
      const std::int64_t q0 = rnd(n_q), k0 = rnd(n_kv);
      spans.push_back({q0, q0 + 1 + rnd(n_q - q0), k0, k0 + 1 + rnd(n_kv - k0)});
    }
    for (const KernelSpan& sp : spans) {
      SCOPED_TRACE(mask.describe() + " S " + std::to_string(S) + " span q [" + std::to_string(sp.q0) + ", " +
                   std::to_string(sp.q1) + ") kv [" + std::to_string(sp.k0) + ", " + std::to_string(sp.k1) +
                   ")");
      const std::vector<KernelSpan> cut = shaped_spans(m, qp.data(), kp.data(), {sp});
      // The slow twin: the greedy cut by brute force (each piece from a row that sees a key, as
      // long as is_band holds with the next row and the keys it adds); more than
      // kMaxShapedPieces pieces leave the span whole.
      std::vector<KernelSpan> twin;
      for (std::int64_t i = sp.q0; i < sp.q1;) {
        std::int64_t c = -1, d = -1;
        for (std::int64_t j = sp.k0; j < sp.k1; ++j)
          if (visible(i, j)) {
            if (c < 0) c = j;
            d = j + 1;
          }
        if (c < 0) {
          ++i;
          continue;
        }
        std::int64_t b = i + 1;
        for (; b < sp.q1; ++b) {
          std::int64_t d2 = d;
          for (std::int64_t j = sp.k0; j < sp.k1; ++j)
            if (visible(b, j)) d2 = std::max(d2, j + 1);
          if (!is_band(i, b + 1, c, d2, visible)) break;
          d = d2;
        }
        twin.push_back({i, b, c, d});
        i = b;
      }
      if (twin.size() > kMaxShapedPieces) {
        ASSERT_EQ(cut.size(), 1u);
        EXPECT_TRUE(same(cut[0], sp)) << "a span of " << twin.size() << " pieces is left whole";
        ++whole;
        continue;
      }
      ASSERT_EQ(cut.size(), twin.size());
      for (std::size_t x = 0; x < cut.size(); ++x) EXPECT_TRUE(same(cut[x], twin[x])) << "piece " << x;
      multi += cut.size() > 1;
      std::int64_t done = sp.q0;
      for (std::size_t x = 0; x < cut.size(); ++x) {
        const KernelSpan& pc = cut[x];
        ++pieces;
        ASSERT_LE(done, pc.q0);
        ASSERT_LT(pc.q0, pc.q1);
        ASSERT_LE(pc.q1, sp.q1);
        ASSERT_LE(sp.k0, pc.k0);
        ASSERT_LT(pc.k0, pc.k1);
        ASSERT_LE(pc.k1, sp.k1);
        for (std::int64_t i = done; i < pc.q0; ++i)  // rows left out see no key of the span
          for (std::int64_t j = sp.k0; j < sp.k1; ++j) ASSERT_FALSE(visible(i, j)) << "row " << i;
        for (std::int64_t i = pc.q0; i < pc.q1; ++i)  // the piece holds every key its rows see
          for (std::int64_t j = sp.k0; j < sp.k1; ++j)
            if (visible(i, j)) { ASSERT_TRUE(j >= pc.k0 && j < pc.k1) << "pair " << i << ", " << j; }
        EXPECT_TRUE(is_band(pc.q0, pc.q1, pc.k0, pc.k1, visible)) << "piece " << x;
        if (x + 1 < cut.size() && cut[x + 1].q0 == pc.q1) {  // greedy: the next row does not join it
          std::int64_t d = pc.k1;
          for (std::int64_t j = sp.k0; j < sp.k1; ++j)
            if (visible(pc.q1, j)) d = std::max(d, j + 1);
          EXPECT_FALSE(is_band(pc.q0, pc.q1 + 1, pc.k0, d, visible))
              << "piece " << x << " could take row " << pc.q1;
        }
        done = pc.q1;
      }
      for (std::int64_t i = done; i < sp.q1; ++i)
        for (std::int64_t j = sp.k0; j < sp.k1; ++j) ASSERT_FALSE(visible(i, j)) << "row " << i;
    }
  }
  EXPECT_GT(pieces, 3000);
  EXPECT_GT(multi, 100);  // spans that needed cutting
  EXPECT_GT(whole, 10);   // spans that would have needed too many pieces
}

// A span cut into more than kMaxShapedPieces pieces stays one call: a striped rank's rows
// against the whole sequence (the all-gather strategy's forward on a GPU) would otherwise be a
// call per row (the last key each row sees moves by P); a zigzag rank's are two.
TEST(Spans, StripedRowsAgainstTheSequenceStayOneCall) {
  const std::int64_t S = 96;
  std::vector<std::int64_t> all(static_cast<std::size_t>(S));
  std::iota(all.begin(), all.end(), 0);
  for (const bool window : {false, true}) {
    const ResolvedMask mask(window ? Mask::sliding_window(20, 0, true) : Mask::causal_mask(), S, S);
    for (int P : {2, 4}) {
      std::vector<std::int64_t> st;
      for (std::int64_t i = 1; i < S; i += P) st.push_back(i);
      const auto n = static_cast<std::int64_t>(st.size());
      const std::vector<KernelSpan> spans = forward_spans(mask, st.data(), n, all.data(), S);
      const std::vector<KernelSpan> cut = shaped_spans(mask, st.data(), all.data(), spans);
      ASSERT_EQ(cut.size(), spans.size()) << "P " << P;
      for (std::size_t i = 0; i < cut.size(); ++i) EXPECT_TRUE(same(cut[i], spans[i]));
      const auto zz = zigzag(P, 1, S / (2 * P));
      EXPECT_EQ(
          shaped_spans(mask, zz.data(), all.data(), forward_spans(mask, zz.data(), S / P, all.data(), S))
              .size(),
          2u)
          << "P " << P;
    }
  }
}

}  // namespace
}  // namespace burst::strategies
