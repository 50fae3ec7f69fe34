// Tests of the tiled kernel (src/kernels/attention_tiled*.cc) against the fp64 oracle, under the
// tolerance rule of tests/test_util.h (impl error ≤ 4 × the naive fp32 error, floor 8 ulps); its
// microkernels: test_microkernels. Sweeps: every benchmark mask and the shorthands, GQA 1/2/4/8,
// D ∈ {20, 32, 64, 80, 128}, lengths 1, tile−1, tile, tile+1 and non-divisible, S_q ≠ S_kv,
// fully masked rows, striped position arrays, the accumulate flag, every ISA this CPU runs, and
// bitwise equality across thread counts 1/2/3. Shapes are small: the binary runs in seconds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "burst/attention.h"
#include "burst/mask.h"
#include "kernels/tiled_common.h"
#include "test_util.h"

namespace burst {
namespace {

// Every fp32 table this CPU runs, best first. Avx512Bf16, Amx and AmxEmulated are left out: for
// fp32 inputs they run the Avx512 (or AVX2) entries (the same functions; their bf16 entries:
// test_microkernels_bf16, test_attention_amx).
std::vector<Isa> isas_here() {
  std::vector<Isa> out;
  for (Isa isa : supported_isas())
    if (isa != Isa::Avx512Bf16 && isa != Isa::Amx && isa != Isa::AmxEmulated) out.push_back(isa);
  return out;
}

// ---------------------------------------------------------------- kernel vs oracle

struct Case {
  std::string name;
  std::int64_t B = 1, S_q = 0, S_kv = 0, H = 2, H_kv = 1, D = 32;
  Mask mask;
  int block_q = 0, block_kv = 0;
  std::vector<std::int64_t> q_pos, kv_pos;  // empty → 0..S-1
  std::int64_t seq_global = -1;
};

AttentionParams params_of(const Case& c) {
  AttentionParams p;
  p.mask = c.mask;
  p.block_q = c.block_q;
  p.block_kv = c.block_kv;
  p.num_threads = 1;
  if (!c.q_pos.empty()) p.q_positions = c.q_pos.data();
  if (!c.kv_pos.empty()) p.kv_positions = c.kv_pos.data();
  p.seq_q_global = c.seq_global;
  p.seq_kv_global = c.seq_global;
  return p;
}

struct Inputs {
  Tensor q, k, v, dout;
  explicit Inputs(const Case& c, std::uint64_t seed = 11)
      : q(test::random_tensor({c.B, c.S_q, c.H, c.D}, seed)),
        k(test::random_tensor({c.B, c.S_kv, c.H_kv, c.D}, seed + 1)),
        v(test::random_tensor({c.B, c.S_kv, c.H_kv, c.D}, seed + 2)),
        dout(test::random_tensor({c.B, c.S_q, c.H, c.D}, seed + 3)) {}
};

// Runs fwd + bwd of the tiled kernel for every ISA here and each tile config (block_q, block_kv;
// default: the case's own) and checks both against the oracle, computed once.
void check_against_oracle(const Case& c, std::vector<std::pair<int, int>> blocks = {}) {
  if (blocks.empty()) blocks.emplace_back(c.block_q, c.block_kv);
  SCOPED_TRACE(c.name);
  const Inputs in(c);
  AttentionParams pr = params_of(c);
  pr.impl = KernelImpl::Reference;
  const AttentionOutput ref = attention_forward(in.q.view(), in.k.view(), in.v.view(), pr);
  const AttentionOutput naive = test::naive_fp32_forward(in.q, in.k, in.v, pr);
  const AttentionGrads gref = attention_backward(in.dout.view(), in.q.view(), in.k.view(), in.v.view(),
                                                 ref.out.view(), ref.lse.view(), pr);
  const AttentionGrads gnaive = test::naive_fp32_backward(in.dout, in.q, in.k, in.v, ref.out, ref.lse, pr);
  for (const auto& [bq, bkv] : blocks)
    for (Isa isa : isas_here()) {
      // Extra tile configs on the best ISA only: the scalar table costs most of the suite's time
      // in sanitizer (-O0) builds and shares every line of tile logic with the others.
      if (bq != blocks[0].first && isa != isas_here().front()) continue;
      SCOPED_TRACE(std::string(to_string(isa)) + " block_q=" + std::to_string(bq) +
                   " block_kv=" + std::to_string(bkv));
      AttentionParams pt = params_of(c);
      pt.impl = KernelImpl::Tiled;
      pt.isa = isa;
      pt.block_q = bq;
      pt.block_kv = bkv;
      const AttentionOutput got = attention_forward(in.q.view(), in.k.view(), in.v.view(), pt);
      EXPECT_TRUE(test::within_tolerance("out", got.out, ref.out, naive.out));
      EXPECT_TRUE(test::within_tolerance("lse", got.lse, ref.lse, naive.lse));
      const AttentionGrads g = attention_backward(in.dout.view(), in.q.view(), in.k.view(), in.v.view(),
                                                  ref.out.view(), ref.lse.view(), pt);
      EXPECT_TRUE(test::within_tolerance("dq", g.dq, gref.dq, gnaive.dq));
      EXPECT_TRUE(test::within_tolerance("dk", g.dk, gref.dk, gnaive.dk));
      EXPECT_TRUE(test::within_tolerance("dv", g.dv, gref.dv, gnaive.dv));
    }
}

TEST(TiledVsOracle, EveryBenchmarkMask) {
  for (MaskType type : all_mask_types()) {
    Case c;
    c.name = to_string(type);
    c.S_q = c.S_kv = 150;
    c.H = 4;
    c.H_kv = 2;
    BenchmarkMaskConfig cfg;
    cfg.block = 16;
    cfg.num_documents = 4;
    c.mask = make_benchmark_mask(type, 150, cfg);
    check_against_oracle(c, {{32, 32}, {0, 0}});  // small tiles, then the kernel defaults
  }
}

TEST(TiledVsOracle, Shorthands) {
  const std::vector<std::pair<std::string, Mask>> masks = {
      {"full", Mask::full()},
      {"causal", Mask::causal_mask()},
      {"window(7,3)", Mask::sliding_window(7, 3)},
      {"causal window 20", Mask::sliding_window(20, -1, true)},
  };
  for (const auto& [name, mask] : masks) {
    for (auto [sq, skv] : {std::pair<std::int64_t, std::int64_t>{70, 70}, {40, 100}, {100, 40}}) {
      Case c;
      c.name = name + " S_q=" + std::to_string(sq) + " S_kv=" + std::to_string(skv);
      c.S_q = sq;
      c.S_kv = skv;
      c.mask = mask;
      c.block_q = c.block_kv = 16;
      check_against_oracle(c);
    }
  }
}

TEST(TiledVsOracle, GqaRatiosAndHeadDims) {
  for (std::int64_t ratio : {1, 2, 4, 8}) {
    Case c;
    c.name = "gqa " + std::to_string(ratio);
    c.H = 8;
    c.H_kv = 8 / ratio;
    c.S_q = c.S_kv = 45;
    c.mask = Mask::causal_mask();
    c.block_q = c.block_kv = 16;
    check_against_oracle(c);
  }
  for (std::int64_t D : {20, 32, 64, 80, 128}) {
    Case c;
    c.name = "D=" + std::to_string(D);
    c.D = D;
    c.B = 2;
    c.S_q = c.S_kv = 37;
    c.mask = Mask::sliding_window(9, 2);
    c.block_q = c.block_kv = 16;
    check_against_oracle(c);
  }
}

TEST(TiledVsOracle, EdgeLengthsAroundTheTile) {
  for (std::int64_t s : {1, 31, 32, 33, 100}) {
    for (bool causal : {false, true}) {
      Case c;
      c.name = "S=" + std::to_string(s) + (causal ? " causal" : " full");
      c.S_q = c.S_kv = s;
      c.mask = causal ? Mask::causal_mask() : Mask::full();
      c.block_q = c.block_kv = 32;
      check_against_oracle(c);
    }
  }
}

TEST(TiledVsOracle, FullyMaskedRowsGiveZerosAndMinusInf) {
  Case c;
  c.name = "rows 10..29 see keys 5..59 only";
  c.S_q = c.S_kv = 64;
  c.mask = Mask::from_slices({MaskSlice{10, 30, 5, 60, SliceKind::Full, -1, -1}});
  c.block_q = c.block_kv = 16;
  check_against_oracle(c);
  const Inputs in(c);
  AttentionParams p = params_of(c);
  for (Isa isa : isas_here()) {
    p.isa = isa;
    const AttentionOutput o = attention_forward(in.q.view(), in.k.view(), in.v.view(), p);
    for (std::int64_t s : {0, 9, 30, 63}) {
      EXPECT_EQ(o.lse.data()[s], -INFINITY);
      for (std::int64_t d = 0; d < c.D; ++d) EXPECT_EQ(o.out.data()[(s * c.H) * c.D + d], 0.0f);
    }
  }
}

TEST(TiledVsOracle, StripedPositionArrays) {
  // Rank 1 of 4 in the striped layout of a 256-token causal sequence: q and k stride 4.
  for (std::int64_t r : {0, 3}) {
    Case c;
    c.name = "striped rank " + std::to_string(r);
    c.S_q = c.S_kv = 64;
    for (std::int64_t i = 0; i < 64; ++i) {
      c.q_pos.push_back(r + 4 * i);
      c.kv_pos.push_back((3 - r) + 4 * i);
    }
    c.seq_global = 256;
    c.mask = Mask::causal_mask();
    c.block_q = c.block_kv = 16;
    check_against_oracle(c);
  }
}

TEST(TiledGeometry, TilesSplitAtAFewFarJumpsOnly) {
  using kernels::tiled::tile_starts;
  using V = std::vector<std::int64_t>;
  auto iota_from = [](V pos, std::int64_t a, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) pos.push_back(a + i);
    return pos;
  };
  // Contiguous: plain tiles of 16 rows, the last one short.
  EXPECT_EQ(tile_starts(iota_from({}, 0, 40).data(), 40, 16), (V{0, 16, 32, 40}));
  // A zigzag block (chunks [0, 20) and [60, 80)): the seam starts a tile.
  const V zig = iota_from(iota_from({}, 0, 20), 60, 20);
  EXPECT_EQ(tile_starts(zig.data(), 40, 16), (V{0, 16, 20, 36, 40}));
  // A jump no larger than a tile (striped at P = 4) keeps plain tiles.
  V striped;
  for (std::int64_t i = 0; i < 40; ++i) striped.push_back(3 + 4 * i);
  EXPECT_EQ(tile_starts(striped.data(), 40, 16), (V{0, 16, 32, 40}));
  // Many far jumps (striped at P = 32 > 16): splitting at each would make one-row tiles.
  V wide;
  for (std::int64_t i = 0; i < 40; ++i) wide.push_back(32 * i);
  EXPECT_EQ(tile_starts(wide.data(), 40, 16), (V{0, 16, 32, 40}));
  // No positions: plain tiles.
  EXPECT_EQ(tile_starts(nullptr, 20, 16), (V{0, 16, 20}));
}

TEST(TiledVsOracle, ZigzagPositionArraysSplitAtTheSeam) {
  // Rank 0 and 1 of 2 in the zigzag layout of a 200-token sequence (chunks of 50, not a multiple
  // of the tiles): rank r holds chunks r and 3 − r, so each block has a seam tiles do not cross.
  auto zigzag = [](std::int64_t r) {
    std::vector<std::int64_t> pos;
    for (std::int64_t c : {r, 3 - r})
      for (std::int64_t i = 0; i < 50; ++i) pos.push_back(50 * c + i);
    return pos;
  };
  for (const auto& [name, mask] : std::vector<std::pair<std::string, Mask>>{
           {"causal", Mask::causal_mask()}, {"sliding window 40", Mask::sliding_window(40, 0)}})
    for (const auto& [qr, kr] : std::vector<std::pair<std::int64_t, std::int64_t>>{{0, 0}, {1, 0}, {0, 1}}) {
      Case c;
      c.name = name + " q rank " + std::to_string(qr) + ", kv rank " + std::to_string(kr);
      c.S_q = c.S_kv = 100;
      c.q_pos = zigzag(qr);
      c.kv_pos = zigzag(kr);
      c.seq_global = 200;
      c.mask = mask;
      check_against_oracle(c, {{16, 16}, {32, 48}});
    }
}

TEST(TiledVsOracle, AccumulateAddsIntoGradients) {
  Case c;
  c.S_q = 50;
  c.S_kv = 70;
  c.H = 4;
  c.mask = Mask::causal_mask();
  c.block_q = c.block_kv = 16;
  const Inputs in(c);
  AttentionParams p = params_of(c);
  p.impl = KernelImpl::Reference;
  const AttentionOutput ref = attention_forward(in.q.view(), in.k.view(), in.v.view(), p);
  Tensor delta({c.B, c.H, c.S_q});
  attention_delta(in.dout.view(), ref.out.view(), delta.view());
  auto run = [&](KernelImpl impl, Isa isa) {
    AttentionParams pp = params_of(c);
    pp.impl = impl;
    pp.isa = isa;
    AttentionGrads g{test::random_tensor(in.q.shape(), 90), test::random_tensor(in.k.shape(), 91),
                     test::random_tensor(in.k.shape(), 92)};
    attention_backward_with_delta(in.dout.view(), in.q.view(), in.k.view(), in.v.view(), ref.lse.view(),
                                  delta.view(), g.dq.view(), g.dk.view(), g.dv.view(), pp, true);
    return g;
  };
  const AttentionGrads gref = run(KernelImpl::Reference, Isa::Portable);
  const AttentionGrads gn = test::naive_fp32_backward(in.dout, in.q, in.k, in.v, ref.out, ref.lse, p);
  // The naive twin overwrites; its error against the oracle sizes the tolerance all the same.
  const AttentionGrads gref0 = attention_backward(in.dout.view(), in.q.view(), in.k.view(), in.v.view(),
                                                  ref.out.view(), ref.lse.view(), p);
  for (Isa isa : isas_here()) {
    const AttentionGrads g = run(KernelImpl::Tiled, isa);
    const double tol_q = test::tolerance(test::max_abs_diff(gn.dq, gref0.dq), test::max_abs(gref.dq));
    const double tol_k = test::tolerance(test::max_abs_diff(gn.dk, gref0.dk), test::max_abs(gref.dk));
    const double tol_v = test::tolerance(test::max_abs_diff(gn.dv, gref0.dv), test::max_abs(gref.dv));
    EXPECT_LE(test::max_abs_diff(g.dq, gref.dq), tol_q) << to_string(isa);
    EXPECT_LE(test::max_abs_diff(g.dk, gref.dk), tol_k) << to_string(isa);
    EXPECT_LE(test::max_abs_diff(g.dv, gref.dv), tol_v) << to_string(isa);
  }
}

TEST(TiledVarlen, EmptySequencesAndBitwiseEqualToPerSequenceCalls) {
  // Sequences (S_q, S_kv): (5, 0) — queries with no keys; (0, 30) — keys with no queries;
  // (35, 40) — causal, bottom-right aligned. The boundary splits varlen per sequence, so each
  // sequence must equal, bit for bit, a BSHD call on its rows alone (validated against the oracle
  // by the tests above); rows without keys give out = 0, lse = −inf, dq = 0.
  const std::int64_t H = 2, H_kv = 1, D = 32;
  const std::vector<std::int32_t> cu_q = {0, 5, 5, 40}, cu_kv = {0, 0, 30, 70};
  const Tensor q = test::random_tensor({40, H, D}, 5), k = test::random_tensor({70, H_kv, D}, 6),
               v = test::random_tensor({70, H_kv, D}, 7), dout = test::random_tensor({40, H, D}, 8);
  auto rows = [](const Tensor& t, std::int64_t r0, std::int64_t r1) {
    const std::int64_t w = t.shape()[1] * t.shape()[2];
    Tensor out({1, r1 - r0, t.shape()[1], t.shape()[2]});
    std::copy(t.data() + r0 * w, t.data() + r1 * w, out.data());
    return out;
  };
  for (Isa isa : isas_here()) {
    SCOPED_TRACE(to_string(isa));
    AttentionParams p;
    p.mask = Mask::causal_mask();
    p.isa = isa;
    p.num_threads = 2;
    p.block_q = p.block_kv = 16;
    p.cu_seqlens_q = cu_q;
    p.cu_seqlens_kv = cu_kv;
    const AttentionOutput o = attention_forward(q.view(), k.view(), v.view(), p);
    const AttentionGrads g =
        attention_backward(dout.view(), q.view(), k.view(), v.view(), o.out.view(), o.lse.view(), p);
    for (std::int64_t i = 0; i < 5 * H * D; ++i) ASSERT_EQ(o.out.data()[i], 0.0f);
    for (std::int64_t i = 0; i < 5 * H * D; ++i) ASSERT_EQ(g.dq.data()[i], 0.0f);
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t s = 0; s < 5; ++s) ASSERT_EQ(o.lse.data()[h * 40 + s], -INFINITY);
    for (std::int64_t i = 0; i < 30 * H_kv * D; ++i) {  // keys nobody attends to
      ASSERT_EQ(g.dk.data()[i], 0.0f);
      ASSERT_EQ(g.dv.data()[i], 0.0f);
    }
    AttentionParams ps = p;
    ps.cu_seqlens_q.clear();
    ps.cu_seqlens_kv.clear();
    const Tensor q3 = rows(q, 5, 40), k3 = rows(k, 30, 70), v3 = rows(v, 30, 70), d3 = rows(dout, 5, 40);
    const AttentionOutput o3 = attention_forward(q3.view(), k3.view(), v3.view(), ps);
    const AttentionGrads g3 =
        attention_backward(d3.view(), q3.view(), k3.view(), v3.view(), o3.out.view(), o3.lse.view(), ps);
    EXPECT_EQ(0, std::memcmp(o3.out.data(), o.out.data() + 5 * H * D, sizeof(float) * 35 * H * D));
    for (std::int64_t h = 0; h < H; ++h)
      EXPECT_EQ(0, std::memcmp(o3.lse.data() + h * 35, o.lse.data() + h * 40 + 5, sizeof(float) * 35));
    EXPECT_EQ(0, std::memcmp(g3.dq.data(), g.dq.data() + 5 * H * D, sizeof(float) * 35 * H * D));
    EXPECT_EQ(0, std::memcmp(g3.dk.data(), g.dk.data() + 30 * H_kv * D, sizeof(float) * 40 * H_kv * D));
    EXPECT_EQ(0, std::memcmp(g3.dv.data(), g.dv.data() + 30 * H_kv * D, sizeof(float) * 40 * H_kv * D));
  }
}

// ---------------------------------------------------------------- determinism, progress

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() && std::memcmp(a.data(), b.data(), sizeof(float) * a.numel()) == 0;
}

TEST(TiledDeterminism, BitwiseIdenticalForOneTwoThreeThreads) {
  // (H_kv = 1: kv-chunked backward with a partial-dQ reduction) and (B·H_kv = 8: one item per
  // (b, kv-head)), causal and a document mask.
  struct Shape {
    std::int64_t B, H, H_kv;
    Mask mask;
  };
  const std::vector<Shape> shapes = {
      {1, 4, 1, Mask::causal_mask()},
      {2, 8, 4, make_benchmark_mask(MaskType::CausalDocument, 120)},
  };
  for (const Shape& s : shapes) {
    Case c;
    c.B = s.B;
    c.H = s.H;
    c.H_kv = s.H_kv;
    c.S_q = c.S_kv = 120;
    c.mask = s.mask;
    c.block_q = c.block_kv = 16;
    const Inputs in(c);
    for (Isa isa : isas_here()) {
      std::vector<AttentionOutput> outs;
      std::vector<AttentionGrads> grads;
      for (int t : {1, 2, 3}) {
        AttentionParams p = params_of(c);
        p.isa = isa;
        p.num_threads = t;
        outs.push_back(attention_forward(in.q.view(), in.k.view(), in.v.view(), p));
        grads.push_back(attention_backward(in.dout.view(), in.q.view(), in.k.view(), in.v.view(),
                                           outs[0].out.view(), outs[0].lse.view(), p));
      }
      for (std::size_t i = 1; i < outs.size(); ++i) {
        EXPECT_TRUE(same_bits(outs[i].out, outs[0].out)) << to_string(isa) << " threads case " << i;
        EXPECT_TRUE(same_bits(outs[i].lse, outs[0].lse)) << to_string(isa);
        EXPECT_TRUE(same_bits(grads[i].dq, grads[0].dq)) << to_string(isa);
        EXPECT_TRUE(same_bits(grads[i].dk, grads[0].dk)) << to_string(isa);
        EXPECT_TRUE(same_bits(grads[i].dv, grads[0].dv)) << to_string(isa);
      }
    }
  }
}

TEST(TiledWorkspace, ReuseAcrossShapesAndReleaseGiveTheSameBits) {
  // The per-thread workspace (src/kernels/workspace.h) is reused across calls without clearing:
  // a small call after a large one (stale data in the block), a call after release (fresh
  // block) and the first call must agree bit for bit, forward and backward, from 1 and 2 threads.
  Case big, small;
  big.B = 2;
  big.H = 4;
  big.H_kv = 2;
  big.S_q = big.S_kv = 200;
  big.mask = Mask::causal_mask();
  small.B = 1;
  small.H = 2;
  small.H_kv = 1;
  small.S_q = small.S_kv = 53;
  small.mask = make_benchmark_mask(MaskType::SlidingWindow, 53);
  const Inputs in_big(big), in_small(small);
  for (int threads : {1, 2}) {
    AttentionParams pb = params_of(big), ps = params_of(small);
    pb.num_threads = ps.num_threads = threads;
    auto run = [&](const Inputs& in, const AttentionParams& p) {
      AttentionOutput o = attention_forward(in.q.view(), in.k.view(), in.v.view(), p);
      AttentionGrads g = attention_backward(in.dout.view(), in.q.view(), in.k.view(), in.v.view(),
                                            o.out.view(), o.lse.view(), p);
      return std::make_pair(std::move(o), std::move(g));
    };
    release_kernel_workspace();
    const auto first = run(in_small, ps);
    run(in_big, pb);  // grows the block and leaves large-call data in it
    const auto after_big = run(in_small, ps);
    release_kernel_workspace();
    const auto after_release = run(in_small, ps);
    for (const auto* r : {&after_big, &after_release}) {
      EXPECT_TRUE(same_bits(r->first.out, first.first.out)) << threads;
      EXPECT_TRUE(same_bits(r->first.lse, first.first.lse)) << threads;
      EXPECT_TRUE(same_bits(r->second.dq, first.second.dq)) << threads;
      EXPECT_TRUE(same_bits(r->second.dk, first.second.dk)) << threads;
      EXPECT_TRUE(same_bits(r->second.dv, first.second.dv)) << threads;
    }
    AttentionParams pr = params_of(small);
    pr.impl = KernelImpl::Reference;
    const AttentionOutput ref =
        attention_forward(in_small.q.view(), in_small.k.view(), in_small.v.view(), pr);
    const AttentionOutput naive = test::naive_fp32_forward(in_small.q, in_small.k, in_small.v, pr);
    EXPECT_TRUE(test::within_tolerance("out", after_big.first.out, ref.out, naive.out));
  }
}

TEST(TiledProgress, CalledOnTheCallingThreadBetweenTiles) {
  Case c;
  c.S_q = c.S_kv = 96;
  c.block_q = c.block_kv = 16;
  const Inputs in(c);
  AttentionParams p = params_of(c);
  p.num_threads = 2;
  int calls = 0;  // only thread 0 (the caller) may call: a plain counter must be race-free
  p.progress = [&calls] { ++calls; };
  p.num_threads = 1;  // one thread: once per computed tile (2 heads × 6 × 6) plus once per call
  attention_forward(in.q.view(), in.k.view(), in.v.view(), p);
  EXPECT_EQ(calls, 73);
  calls = 0;
  p.num_threads = 2;
  const AttentionOutput o = attention_forward(in.q.view(), in.k.view(), in.v.view(), p);
  EXPECT_GT(calls, 0);
  const int after_forward = calls;
  attention_backward(in.dout.view(), in.q.view(), in.k.view(), in.v.view(), o.out.view(), o.lse.view(), p);
  EXPECT_GT(calls, after_forward);
}

}  // namespace
}  // namespace burst
