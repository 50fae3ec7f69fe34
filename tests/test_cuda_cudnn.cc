// The cuDNN backend of the GPU step kernels (src/device/cuda/attention_cudnn.h).
// CudnnClassify.* run everywhere (no GPU): the host-side decision of which steps cuDNN takes
// (cudnn_mask.h) against a brute-force twin over every (row, key) pair and cuDNN's own
// definition of its band (the frontend's reference: triu / tril of the score matrix), on full,
// causal, window, document and the benchmark masks, and on the blocks of zigzag, striped and
// contiguous layouts.
// CudnnAttention.* need a GPU and burst_cuda built with the frontend (else SKIPPED with the
// reason; the binary exits 77): StepKernel::Cudnn against the fp64 oracle (the fast kernel's
// bounds: cuDNN too rounds P and dS to the operand dtype) and against the reference twin, the
// refused steps on the own kernels, the graph cache, and accumulate into fp32 gradients.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "burst/mask.h"
#include "cuda_attention_harness.h"
#include "cuda_test_util.h"
#include "device/cuda/attention_cuda.h"
#include "device/cuda/attention_cudnn.h"
#include "device/cuda/cuda_memory.h"
#include "device/cuda/cudnn_mask.h"
#include "device/cuda/elementwise.h"
#include "device/out_synth.h"
#include "random_masks.h"
#include "strategies/backward_spans.h"
#include "strategies/views.h"

namespace burst::test {
namespace {

// ---------------------------------------------------------------- the classifier (host)

/// cuDNN's band as its frontend's reference attention defines it (masked: triu(1 + R + off) and
/// tril(off − L) of the S_q × S_kv scores; off = 0 top-left, S_kv − S_q bottom-right): whether
/// key j of row i is kept. Written from that definition, not from the classifier.
bool cudnn_reference_keeps(bool bottom_right, std::int64_t left, std::int64_t right, std::int64_t i,
                           std::int64_t j, std::int64_t S_q, std::int64_t S_kv) {
  const std::int64_t off = bottom_right ? S_kv - S_q : 0;
  if (right >= 0 && j - i >= 1 + right + off) return false;  // triu(diagonal = 1 + R + off)
  if (left > 0 && j - i <= off - left) return false;         // tril(diagonal = off − L)
  return true;
}

/// The twin: every (row, key) pair through ResolvedMask::visible; every row must see a key;
/// then the first of Full, causal top-left, causal bottom-right, a top-left band, a
/// bottom-right band (the bounds tried: none, and every value some row's first or last visible
/// key implies) under which cuDNN keeps exactly the visible pairs.
cuda::CudnnMaskVerdict brute_classify(const std::vector<std::int64_t>& qp,
                                      const std::vector<std::int64_t>& kp, const ResolvedMask& mask) {
  const auto S_q = static_cast<std::int64_t>(qp.size()), S_kv = static_cast<std::int64_t>(kp.size());
  std::vector<std::vector<char>> vis(static_cast<std::size_t>(S_q),
                                     std::vector<char>(static_cast<std::size_t>(S_kv)));
  std::vector<std::int64_t> first(static_cast<std::size_t>(S_q), -1), last(static_cast<std::size_t>(S_q), -1);
  for (std::int64_t i = 0; i < S_q; ++i) {
    for (std::int64_t j = 0; j < S_kv; ++j) {
      const bool v = mask.visible(qp[static_cast<std::size_t>(i)], kp[static_cast<std::size_t>(j)]);
      vis[static_cast<std::size_t>(i)][static_cast<std::size_t>(j)] = v;
      if (v && first[static_cast<std::size_t>(i)] < 0) first[static_cast<std::size_t>(i)] = j;
      if (v) last[static_cast<std::size_t>(i)] = j;
    }
    if (first[static_cast<std::size_t>(i)] < 0) return {};
  }
  const auto matches = [&](bool br, std::int64_t left, std::int64_t right) {
    for (std::int64_t i = 0; i < S_q; ++i)
      for (std::int64_t j = 0; j < S_kv; ++j)
        if ((vis[static_cast<std::size_t>(i)][static_cast<std::size_t>(j)] != 0) !=
            cudnn_reference_keeps(br, left, right, i, j, S_q, S_kv))
          return false;
    return true;
  };
  if (matches(false, 0, -1)) return cuda::CudnnMask::Full;
  if (matches(false, 0, 0)) return cuda::CudnnMask::CausalTopLeft;
  if (S_kv >= S_q && matches(true, 0, 0)) return cuda::CudnnMask::CausalBottomRight;
  for (const bool br : {false, true}) {
    const std::int64_t off = br ? S_kv - S_q : 0;
    if (br && off < 0) continue;
    std::vector<std::int64_t> lefts{0}, rights{-1};
    for (std::int64_t i = 0; i < S_q; ++i) {
      const std::int64_t l = off - (first[static_cast<std::size_t>(i)] - i) + 1,
                         r = last[static_cast<std::size_t>(i)] - i - off;
      if (l >= 1 && std::find(lefts.begin(), lefts.end(), l) == lefts.end()) lefts.push_back(l);
      if (r >= 0 && std::find(rights.begin(), rights.end(), r) == rights.end()) rights.push_back(r);
    }
    for (const std::int64_t l : lefts)
      for (const std::int64_t r : rights)
        if (matches(br, l, r)) {
          if (l > 0 && S_q > S_kv) return {};  // cuDNN takes no left bound there
          return {br ? cuda::CudnnMask::BandBottomRight : cuda::CudnnMask::BandTopLeft, "", l, r};
        }
  }
  return {};
}

/// classify_for_cudnn, held to the twin (kind and bounds) and to its own why_not.
cuda::CudnnMaskVerdict classify_verdict(const std::vector<std::int64_t>& qp,
                                        const std::vector<std::int64_t>& kp, const ResolvedMask& mask) {
  const cuda::CudnnMaskVerdict v = cuda::classify_for_cudnn(
      qp.data(), static_cast<std::int64_t>(qp.size()), kp.data(), static_cast<std::int64_t>(kp.size()),
      mask.slices().data(), static_cast<std::int64_t>(mask.slices().size()));
  EXPECT_EQ(v.mask == cuda::CudnnMask::None, !v.why_not.empty()) << v.why_not;
  const cuda::CudnnMaskVerdict twin = brute_classify(qp, kp, mask);
  EXPECT_EQ(v.mask, twin.mask) << "the twin disagrees: " << v.describe() << " against " << twin.describe()
                               << "; " << v.why_not;
  if (v.band()) {
    EXPECT_EQ(v.left, twin.left) << v.describe() << " against " << twin.describe();
    EXPECT_EQ(v.right, twin.right) << v.describe() << " against " << twin.describe();
  }
  return v;
}

cuda::CudnnMask classify(const std::vector<std::int64_t>& qp, const std::vector<std::int64_t>& kp,
                         const ResolvedMask& mask) {
  return classify_verdict(qp, kp, mask).mask;
}

std::vector<std::int64_t> range(std::int64_t begin, std::int64_t end) {
  std::vector<std::int64_t> p;
  for (std::int64_t i = begin; i < end; ++i) p.push_back(i);
  return p;
}

/// Rank r of P under zigzag: chunks r and 2P − 1 − r of 2P chunks of S / (2P).
std::vector<std::int64_t> zigzag(std::int64_t S, int P, int r) {
  const std::int64_t c = S / (2 * P);
  std::vector<std::int64_t> p = range(r * c, (r + 1) * c), hi = range((2 * P - 1 - r) * c, (2 * P - r) * c);
  p.insert(p.end(), hi.begin(), hi.end());
  return p;
}

/// Every span is one of cuDNN's shapes under mask (classify: the classifier and its twin agree
/// on it): rows qp[q0, q1) against keys kp[k0, k1). where names the case in failure messages.
void expect_cudnn_shapes(const std::vector<strategies::KernelSpan>& spans,
                         const std::vector<std::int64_t>& qp, const std::vector<std::int64_t>& kp,
                         const ResolvedMask& mask, const std::string& where) {
  for (const strategies::KernelSpan& sp : spans) {
    SCOPED_TRACE(where + " span q [" + std::to_string(sp.q0) + ", " + std::to_string(sp.q1) + ") kv [" +
                 std::to_string(sp.k0) + ", " + std::to_string(sp.k1) + ")");
    const std::vector<std::int64_t> q(qp.begin() + sp.q0, qp.begin() + sp.q1),
        k(kp.begin() + sp.k0, kp.begin() + sp.k1);
    EXPECT_NE(classify(q, k, mask), cuda::CudnnMask::None);
  }
}

/// Rank r of P under striping: positions r, r + P, r + 2P, ...
std::vector<std::int64_t> striped(std::int64_t S, int P, int r) {
  std::vector<std::int64_t> p;
  for (std::int64_t i = r; i < S; i += P) p.push_back(i);
  return p;
}

TEST(CudnnClassify, FullCausalAndTheirAlignments) {
  const ResolvedMask full(Mask::full(), 64, 64), causal(Mask::causal_mask(), 64, 64);
  EXPECT_EQ(classify(range(0, 64), range(0, 64), full), cuda::CudnnMask::Full);
  EXPECT_EQ(classify(range(0, 64), range(0, 64), causal), cuda::CudnnMask::CausalTopLeft);
  // Later queries over earlier keys: all visible.
  EXPECT_EQ(classify(range(32, 64), range(0, 32), causal), cuda::CudnnMask::Full);
  // The last 24 rows over all 64 keys: the diagonal at the bottom-right.
  EXPECT_EQ(classify(range(40, 64), range(0, 64), causal), cuda::CudnnMask::CausalBottomRight);
  // The first 24 rows over all keys: top-left (S_q < S_kv), and all rows over the first 24 keys.
  EXPECT_EQ(classify(range(0, 24), range(0, 64), causal), cuda::CudnnMask::CausalTopLeft);
  EXPECT_EQ(classify(range(0, 64), range(0, 24), causal), cuda::CudnnMask::CausalTopLeft);
  // Earlier queries over later keys: no row sees a key.
  EXPECT_EQ(classify(range(0, 32), range(32, 64), causal), cuda::CudnnMask::None);
  // Gaps in the positions that the diagonal does not cross: still the diagonal.
  EXPECT_EQ(classify({0, 5, 9, 20}, {0, 5, 9, 20}, causal), cuda::CudnnMask::CausalTopLeft);
  // Keys between the queries: row 0 (position 1) sees keys 0 and 1 of positions 0, 1, 2, 3.
  EXPECT_EQ(classify({1, 3}, {0, 1, 2, 3}, causal), cuda::CudnnMask::None);
}

// The verdict cache: keyed by contents (copies at other addresses hit, a changed array misses),
// the same verdicts as the scan, the oldest entry dropped past kMaxEntries; planted, every
// verdict but None comes back wrong.
TEST(CudnnClassify, TheVerdictCacheIsKeyedByContents) {
  const ResolvedMask causal(Mask::causal_mask(), 64, 64);
  const MaskSlice* sl = causal.slices().data();
  const auto n = static_cast<std::int64_t>(causal.slices().size());
  cuda::CudnnMaskCache cache;
  const std::vector<std::int64_t> a = range(0, 64), b = range(32, 64), c = range(0, 32);
  EXPECT_EQ(cache.classify(a.data(), 64, a.data(), 64, sl, n).mask, cuda::CudnnMask::CausalTopLeft);
  EXPECT_EQ(cache.scans(), 1);
  const std::vector<std::int64_t> a2 = a;  // same contents, another address
  EXPECT_EQ(cache.classify(a2.data(), 64, a2.data(), 64, sl, n).mask, cuda::CudnnMask::CausalTopLeft);
  EXPECT_EQ(cache.scans(), 1);
  EXPECT_EQ(cache.classify(b.data(), 32, c.data(), 32, sl, n).mask, cuda::CudnnMask::Full);
  EXPECT_EQ(cache.scans(), 2);
  std::vector<std::int64_t> changed = a;  // one position moved: a new key
  changed[63] = 70;
  EXPECT_EQ(cache.classify(changed.data(), 64, a.data(), 64, sl, n).mask,
            cuda::classify_for_cudnn(changed.data(), 64, a.data(), 64, sl, n).mask);
  EXPECT_EQ(cache.scans(), 3);
  for (std::int64_t i = 0; i < static_cast<std::int64_t>(cuda::CudnnMaskCache::kMaxEntries); ++i) {
    const std::vector<std::int64_t> q = range(i, i + 1);
    cache.classify(q.data(), 1, a.data(), 64, sl, n);
  }
  const std::int64_t scans = cache.scans();
  cache.classify(a.data(), 64, a.data(), 64, sl, n);  // dropped by now: scanned again
  EXPECT_EQ(cache.scans(), scans + 1);
  const ResolvedMask window(Mask::sliding_window(10, 0, true), 64, 64);
  const MaskSlice* wsl = window.slices().data();
  const auto wn = static_cast<std::int64_t>(window.slices().size());
  const cuda::CudnnMaskVerdict band = cache.classify(a.data(), 64, a.data(), 64, wsl, wn);
  EXPECT_EQ(band.describe(), "band top-left left 11 right 0");
  const ResolvedMask two_sided(Mask::sliding_window(-1, 3), 64, 64);
  const MaskSlice* tsl = two_sided.slices().data();
  const auto tn = static_cast<std::int64_t>(two_sided.slices().size());
  EXPECT_EQ(cache.classify(a.data(), 64, a.data(), 64, tsl, tn).describe(), "band top-left right 3");
  cache.plant_wrong_verdicts(true);
  EXPECT_EQ(cache.classify(a.data(), 64, a.data(), 64, sl, n).mask, cuda::CudnnMask::Full);
  EXPECT_EQ(cache.classify(b.data(), 32, c.data(), 32, sl, n).mask, cuda::CudnnMask::CausalTopLeft);
  EXPECT_EQ(cache.classify(c.data(), 32, b.data(), 32, sl, n).mask, cuda::CudnnMask::None);
  EXPECT_EQ(cache.classify(a.data(), 64, a.data(), 64, wsl, wn).describe(), "band top-left left 12 right 0");
  EXPECT_EQ(cache.classify(a.data(), 64, a.data(), 64, tsl, tn).describe(), "band top-left right 4");
}

TEST(CudnnClassify, WindowsDocumentsAndBenchmarkMasksAgreeWithTheTwin) {
  const std::int64_t S = 96;
  const ResolvedMask window(Mask::sliding_window(10, 0, true), S, S);
  EXPECT_EQ(classify(range(0, S), range(0, S), window), cuda::CudnnMask::BandTopLeft);
  // A window wider than the step: causal within it.
  const ResolvedMask wide(Mask::sliding_window(200, 0, true), S, S);
  EXPECT_EQ(classify(range(0, S), range(0, S), wide), cuda::CudnnMask::CausalTopLeft);
  BenchmarkMaskConfig cfg;
  cfg.seed = 3;
  cfg.num_documents = 3;
  cfg.block = 16;
  cfg.window = 12;
  for (MaskType t : all_mask_types()) {
    SCOPED_TRACE(to_string(t));
    const ResolvedMask m(make_benchmark_mask(t, S, cfg), S, S);
    for (std::int64_t q0 : {0, 32, 64})
      for (std::int64_t k0 : {0, 32, 64}) classify(range(q0, q0 + 32), range(k0, k0 + 32), m);
    classify(range(0, S), range(0, S), m);
  }
}

// Sliding windows (flash_attn's window_size (w_l, w_r): L = w_l + 1, R = w_r) and the blocks of
// them a contiguous ring sees: bands where every row keeps a key, with the bounds named here;
// the twin agrees on every block, the ones refused included.
TEST(CudnnClassify, WindowsAreBandsWhereEveryRowSeesAKey) {
  const std::int64_t S = 128;
  const ResolvedMask causal_w(Mask::sliding_window(20, 0, true), S, S),
      two_sided(Mask::sliding_window(20, 10), S, S), wide(Mask::sliding_window(40, 0, true), S, S);
  EXPECT_EQ(classify_verdict(range(0, S), range(0, S), causal_w).describe(), "band top-left left 21 right 0");
  EXPECT_EQ(classify_verdict(range(0, S), range(0, S), two_sided).describe(),
            "band top-left left 21 right 10");
  // The last 96 rows over all keys: the window's diagonal at the bottom-right.
  EXPECT_EQ(classify_verdict(range(32, S), range(0, S), causal_w).describe(),
            "band bottom-right left 21 right 0");
  // A window wider than a block: the block before the diagonal is a band of its left bound alone.
  EXPECT_EQ(classify_verdict(range(64, 96), range(32, 64), wide).describe(), "band top-left left 9");
  // Narrower than a block: rows there see no key of the block before (refused).
  EXPECT_EQ(classify(range(64, 96), range(32, 64), causal_w), cuda::CudnnMask::None);
  // More rows than keys under a left bound: refused (cuDNN does not take it), the twin agreeing.
  EXPECT_EQ(classify(range(0, 64), range(0, 32), two_sided), cuda::CudnnMask::None);
  for (const ResolvedMask* m : {&causal_w, &two_sided, &wide})
    for (int P : {2, 4})
      for (int r = 0; r < P; ++r)
        for (int s = 0; s < P; ++s)
          classify(range(r * S / P, (r + 1) * S / P), range(s * S / P, (s + 1) * S / P), *m);
}

// The blocks a zigzag or striped ring step sees under a causal mask: the twin decides each, and
// the ones named here are the shapes the layouts are known for.
TEST(CudnnClassify, ZigzagAndStripedBlocks) {
  const std::int64_t S = 128;
  const ResolvedMask causal(Mask::causal_mask(), S, S);
  for (int P : {2, 4}) {
    for (int r = 0; r < P; ++r) {
      for (int s = 0; s < P; ++s) {
        SCOPED_TRACE("P " + std::to_string(P) + " q rank " + std::to_string(r) + " kv rank " +
                     std::to_string(s));
        const cuda::CudnnMask z = classify(zigzag(S, P, r), zigzag(S, P, s), causal);
        // The diagonal block: both halves causal, the later half over all of the earlier one.
        // Other blocks: r < s, the rank's first chunk sees no key; r > s, every row sees the
        // other rank's first chunk and none of its last: half the keys, neither shape.
        EXPECT_EQ(z, r == s ? cuda::CudnnMask::CausalTopLeft : cuda::CudnnMask::None);
        const cuda::CudnnMask st = classify(striped(S, P, r), striped(S, P, s), causal);
        // Striped: key j ≤ row i when s ≤ r (top-left); j < i when s > r (row 0 sees none).
        EXPECT_EQ(st, s <= r ? cuda::CudnnMask::CausalTopLeft : cuda::CudnnMask::None);
      }
    }
  }
}

// The ring family's backward cuts a step into key-chunk spans, and on a GPU its forward into
// query-chunk spans (strategies/backward_spans.h); on zigzag blocks under a causal mask every
// span is one of cuDNN's shapes, the blocks between ranks included (whole, they are not: above).
// So the zigzag ring runs on cuDNN at every step, both passes.
TEST(CudnnClassify, ZigzagRingSpansAreCudnnShapes) {
  const std::int64_t S = 128;
  const ResolvedMask causal(Mask::causal_mask(), S, S);
  for (int P : {2, 3, 4}) {
    for (int r = 0; r < P; ++r) {
      for (int s = 0; s < P; ++s) {
        const std::vector<std::int64_t> qp = zigzag(S, P, r), kp = zigzag(S, P, s);
        const auto n_q = static_cast<std::int64_t>(qp.size()), n_kv = static_cast<std::int64_t>(kp.size());
        std::vector<strategies::KernelSpan> spans =
            strategies::backward_spans(causal, qp.data(), n_q, kp.data(), n_kv);
        EXPECT_FALSE(spans.empty());
        for (const strategies::KernelSpan& sp :
             strategies::forward_spans(causal, qp.data(), n_q, kp.data(), n_kv))
          spans.push_back(sp);
        expect_cudnn_shapes(
            spans, qp, kp, causal,
            "P " + std::to_string(P) + " q rank " + std::to_string(r) + " kv rank " + std::to_string(s));
      }
    }
  }
}

// A striped block (rows r, r + P, ...; keys s, s + P, ...) is causal top-left when s ≤ r, and when
// s > r its row 0 sees no key (ZigzagAndStripedBlocks); as a GPU's ring cuts it (shaped_spans,
// both passes) that row is dropped and the rest is causal top-left: every striped step, causal
// or a window of at least P tokens, runs on cuDNN.
TEST(CudnnClassify, StripedRingSpansAreCudnnShapes) {
  const std::int64_t S = 96;
  for (const bool window : {false, true})
    for (int P : {2, 3, 4}) {
      const ResolvedMask mask(window ? Mask::sliding_window(4 * P, 0, true) : Mask::causal_mask(), S, S);
      for (int r = 0; r < P; ++r)
        for (int s = 0; s < P; ++s) {
          const std::vector<std::int64_t> qp = striped(S, P, r), kp = striped(S, P, s);
          const auto n = static_cast<std::int64_t>(qp.size());
          std::vector<strategies::KernelSpan> spans = strategies::shaped_spans(
              mask, qp.data(), kp.data(), strategies::backward_spans(mask, qp.data(), n, kp.data(), n));
          for (const strategies::KernelSpan& sp : strategies::shaped_spans(
                   mask, qp.data(), kp.data(), strategies::forward_spans(mask, qp.data(), n, kp.data(), n)))
            spans.push_back(sp);
          EXPECT_FALSE(spans.empty());
          expect_cudnn_shapes(spans, qp, kp, mask,
                              std::string(window ? "window " : "causal ") + "P " + std::to_string(P) +
                                  " q rank " + std::to_string(r) + " kv rank " + std::to_string(s));
        }
    }
}

// Under sliding windows (causal and two-sided) every span of a contiguous or zigzag ring's
// steps, both passes, as a GPU cuts them (shaped_spans: under a mask of one band, each span's
// rows cut into the longest pieces that are bands over the keys they see), is a band cuDNN
// takes, the blocks before the diagonal included (the twin agreeing on each).
TEST(CudnnClassify, WindowedRingSpansAreBands) {
  const std::int64_t S = 96;
  for (const std::int64_t w : {3, 10, 20, 40})
    for (const bool two_sided : {false, true}) {
      const ResolvedMask mask(two_sided ? Mask::sliding_window(w, w / 2) : Mask::sliding_window(w, 0, true),
                              S, S);
      for (int P : {2, 3, 4})
        for (const bool zz : {false, true})
          for (int r = 0; r < P; ++r)
            for (int s = 0; s < P; ++s) {
              const std::int64_t n = S / P;
              const std::vector<std::int64_t> qp = zz ? zigzag(S, P, r) : range(r * n, (r + 1) * n),
                                              kp = zz ? zigzag(S, P, s) : range(s * n, (s + 1) * n);
              // As a GPU's ring cuts them (shaped_spans); the backward's spans first.
              std::vector<strategies::KernelSpan> spans = strategies::shaped_spans(
                  mask, qp.data(), kp.data(), strategies::backward_spans(mask, qp.data(), n, kp.data(), n));
              const std::size_t n_backward = spans.size();
              for (const strategies::KernelSpan& sp :
                   strategies::shaped_spans(mask, qp.data(), kp.data(),
                                            strategies::forward_spans(mask, qp.data(), n, kp.data(), n)))
                spans.push_back(sp);
              for (std::size_t i = 0; i < spans.size(); ++i) {
                const strategies::KernelSpan& sp = spans[i];
                SCOPED_TRACE("window " + std::to_string(w) + (two_sided ? " two-sided" : " causal") + " P " +
                             std::to_string(P) + (zz ? " zigzag" : " contiguous") + " blocks " +
                             std::to_string(r) + ", " + std::to_string(s) +
                             (i < n_backward ? " backward" : " forward") + " span q [" +
                             std::to_string(sp.q0) + ", " + std::to_string(sp.q1) + ") kv [" +
                             std::to_string(sp.k0) + ", " + std::to_string(sp.k1) + ")");
                const std::vector<std::int64_t> q(qp.begin() + sp.q0, qp.begin() + sp.q1),
                    k(kp.begin() + sp.k0, kp.begin() + sp.k1);
                const cuda::CudnnMask m = classify(q, k, mask);
                EXPECT_NE(m, cuda::CudnnMask::None);
              }
            }
    }
}

// usp's ring runs between Ulysses groups (the sorted positions of u consecutive zigzag ranks);
// on a GPU both passes' blocks are cut by shaped_spans (the backward from the whole block), and
// every piece is a band cuDNN takes, causal or windowed, P = 4 and 8 with u = 2 and 4.
TEST(CudnnClassify, UspGroupBlockSpansAreBands) {
  const std::int64_t S = 192;
  for (const bool window : {false, true}) {
    const ResolvedMask mask(window ? Mask::sliding_window(30, 0, true) : Mask::causal_mask(), S, S);
    for (const auto& [P, u] : {std::pair{4, 2}, std::pair{8, 2}, std::pair{8, 4}}) {
      std::vector<std::vector<std::int64_t>> groups;
      for (int g = 0; g < P / u; ++g) {
        std::vector<std::int64_t> all;
        for (int m = 0; m < u; ++m) {
          const std::vector<std::int64_t> z = zigzag(S, P, g * u + m);
          all.insert(all.end(), z.begin(), z.end());
        }
        std::sort(all.begin(), all.end());
        groups.push_back(all);
      }
      for (const auto& qp : groups)
        for (const auto& kp : groups) {
          const auto n_q = static_cast<std::int64_t>(qp.size()), n_kv = static_cast<std::int64_t>(kp.size());
          std::vector<strategies::KernelSpan> spans = strategies::shaped_spans(
              mask, qp.data(), kp.data(), strategies::forward_spans(mask, qp.data(), n_q, kp.data(), n_kv));
          for (const strategies::KernelSpan& sp :
               strategies::shaped_spans(mask, qp.data(), kp.data(), {{0, n_q, 0, n_kv}}))
            spans.push_back(sp);
          expect_cudnn_shapes(spans, qp, kp, mask,
                              std::string(window ? "window" : "causal") + " P " + std::to_string(P) + " u " +
                                  std::to_string(u) + " q from " + std::to_string(qp.front()) + " kv from " +
                                  std::to_string(kp.front()));
        }
    }
  }
}

// The all-gather strategy's calls on a GPU: a zigzag rank's rows against the whole gathered
// sequence (forward) and against each rank's block (backward, from the whole block), cut by
// shaped_spans; every piece is a band cuDNN takes, causal or windowed, P = 2..4.
TEST(CudnnClassify, AllGatherSpansAreBands) {
  const std::int64_t S = 96;
  const std::vector<std::int64_t> all = range(0, S);
  for (const bool window : {false, true}) {
    const ResolvedMask mask(window ? Mask::sliding_window(20, 0, true) : Mask::causal_mask(), S, S);
    for (int P : {2, 3, 4})
      for (int r = 0; r < P; ++r) {
        const std::vector<std::int64_t> qp = zigzag(S, P, r);
        const auto n = static_cast<std::int64_t>(qp.size());
        const std::string where = std::string(window ? "window" : "causal") + " P " + std::to_string(P) +
                                  " rank " + std::to_string(r);
        expect_cudnn_shapes(
            strategies::shaped_spans(mask, qp.data(), all.data(),
                                     strategies::forward_spans(mask, qp.data(), n, all.data(), S)),
            qp, all, mask, where + " forward");
        for (int s = 0; s < P; ++s) {
          const std::vector<std::int64_t> kp = zigzag(S, P, s);
          expect_cudnn_shapes(strategies::shaped_spans(mask, qp.data(), kp.data(), {{0, n, 0, n}}), qp, kp,
                              mask, where + " backward, keys of rank " + std::to_string(s));
        }
      }
  }
}

// Every piece a GPU's cut makes under a mask of one band (random windows, causal, all keys,
// single slices of every kind) is a band the classifier (and its twin) takes, on contiguous,
// zigzag and striped blocks and on any increasing positions; a span left whole (it would take
// more than kMaxShapedPieces pieces, Spans.BandMasksAreCutIntoMaximalBands) is not counted.
TEST(CudnnClassify, ShapedSpansOfBandMasksAreBands) {
  test::Lcg rnd(99);
  std::int64_t pieces = 0, whole = 0;
  for (int trial = 0; trial < 500; ++trial) {
    const std::int64_t S = 12 + rnd(60);
    const Mask mask = trial % 3 == 0 ? Mask::from_slices({test::random_slice(rnd, S, 20)})
                                     : Mask::sliding_window(test::random_window(rnd, 20),
                                                            test::random_window(rnd, 20), rnd(2) == 0);
    const ResolvedMask m(mask, S, S);
    test::PositionKind q_kind, k_kind;
    const std::vector<std::int64_t> qp = test::random_positions(rnd, S, &q_kind),
                                    kp = test::random_positions(rnd, S, &k_kind);
    const auto regular = [](test::PositionKind k) {
      return k == test::PositionKind::Contiguous || k == test::PositionKind::Zigzag;
    };
    const auto n_q = static_cast<std::int64_t>(qp.size()), n_kv = static_cast<std::int64_t>(kp.size());
    std::vector<strategies::KernelSpan> spans = strategies::forward_spans(m, qp.data(), n_q, kp.data(), n_kv);
    for (const strategies::KernelSpan& sp : strategies::backward_spans(m, qp.data(), n_q, kp.data(), n_kv))
      spans.push_back(sp);
    for (const strategies::KernelSpan& span : spans) {
      // Each span as a GPU cuts it: pieces that are bands, or, where it would take more than
      // kMaxShapedPieces of them, the span whole (for the own kernels).
      const std::vector<strategies::KernelSpan> cut =
          strategies::shaped_spans(m, qp.data(), kp.data(), {span});
      if (cut.size() == 1 && cut[0].q0 == span.q0 && cut[0].q1 == span.q1 && cut[0].k0 == span.k0 &&
          cut[0].k1 == span.k1 &&
          cuda::classify_for_cudnn(qp.data() + span.q0, span.q1 - span.q0, kp.data() + span.k0,
                                   span.k1 - span.k0, m.slices().data(),
                                   static_cast<std::int64_t>(m.slices().size()))
                  .mask == cuda::CudnnMask::None) {
        ++whole;
        EXPECT_FALSE(regular(q_kind) && regular(k_kind)) << "a contiguous or zigzag span left whole";
        continue;
      }
      expect_cudnn_shapes(cut, qp, kp, m, mask.describe() + " S " + std::to_string(S));
      pieces += static_cast<std::int64_t>(cut.size());
    }
  }
  EXPECT_GT(pieces, 1000);
  EXPECT_GT(whole, 0);  // striped or arbitrary positions that would fragment
}

// Which lse rows cuDNN gets directly (else a packed copy): only those whose declared strides
// the frontend takes as a packed [B,H,S_q,1] Stats, sizes of 1 included. A head half of a B = 1
// lse and a span of a one-head lse are packed in memory order but not by the strides the
// frontend compares (its backward refuses them before cuDNN 9.26: every half of a refused
// B = 1 step would then be refused too).
TEST(CudnnClassify, StatsArePackedOnlyWithTheFrontendsStrides) {
  std::vector<float> mem(2 * 8 * 16);
  const TensorView whole = make_view(mem.data(), {2, 8, 16}), one = make_view(mem.data(), {1, 8, 16}),
                   head = make_view(mem.data(), {1, 1, 16});
  EXPECT_TRUE(cuda::cudnn_stats_packed(whole));
  EXPECT_TRUE(cuda::cudnn_stats_packed(one));
  EXPECT_TRUE(cuda::cudnn_stats_packed(head));
  EXPECT_TRUE(cuda::cudnn_stats_packed(strategies::narrow(whole, 0, 1, 2)));  // one batch: (128, 16, 1)
  EXPECT_FALSE(cuda::cudnn_stats_packed(strategies::narrow(one, 1, 4, 8)));   // (128, 16, 1) for [1,4,16]
  EXPECT_FALSE(cuda::cudnn_stats_packed(strategies::narrow(one, 1, 3, 4)));   // one head of eight
  EXPECT_FALSE(cuda::cudnn_stats_packed(strategies::narrow(whole, 1, 0, 4)));
  EXPECT_FALSE(cuda::cudnn_stats_packed(strategies::narrow(head, 2, 4, 12)));  // (16, 16, 1) for [1,1,8]
  EXPECT_FALSE(cuda::cudnn_stats_packed(strategies::narrow(whole, 2, 0, 8)));
  EXPECT_FALSE(cuda::cudnn_stats_packed(make_view(mem.data(), {2, 8, 16, 1})));  // not rows
}

// cuDNN's SM90 backward before 9.26 is refused where S_kv = 64 (mod 128) (cudnn_backward_defect),
// and only there: other lengths, other GPUs and later libraries keep it.
TEST(CudnnClassify, TheSm90BackwardDefectIsRefusedWhereItApplies) {
  for (const std::int64_t S_kv : {64, 192, 1088, 131136})
    EXPECT_FALSE(cuda::cudnn_backward_defect(9, 91900, S_kv).empty()) << S_kv;
  for (const std::int64_t S_kv : {1, 63, 65, 128, 150, 256, 1024, 32768})
    EXPECT_TRUE(cuda::cudnn_backward_defect(9, 91900, S_kv).empty()) << S_kv;
  EXPECT_FALSE(cuda::cudnn_backward_defect(9, 92599, 192).empty());
  EXPECT_TRUE(cuda::cudnn_backward_defect(9, 92600, 192).empty());
  EXPECT_TRUE(cuda::cudnn_backward_defect(8, 91900, 192).empty());
  EXPECT_TRUE(cuda::cudnn_backward_defect(10, 91900, 192).empty());
}

// ---------------------------------------------------------------- on the GPU

class CudnnAttention : public OnCudaDevice {
 protected:
  void SetUp() override {
    OnCudaDevice::SetUp();
    if (IsSkipped()) return;
    if (!cuda::cudnn_compiled()) GTEST_SKIP() << "burst_cuda built without the cuDNN frontend headers";
    state_ = std::make_unique<cuda::CudnnState>(0);
  }
  std::unique_ptr<cuda::CudnnState> state_;
};

/// Cudnn on case c: cuDNN must take it (both steps), meet the oracle's bounds of the fast kernel
/// and agree with the twin (lse within the two fp32-rule tolerances).
void check_cudnn(const GpuCase& c, cuda::CudnnState& state) {
  SCOPED_TRACE(c.name);
  const GpuInputs in = inputs_of(c);
  const GpuResults twin = run_case(c, in, cuda::StepKernel::Reference);
  const double tol_twin = check_case(c, in, twin, false);
  const std::int64_t before = state.executed();
  const GpuResults got = run_case(c, in, cuda::StepKernel::Cudnn, &state);
  EXPECT_EQ(state.executed(), before + 2) << "cuDNN did not run both steps (refused the graph?)";
  const double tol = check_case(c, in, got, true);
  for (std::int64_t i = 0; i < twin.lse.numel(); ++i)
    ASSERT_LE(std::fabs(got.lse.data()[i] - twin.lse.data()[i]), tol_twin + tol) << "lse[" << i << "]";
}

TEST_F(CudnnAttention, FullAndCausalMatchTheOracleAndTheTwin) {
  for (DType dt : {DType::BF16, DType::F16}) {
    check_cudnn(gpu_case("full", 2, 2, 200, 200, 64, Mask::full(), dt), *state_);
    check_cudnn(gpu_case("causal", 2, 2, 200, 200, 64, Mask::causal_mask(), dt), *state_);
    check_cudnn(gpu_case("causal D128 GQA 4:1", 4, 1, 130, 130, 128, Mask::causal_mask(), dt), *state_);
  }
  check_cudnn(gpu_case("full cross lengths", 2, 1, 96, 160, 64, Mask::full()), *state_);
  GpuCase sdpa = gpu_case("causal, [B,H,S,D] memory", 4, 2, 128, 128, 64, Mask::causal_mask());
  sdpa.B = 2;
  sdpa.sdpa_layout = true;
  check_cudnn(sdpa, *state_);
}

TEST_F(CudnnAttention, CausalBlocksOfOtherLengthsAndLayouts) {
  GpuCase br =
      gpu_case("causal bottom-right: the last 96 rows of 160", 2, 1, 96, 160, 64, Mask::causal_mask());
  br.q_pos = range(64, 160);
  check_cudnn(br, *state_);
  GpuCase tl =
      gpu_case("causal top-left: the first 96 rows over 160 keys", 2, 1, 96, 160, 64, Mask::causal_mask());
  tl.seq_q_global = tl.seq_kv_global = 160;
  check_cudnn(tl, *state_);
  GpuCase zz = gpu_case("zigzag rank 0 of 2, its own block", 2, 2, 128, 128, 128, Mask::causal_mask());
  zz.q_pos = zz.kv_pos = zigzag(256, 2, 0);
  check_cudnn(zz, *state_);
}

// Sliding windows on cuDNN's diagonal band (cudnn_mask.h): causal and two-sided windows, the
// window's diagonal at the bottom-right (keys 0..43 seen by no row: their dK, dV are zero), GQA at
// D 128, and the block before a ring step's diagonal (a left bound alone). cuDNN runs both steps
// of each and meets the oracle's bounds, as on full and causal steps.
TEST_F(CudnnAttention, SlidingWindowsRunOnCudnnBands) {
  for (DType dt : {DType::BF16, DType::F16}) {
    check_cudnn(gpu_case("causal window 30", 2, 2, 150, 150, 64, Mask::sliding_window(30, 0, true), dt),
                *state_);
    check_cudnn(gpu_case("window (20, 10)", 4, 2, 150, 150, 64, Mask::sliding_window(20, 10), dt), *state_);
  }
  GpuCase br = gpu_case("causal window 20, the last 96 rows of 160", 2, 1, 96, 160, 64,
                        Mask::sliding_window(20, 0, true));
  br.q_pos = range(64, 160);
  check_cudnn(br, *state_);
  check_cudnn(
      gpu_case("causal window 16, D128 GQA 4:1", 4, 1, 130, 130, 128, Mask::sliding_window(16, 0, true)),
      *state_);
  GpuCase before = gpu_case("window 40, the block before the diagonal", 2, 2, 32, 32, 64,
                            Mask::sliding_window(40, 0, true));
  before.q_pos = range(64, 96);
  before.kv_pos = range(32, 64);
  before.seq_q_global = before.seq_kv_global = 128;
  check_cudnn(before, *state_);
}

// The planted wrong band (a left bound one key wider: CudnnMaskCache::plant_wrong_verdicts)
// runs on cuDNN and moves lse and out far beyond what the unplanted run differs from the twin
// by: the window tests above would catch a band read off by one.
TEST_F(CudnnAttention, APlantedWrongBandIsCaught) {
  const GpuCase c =
      gpu_case("causal window 30, planted", 2, 2, 150, 150, 64, Mask::sliding_window(30, 0, true));
  const GpuInputs in = inputs_of(c);
  const GpuResults twin = run_case(c, in, cuda::StepKernel::Reference);
  const GpuResults good = run_case(c, in, cuda::StepKernel::Cudnn, state_.get());
  state_->masks().plant_wrong_verdicts(true);
  const std::int64_t before = state_->executed();
  const GpuResults planted = run_case(c, in, cuda::StepKernel::Cudnn, state_.get());
  state_->masks().plant_wrong_verdicts(false);
  EXPECT_EQ(state_->executed(), before + 2) << "cuDNN did not run the planted band";
  const double good_lse = max_abs_diff(good.lse, twin.lse), bad_lse = max_abs_diff(planted.lse, twin.lse);
  const double good_out = max_abs_diff(good.out.wide, twin.out.wide),
               bad_out = max_abs_diff(planted.out.wide, twin.out.wide);
  EXPECT_GT(bad_lse, 8 * good_lse + 1e-3) << "lse: planted " << bad_lse << ", unplanted " << good_lse;
  EXPECT_GT(bad_out, 4 * good_out) << "out: planted " << bad_out << ", unplanted " << good_out;
}

// Steps cuDNN does not take run on the own kernels: same results as Fast, nothing executed.
TEST_F(CudnnAttention, RefusedStepsRunOnTheOwnKernels) {
  const GpuCase cases[] = {gpu_case("documents", 2, 1, 150, 150, 64, Mask::document({0, 50, 150}, true)),
                           gpu_case("fp32", 2, 1, 70, 70, 64, Mask::causal_mask(), DType::F32)};
  for (const GpuCase& c : cases) {
    SCOPED_TRACE(c.name);
    const GpuInputs in = inputs_of(c);
    const std::int64_t before = state_->executed();
    const GpuResults got = run_case(c, in, cuda::StepKernel::Cudnn, state_.get());
    EXPECT_EQ(state_->executed(), before);
    check_case(c, in, got, c.dt != DType::F32);
  }
}

// Rows whose lse is below −ln(FLT_MAX) ≈ −88.7, made on purpose (every query anti-aligned with
// every key: scaled scores ≈ −100). At S_kv = 192 = 64 (mod 128), where cuDNN's SM90 backward
// before 9.26 gives NaN dQ, cuDNN runs the forward only there and the own kernel the backward;
// at S_kv = 200 cuDNN runs both passes (a defect of other padded tails would show). Either way
// out, lse and every gradient meet the oracle's bounds.
TEST_F(CudnnAttention, RowsOfVeryNegativeLseGetFiniteGradients) {
  int major = 0;
  cuda::check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0), "cudaDeviceGetAttribute");
  for (const std::int64_t S : {192, 200}) {
    const GpuCase c = gpu_case("lse near -95, S_kv " + std::to_string(S), 2, 2, S, S, 64, Mask::full());
    Tensor q = random_tensor(c.qs(), 41), k = random_tensor(c.ks(), 42);
    for (std::int64_t i = 0; i < q.numel(); ++i) q.data()[i] = -12.5f + 0.5f * q.data()[i];
    for (std::int64_t i = 0; i < k.numel(); ++i) k.data()[i] = 1.0f + 0.1f * k.data()[i];
    GpuInputs in = inputs_of(c);
    in.q = round_to(q, c.dt);
    in.k = round_to(k, c.dt);
    const bool refused = !cuda::cudnn_backward_defect(major, cuda::cudnn_library_version(), c.S_kv).empty();
    const std::int64_t before = state_->executed();
    const GpuResults got = run_case(c, in, cuda::StepKernel::Cudnn, state_.get());
    EXPECT_EQ(state_->executed() - before, refused ? 1 : 2)
        << c.name << ": SM " << major << ", cuDNN " << cuda::cudnn_library_version();
    EXPECT_LT(*std::max_element(got.lse.data(), got.lse.data() + got.lse.numel()), -88.7f)
        << c.name << ": the case does not make the rows it is about";
    check_case(c, in, got, true);
  }
}

// A step cuDNN refuses whole runs as halves of its KV heads (planted: more than one KV head
// refused, so 4 KV heads run as 4 one-head graphs, one graph shared by all): the results meet
// the oracle's bounds, cuDNN ran 4 graphs a pass, and the refusal is reported.
TEST_F(CudnnAttention, ARefusedStepRunsAsHalvesOfItsHeads) {
  const GpuCase c = gpu_case("halves", 8, 4, 150, 150, 64, Mask::causal_mask());
  const GpuInputs in = inputs_of(c);
  state_->plant_refusal_above_kv_heads(1);
  const std::int64_t before = state_->executed();
  const GpuResults got = run_case(c, in, cuda::StepKernel::Cudnn, state_.get());
  state_->plant_refusal_above_kv_heads(0);
  EXPECT_EQ(state_->executed() - before, 8) << "4 one-head graphs forward, 4 backward";
  EXPECT_NE(state_->last_refusal().find("planted"), std::string::npos) << state_->last_refusal();
  check_case(c, in, got, true);
}

// A repeated key builds no new graph.
TEST_F(CudnnAttention, GraphsAreCachedByKey) {
  const GpuCase c = gpu_case("cache", 2, 2, 80, 80, 64, Mask::causal_mask());
  const GpuInputs in = inputs_of(c);
  run_case(c, in, cuda::StepKernel::Cudnn, state_.get());
  const std::int64_t built = state_->built(), ran = state_->executed();
  run_case(c, in, cuda::StepKernel::Cudnn, state_.get());
  EXPECT_EQ(state_->built(), built);
  EXPECT_EQ(state_->executed(), ran + 2);
}

// With room for two graphs, another case's graphs evict the first case's (after the device
// finished their kernels): running the first case again builds graphs again, and every run
// meets the oracle's bounds, before and after an eviction.
TEST_F(CudnnAttention, EvictedGraphsAreBuiltAgain) {
  state_->set_graph_capacity(2);
  const GpuCase a = gpu_case("evict a", 2, 2, 80, 80, 64, Mask::causal_mask());
  const GpuCase b = gpu_case("evict b", 2, 2, 96, 96, 64, Mask::causal_mask());
  const GpuInputs ia = inputs_of(a), ib = inputs_of(b);
  check_case(a, ia, run_case(a, ia, cuda::StepKernel::Cudnn, state_.get()), true);
  const std::int64_t built_a = state_->built();
  run_case(a, ia, cuda::StepKernel::Cudnn, state_.get());
  EXPECT_EQ(state_->built(), built_a) << "a's graphs fit: a second run builds none";
  check_case(b, ib, run_case(b, ib, cuda::StepKernel::Cudnn, state_.get()), true);
  EXPECT_GT(state_->evicted(), 0) << "b's graphs did not evict a's";
  const std::int64_t built_b = state_->built();
  const std::int64_t ran = state_->executed();
  check_case(a, ia, run_case(a, ia, cuda::StepKernel::Cudnn, state_.get()), true);
  EXPECT_GT(state_->built(), built_b) << "a's evicted graphs were not built again";
  EXPECT_EQ(state_->executed(), ran + 2) << "cuDNN did not run a's steps after the eviction";
  state_->set_graph_capacity(128);
}

/// Case c's backward on cuDNN from base's forward (out, lse, delta) into fp32 dq, dk, dv that
/// hold `init` (accumulate: added into; else overwritten); returns what was written (less init
/// when accumulating), having checked that cuDNN ran the step.
std::vector<Tensor> backward_into_fp32(const GpuCase& c, const GpuInputs& in, const GpuResults& base,
                                       const std::vector<Tensor>& init, bool accumulate,
                                       cuda::CudnnState& state) {
  const auto qp = c.positions(true), kp = c.positions(false);
  const ResolvedMask mask(c.mask, c.global(true), c.global(false));
  const kernels::KernelArgs args =
      kernel_args(qp, kp, mask, static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.D))));
  const std::vector<std::int64_t> rs{c.B, c.H, c.S_q};
  DevTensor q = to_device(in.q.bits.data(), c.dt, c.qs(), false),
            k = to_device(in.k.bits.data(), c.dt, c.ks(), false),
            v = to_device(in.v.bits.data(), c.dt, c.ks(), false),
            g = to_device(in.g.bits.data(), c.dt, c.qs(), false),
            o = to_device(base.out.bits.data(), c.dt, c.qs(), false),
            l = to_device(base.lse.data(), DType::F32, rs, false),
            d = to_device(base.delta.data(), DType::F32, rs, false),
            gq = to_device(init[0].data(), DType::F32, c.qs(), false),
            gk = to_device(init[1].data(), DType::F32, c.ks(), false),
            gv = to_device(init[2].data(), DType::F32, c.ks(), false);
  const std::int64_t before = state.executed();
  cuda::step_backward(g.view, q.view, k.view, v.view, l.view, d.view, gq.view, gk.view, gv.view, args,
                      accumulate, nullptr, cuda::StepKernel::Cudnn, &state, &o.view);
  cuda::check(cudaDeviceSynchronize(), "backward");
  EXPECT_EQ(state.executed(), before + 1) << "cuDNN did not take the step";
  return gradients_written(c, gq, gk, gv, init, accumulate);
}

// accumulate: cuDNN's 16-bit gradients added into fp32 dq, dk, dv; written fresh into fp32 they
// are the same values (widened), which meet the oracle's bounds.
TEST_F(CudnnAttention, AccumulateAddsIntoFp32Gradients) {
  const GpuCase c = gpu_case("accumulate", 4, 2, 150, 150, 64, Mask::causal_mask());
  const GpuInputs in = inputs_of(c);
  GpuResults base = run_case(c, in, cuda::StepKernel::Cudnn, state_.get());
  std::vector<Tensor> fresh, added;
  for (bool accumulate : {false, true}) {
    const std::vector<Tensor> init{random_tensor(c.qs(), 31), random_tensor(c.ks(), 32),
                                   random_tensor(c.ks(), 33)};
    (accumulate ? added : fresh) = backward_into_fp32(c, in, base, init, accumulate, *state_);
  }
  // The same 16-bit values, up to the fp32 rounding of one addition to init (|init| < 1).
  for (std::size_t t = 0; t < 3; ++t) {
    const double scale = 1.0 + max_abs(fresh[t]);
    EXPECT_LE(max_abs_diff(added[t], fresh[t]), 4 * kEps32 * scale) << "gradient " << t;
    EXPECT_GT(max_abs(fresh[t]), 0.0) << "gradient " << t << " is all zero";
  }
  base.dq.wide = fresh[0];
  base.dk.wide = fresh[1];
  base.dv.wide = fresh[2];
  check_case(c, in, base, true);
}

// A top-left causal step with more keys than queries (keys 96..159 seen by no query): their dK,
// dV rows are exactly zero written fresh into the 16-bit tensors (poisoned before: run_case) and
// exactly nothing added into fp32 accumulators, whatever cuDNN does with key tiles it has no
// query for (the accumulate path's 16-bit scratch is not initialised).
TEST_F(CudnnAttention, KeysNoQuerySeesGetZeroGradients) {
  GpuCase c = gpu_case("top-left, 96 rows over 160 keys", 2, 1, 96, 160, 64, Mask::causal_mask());
  c.seq_q_global = c.seq_kv_global = 160;
  const GpuInputs in = inputs_of(c);
  const GpuResults base = run_case(c, in, cuda::StepKernel::Cudnn, state_.get());
  const std::vector<Tensor> init{random_tensor(c.qs(), 41), random_tensor(c.ks(), 42),
                                 random_tensor(c.ks(), 43)};
  const std::vector<Tensor> added = backward_into_fp32(c, in, base, init, true, *state_);
  const std::int64_t row = c.H_kv * c.D;  // BSHD, B = 1: key j's values [j·row, (j + 1)·row)
  for (const auto& [name, t16, t32] :
       {std::tuple{"dk", &base.dk, &added[1]}, std::tuple{"dv", &base.dv, &added[2]}}) {
    double seen = 0;
    for (std::int64_t i = 0; i < t32->numel(); ++i) {
      if (i >= c.S_q * row) {
        ASSERT_EQ(t16->wide.data()[i], 0.0f) << name << " fresh [" << i << "]";
        ASSERT_EQ(t32->data()[i], 0.0f) << name << " added [" << i << "]";
      } else {
        seen = std::max(seen, static_cast<double>(std::fabs(t32->data()[i])));
      }
    }
    EXPECT_GT(seen, 0.0) << name << ": the seen keys' gradients are all zero";
  }
}

// Without the global out, cuDNN reads the stand-in O' (synthesize_out, device/out_synth.h): the
// GPU's O' is its host twin's bit for bit, and the gradients stay within what the stand-in's
// perturbation of delta allows against the run from the real out: dv does not read delta (2
// roundings to the dtype apart at most); dS_ij moves by P_ij · Δδ_i, so dq_i by at most
// τ · Δδ_i · max|k| and dk_j by τ · max Δδ · max|q| · S_q, Δδ_i = out_synth_delta_bound.
TEST_F(CudnnAttention, TheStandInOutMatchesItsHostTwinAndTheRealOutsGradients) {
  for (const DType dt : {DType::BF16, DType::F16}) {
    const GpuCase c = gpu_case("stand-in", 2, 1, 150, 150, 64, Mask::causal_mask(), dt);
    SCOPED_TRACE(to_string(dt));
    const GpuInputs in = inputs_of(c);
    const GpuResults real = run_case(c, in, cuda::StepKernel::Cudnn, state_.get());
    const std::vector<std::int64_t> rs{c.B, c.H, c.S_q};
    const std::int64_t D = c.D, rows = c.B * c.S_q * c.H;
    // O' on the GPU against the host twin.
    DevTensor g = to_device(in.g.bits.data(), dt, c.qs(), false),
              d = to_device(real.delta.data(), DType::F32, rs, false), o = poisoned(dt, c.qs(), false);
    cuda::synthesize_out(g.view, d.view, o.view, nullptr);
    cuda::check(cudaDeviceSynchronize(), "synthesize_out");
    std::vector<std::uint16_t> got(static_cast<std::size_t>(rows * D));
    from_device(o, got.data());
    std::vector<double> dd(static_cast<std::size_t>(rows));  // Δδ per row (b, s, h)
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t b = r / (c.S_q * c.H), sq = (r / c.H) % c.S_q, h = r % c.H;
      const float* row = in.g.wide.data() + r * D;
      const float delta = real.delta.data()[(b * c.H + h) * c.S_q + sq];
      const float scale = device::out_synth_scale([&](std::int64_t e) { return row[e]; }, D, delta);
      double l1 = 0;
      for (std::int64_t e = 0; e < D; ++e) {
        const float x = device::out_synth_value(row[e], scale);
        const std::uint16_t want = dt == DType::BF16 ? bf16_from_float(x) : f16_from_float(x);
        ASSERT_EQ(got[static_cast<std::size_t>(r * D + e)], want) << "row " << r << " d " << e;
        l1 += std::fabs(row[e]);
      }
      dd[static_cast<std::size_t>(r)] = device::out_synth_delta_bound(delta, l1, D, dt);
    }
    // The backward without out: cuDNN on the stand-in.
    const ResolvedMask mask(c.mask, c.S_q, c.S_kv);
    const auto pos = c.positions(true);
    const float tau = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
    const kernels::KernelArgs args = kernel_args(pos, pos, mask, tau);
    DevTensor q = to_device(in.q.bits.data(), dt, c.qs(), false),
              k = to_device(in.k.bits.data(), dt, c.ks(), false),
              v = to_device(in.v.bits.data(), dt, c.ks(), false),
              l = to_device(real.lse.data(), DType::F32, rs, false), dq = poisoned(dt, c.qs(), false),
              dk = poisoned(dt, c.ks(), false), dv = poisoned(dt, c.ks(), false);
    const std::int64_t before = state_->executed();
    cuda::step_backward(g.view, q.view, k.view, v.view, l.view, d.view, dq.view, dk.view, dv.view, args,
                        false, nullptr, cuda::StepKernel::Cudnn, state_.get(), nullptr);
    cuda::check(cudaDeviceSynchronize(), "backward from the stand-in");
    EXPECT_EQ(state_->executed(), before + 1) << "cuDNN did not run the backward";
    GpuResults s = real;
    from_device(dq, s.dq.bits.data());
    from_device(dk, s.dk.bits.data());
    from_device(dv, s.dv.bits.data());
    for (Rounded* r : {&s.dq, &s.dk, &s.dv}) widen_into(*r);
    const double u = dt == DType::BF16 ? 0x1p-8 : 0x1p-11;
    const double max_dd = *std::max_element(dd.begin(), dd.end());
    const double kmax = max_abs(in.k.wide), qmax = max_abs(in.q.wide);
    for (std::int64_t i = 0; i < s.dq.wide.numel(); ++i) {
      const double b = real.dq.wide.data()[i], a = s.dq.wide.data()[i];
      ASSERT_LE(std::fabs(a - b), 2 * u * std::fabs(b) + tau * dd[static_cast<std::size_t>(i / D)] * kmax)
          << "dq[" << i << "]";
    }
    for (std::int64_t i = 0; i < s.dk.wide.numel(); ++i) {
      const double b = real.dk.wide.data()[i], a = s.dk.wide.data()[i];
      ASSERT_LE(std::fabs(a - b), 2 * u * std::fabs(b) + tau * max_dd * qmax * static_cast<double>(c.S_q))
          << "dk[" << i << "]";
      ASSERT_LE(std::fabs(s.dv.wide.data()[i] - real.dv.wide.data()[i]),
                2 * u * std::fabs(real.dv.wide.data()[i]))
          << "dv[" << i << "]";
    }
    check_case(c, in, real, true);
  }
}

}  // namespace
}  // namespace burst::test

int main(int argc, char** argv) { return burst::test::run_cuda_tests(argc, argv); }
