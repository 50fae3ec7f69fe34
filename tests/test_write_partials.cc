// The write ring's partials in fp32 (the default) and in bf16 (DistConfig::partials_dtype) under
// mpiexec -n 1..4: burst's dQ partials (query-side backward) and the dK, dV partials of the KV
// side, on the flat ring, the double ring (ranks_per_node = 2) and the mask-aware direct schedule.
// Oracle: the fp64 reference kernel on the global problem.
// - fp32 partials: the error must not grow with P (≤ 2× the single-process fp32 kernel's error
//   plus 32 fp32 ulps of the largest value).
// - bf16 partials: each hop sends its fp32 running sum rounded to bf16 and the receiver adds it in
//   fp32, so a block's sum is rounded at most P times (P − 1 chain hops + the home hop on a flat
//   ring; L − 1 chain + 1 home per round of n rounds on a double ring; once per contribution on
//   the direct schedule), each time by at most u·|running sum| (u = 2^-8, bf16's unit
//   roundoff) and every running sum is bounded by A = Σ_j |contribution of block j| ≤ the
//   "absolute gradient" computed here in fp64 (dQ: τ·Σ_k |dS_qk|·|K_k|; dK: τ·Σ_q |dS_qk|·|Q_q|;
//   dV: Σ_q P_qk·|dO_q|). Elementwise bound: |err_bf16| ≤ P·u·A + 4·(fp32-partials error) +
//   floor. The measured error is far below it (docs/strategies.md § bf16 write-ring partials:
//   it grows like √P, not P). At P ≥ 2 the bf16 run must differ from the fp32 one by more than
//   fp32 noise and send exactly the plan's bytes, which are the fp32 plan's minus half the write
//   bytes: an option that silently sent fp32 fails both. At P = 1 nothing travels and the result
//   equals the fp32 run bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "burst/attention.h"
#include "burst/comm.h"
#include "burst/error.h"
#include "burst/mask.h"
#include "burst/plan.h"
#include "burst/strategy.h"
#include "dist_test_util.h"
#include "test_util.h"

namespace burst {
namespace {

constexpr std::int64_t kS = 96, kH = 4, kD = 16;
constexpr double kUnitBf16 = 1.0 / 256;  // 2^-8

struct Reference {
  Tensor q, k, v, dout;
  Tensor dq, dk, dv;              // fp64 oracle
  Tensor abs_dq, abs_dk, abs_dv;  // A: the bound on any partial sum's magnitude (header)
  double local[3] = {};           // single-process fp32 kernel error: dq, dk, dv
};

Reference make_reference(const Mask& mask) {
  Reference r;
  r.q = test::random_tensor({1, kS, kH, kD}, 71);
  r.k = test::random_tensor({1, kS, kH, kD}, 72);
  r.v = test::random_tensor({1, kS, kH, kD}, 73);
  r.dout = test::random_tensor({1, kS, kH, kD}, 74);
  AttentionParams p;
  p.mask = mask;
  p.impl = KernelImpl::Reference;
  const AttentionOutput o = attention_forward(r.q.view(), r.k.view(), r.v.view(), p);
  AttentionGrads g =
      attention_backward(r.dout.view(), r.q.view(), r.k.view(), r.v.view(), o.out.view(), o.lse.view(), p);
  r.dq = std::move(g.dq);
  r.dk = std::move(g.dk);
  r.dv = std::move(g.dv);
  p.impl = KernelImpl::Tiled;
  p.num_threads = 1;
  const AttentionOutput t = attention_forward(r.q.view(), r.k.view(), r.v.view(), p);
  const AttentionGrads tg =
      attention_backward(r.dout.view(), r.q.view(), r.k.view(), r.v.view(), t.out.view(), t.lse.view(), p);
  r.local[0] = test::max_abs_diff(tg.dq, r.dq);
  r.local[1] = test::max_abs_diff(tg.dk, r.dk);
  r.local[2] = test::max_abs_diff(tg.dv, r.dv);
  // The absolute gradients in fp64 from the reference's P (= exp(s − lse)) and dS = P·(dP − δ).
  r.abs_dq = Tensor(r.q.shape());
  r.abs_dk = Tensor(r.k.shape());
  r.abs_dv = Tensor(r.v.shape());
  const ResolvedMask m(mask, kS, kS);
  const double tau = 1.0 / std::sqrt(static_cast<double>(kD));
  auto at = [](const Tensor& x, std::int64_t s, std::int64_t h, std::int64_t d) {
    return static_cast<double>(x.data()[(s * kH + h) * kD + d]);
  };
  std::vector<double> aq(kS * kH * kD), ak(kS * kH * kD), av(kS * kH * kD);
  for (std::int64_t h = 0; h < kH; ++h)
    for (std::int64_t i = 0; i < kS; ++i) {
      const double lse = o.lse.data()[h * kS + i];
      double delta = 0;
      for (std::int64_t d = 0; d < kD; ++d) delta += at(r.dout, i, h, d) * at(o.out, i, h, d);
      for (std::int64_t j = 0; j < kS; ++j) {
        if (!m.visible(i, j)) continue;
        double s = 0, dp = 0;
        for (std::int64_t d = 0; d < kD; ++d) {
          s += at(r.q, i, h, d) * at(r.k, j, h, d);
          dp += at(r.dout, i, h, d) * at(r.v, j, h, d);
        }
        const double pr = std::exp(tau * s - lse), ds = std::fabs(pr * (dp - delta));
        for (std::int64_t d = 0; d < kD; ++d) {
          aq[static_cast<std::size_t>((i * kH + h) * kD + d)] += tau * ds * std::fabs(at(r.k, j, h, d));
          ak[static_cast<std::size_t>((j * kH + h) * kD + d)] += tau * ds * std::fabs(at(r.q, i, h, d));
          av[static_cast<std::size_t>((j * kH + h) * kD + d)] += pr * std::fabs(at(r.dout, i, h, d));
        }
      }
    }
  for (std::size_t e = 0; e < aq.size(); ++e) {
    r.abs_dq.data()[e] = static_cast<float>(aq[e]);
    r.abs_dk.data()[e] = static_cast<float>(ak[e]);
    r.abs_dv.data()[e] = static_cast<float>(av[e]);
  }
  return r;
}

struct Grads {
  Tensor dq, dk, dv;
  std::int64_t bytes = 0, predicted = 0;
  std::string side;
};

Grads run(const DistConfig& cfg, const Mask& mask, const Reference& ref) {
  const Communicator world = Communicator::world();
  const ProblemShape shape{1, kS, kH, kH, kD};
  DistAttention attn(world, cfg, shape, mask);
  const int rank = world.rank();
  const SequenceLayout& layout = attn.plan().layout();
  const Tensor q = test::shard_of(layout, rank, ref.q), k = test::shard_of(layout, rank, ref.k);
  const Tensor v = test::shard_of(layout, rank, ref.v), dout = test::shard_of(layout, rank, ref.dout);
  Tensor out(q.shape()), lse({1, kH, attn.local_length()});
  attn.forward(q.view(), k.view(), v.view(), out.view(), lse.view());
  Grads g{Tensor(q.shape()), Tensor(k.shape()), Tensor(v.shape()), 0, 0, ""};
  attn.backward(dout.view(), q.view(), k.view(), v.view(), out.view(), lse.view(), g.dq.view(), g.dk.view(),
                g.dv.view());
  g.bytes = attn.last_stats().bytes_sent;
  g.predicted = attn.plan().backward().bytes_sent[static_cast<std::size_t>(rank)];
  g.side = attn.last_stats().backward_side;
  return g;
}

double floor_of(const Tensor& want) { return 32 * test::kEps32 * std::max(1.0, test::max_abs(want)); }

// Largest |got − want| − P·u·A over the elements (≤ 0 when every element meets its bound).
double excess_over_bound(const Tensor& got, const Tensor& want, const Tensor& abs_grad, int P) {
  double worst = -1e300;
  for (std::int64_t e = 0; e < got.numel(); ++e) {
    const double err = std::fabs(static_cast<double>(got.data()[e]) - want.data()[e]);
    worst = std::max(worst, err - P * kUnitBf16 * static_cast<double>(abs_grad.data()[e]));
  }
  return worst;
}

void check_case(const DistConfig& base, const Mask& mask, const Reference& ref) {
  const Communicator world = Communicator::world();
  const int P = world.size(), rank = world.rank();
  SCOPED_TRACE(std::string("strategy=") + to_string(base.strategy) + " layout=" + to_string(base.layout) +
               " ranks_per_node=" + std::to_string(base.ranks_per_node) + " P=" + std::to_string(P));
  DistConfig c32 = base, c16 = base;
  c16.partials_dtype = DType::BF16;
  const Grads g32 = run(c32, mask, ref), g16 = run(c16, mask, ref);
  DistAttention probe(world, c32, ProblemShape{1, kS, kH, kH, kD}, mask);
  const SequenceLayout& layout = probe.plan().layout();
  const Tensor* got32[3] = {&g32.dq, &g32.dk, &g32.dv};
  const Tensor* got16[3] = {&g16.dq, &g16.dk, &g16.dv};
  const Tensor* want_g[3] = {&ref.dq, &ref.dk, &ref.dv};
  const Tensor* abs_g[3] = {&ref.abs_dq, &ref.abs_dk, &ref.abs_dv};
  const char* names[3] = {"dq", "dk", "dv"};
  // Which gradient travels on the write ring: dQ on the query side, dK and dV on the KV side.
  const bool query = g32.side == "query";
  EXPECT_EQ(g16.side, g32.side);
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE(names[i]);
    const Tensor want = test::shard_of(layout, rank, *want_g[i]);
    const Tensor abs_grad = test::shard_of(layout, rank, *abs_g[i]);
    const double e32 = test::max_abs_diff(*got32[i], want), e16 = test::max_abs_diff(*got16[i], want);
    const double fl = floor_of(*want_g[i]);
    EXPECT_LE(e32, 2 * ref.local[i] + fl) << "fp32 partials: the error grew with P";
    const bool on_ring = query ? i == 0 : i > 0;
    if (P == 1 || !on_ring) {
      EXPECT_EQ(test::max_abs_diff(*got16[i], *got32[i]), 0.0) << "not sent in bf16: must equal fp32";
      continue;
    }
    EXPECT_LE(excess_over_bound(*got16[i], want, abs_grad, P), 4 * e32 + fl)
        << "bf16 partials: error above P·u·A (max error " << e16 << ")";
    // The bf16 wire copies did round: far more than fp32 noise (a silent fp32 wire fails here;
    // reduced over ranks since a rank whose blocks all stay home sees no rounding).
    const double spread = world.all_reduce_max(test::max_abs_diff(*got16[i], *got32[i]));
    EXPECT_GT(spread, 64 * test::kEps32 * test::max_abs(*want_g[i])) << "bf16 partials changed nothing";
  }
  EXPECT_EQ(g32.bytes, g32.predicted) << "fp32 partials: counters = plan";
  EXPECT_EQ(g16.bytes, g16.predicted) << "bf16 partials: counters = plan";
  const std::int64_t sum16 = world.all_reduce_sum(g16.bytes), sum32 = world.all_reduce_sum(g32.bytes);
  if (P > 1) { EXPECT_LT(sum16, sum32); }
}

TEST(WritePartials, Fp32DoesNotGrowBf16WithinItsBound) {
  const int P = Communicator::world().size();
  const Mask causal = Mask::causal_mask();
  const Reference ref = make_reference(causal);  // shared by the cases below
  std::vector<DistConfig> cases;
  for (BackwardSide side : {BackwardSide::QuerySide, BackwardSide::KvSide}) {
    DistConfig c;
    c.strategy = StrategyKind::Burst;
    c.layout = LayoutKind::Zigzag;
    c.backward_side = side;
    c.num_threads = 1;
    cases.push_back(c);
    if (P == 4) {  // double ring: 2 emulated nodes × 2 ranks
      c.ranks_per_node = 2;
      cases.push_back(c);
    }
  }
  DistConfig direct;  // causal on contiguous blocks: empty blocks → the mask-aware direct schedule
  direct.strategy = StrategyKind::Ring;
  direct.layout = LayoutKind::Contiguous;
  direct.num_threads = 1;
  cases.push_back(direct);
  direct.strategy = StrategyKind::Burst;
  direct.backward_side = BackwardSide::QuerySide;
  cases.push_back(direct);
  for (const DistConfig& c : cases) check_case(c, causal, ref);
}

// Byte formulas by hand: the write bytes halve, the read bytes do not change. Flat ring, P hops
// of the write partial per rank (P − 1 chain + home), b_q = S/P·H·D, b_kv likewise (MHA).
TEST(WritePartials, PlanBytesPerPartialsDtype) {
  const std::int64_t P = Communicator::world().size();
  if (P == 1) GTEST_SKIP() << "nothing moves at P = 1";
  const ProblemShape shape{1, kS, kH, kH, kD};
  const std::int64_t b = kS / P * kH * kD, r = kS / P * kH;
  for (BackwardSide side : {BackwardSide::QuerySide, BackwardSide::KvSide}) {
    DistConfig cfg;
    cfg.strategy = StrategyKind::Burst;
    cfg.backward_side = side;
    for (DType pd : {DType::F32, DType::BF16}) {
      cfg.partials_dtype = pd;
      const std::int64_t w = pd == DType::F32 ? 4 : 2;
      const Plan plan = Plan::make(cfg, shape, Mask::full(), static_cast<int>(P), static_cast<int>(P));
      const std::int64_t want = side == BackwardSide::QuerySide
                                    ? (P - 1) * (4 * 2 * b + 4 * 2 * r) + P * w * b
                                    : (P - 1) * 4 * 2 * b + P * w * 2 * b;
      for (std::int64_t g = 0; g < P; ++g)
        EXPECT_EQ(plan.backward().bytes_sent[static_cast<std::size_t>(g)], want);
      EXPECT_EQ(ring_backward_bytes(side, shape, static_cast<int>(P), pd), want);
    }
  }
}

// Every rank gets the same Unsupported verdict for bf16 partials with a strategy whose partials
// do not travel on the ring family's write ring, and for an f16 partials request.
TEST(WritePartials, RejectedOutsideTheRingFamily) {
  const Communicator world = Communicator::world();
  const ProblemShape shape{1, kS, kH, kH, kD};
  for (StrategyKind s : {StrategyKind::AllGather, StrategyKind::Ulysses, StrategyKind::Usp}) {
    DistConfig cfg;
    cfg.strategy = s;
    cfg.layout = LayoutKind::Contiguous;
    cfg.partials_dtype = DType::BF16;
    try {
      DistAttention attn(world, cfg, shape, Mask::causal_mask());
      ADD_FAILURE() << to_string(s) << ": no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Unsupported) << e.what();
      EXPECT_NE(std::string(e.what()).find("burst or ring"), std::string::npos) << e.what();
    }
  }
  DistConfig cfg;
  cfg.partials_dtype = DType::F16;
  EXPECT_THROW(DistAttention(world, cfg, shape, Mask::causal_mask()), Error);
}

}  // namespace
}  // namespace burst
