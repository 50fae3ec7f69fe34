// bf16 / fp16 context parallelism under mpiexec -n 1..4, every strategy: q, k, v, dout, out, dq,
// dk, dv in 16-bit storage, lse fp32. The oracle is the fp64 reference on the same rounded
// global inputs (widened exactly). Each result's error against it is compared with the error of
// the single-process 16-bit kernel (P = 1, same inputs): the distributed error must not grow
// with P beyond 2× it (plus a floor of 32 fp32 ulps of the largest value, for results the
// single-process run happens to round exactly). Why 2×: both errors are dominated by the one
// rounding of each result to 16 bits (≤ u·|x|, u = 2^-8 bf16, 2^-11 fp16); a distributed run adds
// fp32-sized differences (merge order, partial sums) that can move a value across a rounding
// boundary, i.e. at most one more half-ulp — never an error that scales with P. lse stays fp32
// and meets the fp32 rule of the other distributed tests (dist_close). burst, ring, ulysses, usp,
// headpar and distflash move Q, K, V, dO in 16 bits, allgather K, V (partials, lse, delta fp32);
// every strategy's byte counters must equal the plan's per-dtype formulas. On a CPU with
// AVX512_BF16 the kernels compute on bf16 operands (P, dS rounded: docs/design.md), and the bound
// holds there too.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "burst/attention.h"
#include "burst/comm.h"
#include "burst/error.h"
#include "burst/mask.h"
#include "burst/plan.h"
#include "burst/strategy.h"
#include "dist_test_util.h"
#include "lowp_test_util.h"
#include "test_util.h"

namespace burst {
namespace {

constexpr std::int64_t kS = 96, kD = 16;
// H = H_kv·2 with H_kv = 12: divisible by every P ≤ 4 (Ulysses, USP, TP split heads), GQA 2.
constexpr std::int64_t kH = 24, kHkv = 12;

using test::empty_rounded;
using test::round_to;
using test::Rounded;
using test::widen_into;

struct Reference {
  DType dtype = DType::BF16;
  Mask mask;
  Tensor q, k, v, dout;         // rounded global inputs, widened
  Tensor out, lse, dq, dk, dv;  // fp64 oracle (backward from the rounded oracle out)
  double local[4] = {};         // single-process 16-bit error: out, dq, dk, dv
  double lse_tol = 0, lse_local = 0;
  Isa isa = Isa::Auto;
};

double err(const Tensor& a, const Tensor& b) { return test::max_abs_diff(a, b); }

// isa: the ISA of every Tiled call (single-process and distributed); Auto → the dispatch rule.
Reference make_reference(DType dt, Isa isa = Isa::Auto) {
  Reference r;
  r.isa = isa;
  r.dtype = dt;
  r.mask = Mask::causal_mask();
  r.q = round_to(test::random_tensor({1, kS, kH, kD}, 31), dt).wide;
  r.k = round_to(test::random_tensor({1, kS, kHkv, kD}, 32), dt).wide;
  r.v = round_to(test::random_tensor({1, kS, kHkv, kD}, 33), dt).wide;
  r.dout = round_to(test::random_tensor({1, kS, kH, kD}, 34), dt).wide;
  AttentionParams p;
  p.mask = r.mask;
  p.impl = KernelImpl::Reference;
  AttentionOutput o = attention_forward(r.q.view(), r.k.view(), r.v.view(), p);
  const Tensor out_rounded = round_to(o.out, dt).wide;  // what a 16-bit caller saves
  AttentionGrads g = attention_backward(r.dout.view(), r.q.view(), r.k.view(), r.v.view(), out_rounded.view(),
                                        o.lse.view(), p);
  const AttentionOutput n = test::naive_fp32_forward(r.q, r.k, r.v, p);
  r.lse_tol = test::tolerance(err(n.lse, o.lse), test::max_abs(o.lse));
  r.out = std::move(o.out);
  r.lse = std::move(o.lse);
  r.dq = std::move(g.dq);
  r.dk = std::move(g.dk);
  r.dv = std::move(g.dv);
  // The single-process 16-bit kernel on the same inputs.
  p.impl = KernelImpl::Tiled;
  p.num_threads = 1;
  p.isa = isa;
  Rounded q = round_to(r.q, dt), k = round_to(r.k, dt), v = round_to(r.v, dt), dout = round_to(r.dout, dt);
  Rounded out = empty_rounded(r.q.shape(), dt), dq = empty_rounded(r.q.shape(), dt);
  Rounded dk = empty_rounded(r.k.shape(), dt), dv = empty_rounded(r.k.shape(), dt);
  Tensor lse(r.lse.shape());
  attention_forward(q.view, k.view, v.view, out.view, lse.view(), p);
  attention_backward(dout.view, q.view, k.view, v.view, out.view, lse.view(), dq.view, dk.view, dv.view, p);
  for (Rounded* h : {&out, &dq, &dk, &dv}) widen_into(*h);
  r.local[0] = err(out.wide, r.out);
  r.local[1] = err(dq.wide, r.dq);
  r.local[2] = err(dk.wide, r.dk);
  r.local[3] = err(dv.wide, r.dv);
  r.lse_local = err(lse, r.lse);
  return r;
}

const Reference& reference(DType dt) {
  static const Reference bf16 = make_reference(DType::BF16), f16 = make_reference(DType::F16);
  return dt == DType::BF16 ? bf16 : f16;
}

::testing::AssertionResult no_growth(const char* what, const Tensor& got, const Tensor& want, double local) {
  const double e = err(got, want);
  const double floor = 32 * test::kEps32 * std::max(1.0, test::max_abs(want));
  if (e <= 2 * local + floor) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << ": distributed 16-bit error " << e << " > 2 × single-process " << local << " + " << floor;
}

void run_case(DistConfig cfg, const Reference& ref) {
  const DType dt = ref.dtype;
  cfg.isa = ref.isa;
  SCOPED_TRACE(std::string("strategy=") + to_string(cfg.strategy) + " layout=" + to_string(cfg.layout) + " " +
               to_string(dt) + " isa=" + to_string(cfg.isa));
  const Communicator world = Communicator::world();
  ProblemShape shape{1, kS, kH, kHkv, kD};
  shape.dtype = dt;
  DistAttention attn(world, cfg, shape, ref.mask);
  const int rank = world.rank();
  const auto r = static_cast<std::size_t>(rank);
  const SequenceLayout& layout = attn.plan().layout();
  Rounded q = round_to(test::shard_of(layout, rank, ref.q), dt),
          k = round_to(test::shard_of(layout, rank, ref.k), dt);
  Rounded v = round_to(test::shard_of(layout, rank, ref.v), dt),
          dout = round_to(test::shard_of(layout, rank, ref.dout), dt);
  Rounded out = empty_rounded(q.wide.shape(), dt), dq = empty_rounded(q.wide.shape(), dt);
  Rounded dk = empty_rounded(k.wide.shape(), dt), dv = empty_rounded(k.wide.shape(), dt);
  Tensor lse({1, kH, attn.local_length()});
  attn.forward(q.view, k.view, v.view, out.view, lse.view());
  widen_into(out);
  EXPECT_TRUE(no_growth("out", out.wide, test::shard_of(layout, rank, ref.out), ref.local[0]));
  EXPECT_TRUE(test::dist_close("lse", lse, test::rows_of(layout, rank, ref.lse), ref.lse_tol, ref.lse_local));
  EXPECT_EQ(attn.last_stats().bytes_sent, attn.plan().forward().bytes_sent[r]) << "forward bytes";
  attn.backward(dout.view, q.view, k.view, v.view, out.view, lse.view(), dq.view, dk.view, dv.view);
  for (Rounded* h : {&dq, &dk, &dv}) widen_into(*h);
  EXPECT_TRUE(no_growth("dq", dq.wide, test::shard_of(layout, rank, ref.dq), ref.local[1]));
  EXPECT_TRUE(no_growth("dk", dk.wide, test::shard_of(layout, rank, ref.dk), ref.local[2]));
  EXPECT_TRUE(no_growth("dv", dv.wide, test::shard_of(layout, rank, ref.dv), ref.local[3]));
  EXPECT_EQ(attn.last_stats().bytes_sent, attn.plan().backward().bytes_sent[r]) << "backward bytes";
}

// Planned bytes are sent bytes when 16-bit messages hold an odd number of elements — on the old
// fp32-typed wire such messages were rounded up to whole 4-byte words: bf16 write partials of odd
// length (burst, ring), DistFlashAttn's Q chunk, Ulysses' Q, K, V and dO segments. S = 12, D = 3:
// at P = 4 every rank holds 3 tokens, so 3·H·D is odd for H = 1 (and per Ulysses member at H = 4).
TEST(StrategiesBf16, PlannedBytesAreSentBytesAtOddElementCounts) {
  const Communicator world = Communicator::world();
  const int P = world.size();
  struct Case {
    StrategyKind strategy;
    LayoutKind layout;
    std::int64_t H;
    DType partials;
    BackwardSide side;
    int saved;
  };
  const std::vector<Case> cases = {
      {StrategyKind::Burst, LayoutKind::Contiguous, 1, DType::BF16, BackwardSide::QuerySide, 1},
      {StrategyKind::Burst, LayoutKind::Contiguous, 1, DType::BF16, BackwardSide::KvSide, 1},
      {StrategyKind::Ring, LayoutKind::Striped, 1, DType::BF16, BackwardSide::Auto, 1},
      {StrategyKind::DistFlash, LayoutKind::Contiguous, 1, DType::F32, BackwardSide::Auto, 1},
      {StrategyKind::AllGather, LayoutKind::Contiguous, 1, DType::F32, BackwardSide::Auto, 1},
      {StrategyKind::Ulysses, LayoutKind::Contiguous, 4, DType::F32, BackwardSide::Auto, 1},
      {StrategyKind::Ulysses, LayoutKind::Contiguous, 4, DType::F32, BackwardSide::Auto, 0},
      {StrategyKind::HeadParallel, LayoutKind::Contiguous, 4, DType::F32, BackwardSide::Auto, 1}};
  for (const Case& c : cases) {
    if (c.H % P != 0 && (c.strategy == StrategyKind::Ulysses || c.strategy == StrategyKind::HeadParallel))
      continue;  // the head split needs H % P == 0
    SCOPED_TRACE(std::string(to_string(c.strategy)) + " saved=" + std::to_string(c.saved));
    DistConfig cfg;
    cfg.strategy = c.strategy;
    cfg.layout = c.layout;
    cfg.partials_dtype = c.partials;
    cfg.backward_side = c.side;
    cfg.saved_contexts = c.saved;
    cfg.num_threads = 1;
    ProblemShape shape{1, 12, c.H, c.H, 3};
    shape.dtype = DType::BF16;
    // Full (every block moves) except distflash, which needs a causal-like mask.
    const Mask mask = c.strategy == StrategyKind::DistFlash ? Mask::causal_mask() : Mask::full();
    DistAttention attn(world, cfg, shape, mask);
    const std::int64_t S = attn.local_length();
    const Rounded q = round_to(test::random_tensor({1, S, c.H, 3}, 11), DType::BF16),
                  k = round_to(test::random_tensor({1, S, c.H, 3}, 12), DType::BF16),
                  v = round_to(test::random_tensor({1, S, c.H, 3}, 13), DType::BF16),
                  dout = round_to(test::random_tensor({1, S, c.H, 3}, 14), DType::BF16);
    Rounded out = empty_rounded({1, S, c.H, 3}, DType::BF16), dq = empty_rounded({1, S, c.H, 3}, DType::BF16);
    Rounded dk = empty_rounded({1, S, c.H, 3}, DType::BF16), dv = empty_rounded({1, S, c.H, 3}, DType::BF16);
    Tensor lse({1, c.H, S});
    const auto r = static_cast<std::size_t>(world.rank());
    attn.forward(q.view, k.view, v.view, out.view, lse.view());
    EXPECT_EQ(attn.last_stats().bytes_sent, attn.plan().forward().bytes_sent[r]) << "forward bytes";
    attn.backward(dout.view, q.view, k.view, v.view, out.view, lse.view(), dq.view, dk.view, dv.view);
    EXPECT_EQ(attn.last_stats().bytes_sent, attn.plan().backward().bytes_sent[r]) << "backward bytes";
    if (P != 4) continue;
    // The exact bytes by hand at P = 4 (3 tokens a rank; the old word rounding gave 260 and 312).
    // Burst's query side: 3 hops of Q, dO (9 bf16 each), delta, lse (3 fp32 each); 4 of dQ (9 bf16).
    if (c.strategy == StrategyKind::Burst && c.side == BackwardSide::QuerySide) {
      EXPECT_EQ(attn.plan().backward().bytes_sent[r], 3 * (2 * 2 * 9 + 4 * 2 * 3) + 4 * 2 * 9);
    }
    // Ulysses: Q, K, V (27 bf16) to each of 3 members, O and lse (3 tokens · (3 + 1) fp32) back.
    if (c.strategy == StrategyKind::Ulysses && c.saved == 1) {
      EXPECT_EQ(attn.plan().forward().bytes_sent[r], 3 * (2 * 27) + 3 * 4 * 3 * (3 + 1));
    }
  }
}

TEST(StrategiesBf16, EveryStrategyErrorDoesNotGrowWithP) {
  const std::vector<std::pair<StrategyKind, LayoutKind>> cases = {
      {StrategyKind::Burst, LayoutKind::Zigzag},
      {StrategyKind::Burst, LayoutKind::Contiguous},
      {StrategyKind::Ring, LayoutKind::Striped},
      {StrategyKind::AllGather, LayoutKind::Contiguous},
      {StrategyKind::Ulysses, LayoutKind::Contiguous},
      {StrategyKind::Usp, LayoutKind::Zigzag},
      {StrategyKind::DistFlash, LayoutKind::Contiguous},
      {StrategyKind::HeadParallel, LayoutKind::Contiguous}};
  for (DType dt : {DType::BF16, DType::F16})
    for (const auto& [strategy, layout] : cases) {
      DistConfig cfg;
      cfg.strategy = strategy;
      cfg.layout = layout;
      cfg.num_threads = 1;
      run_case(cfg, reference(dt));
    }
}

// bf16 on the AMX path (tiles emulated here; the hardware where the CPU has AMX): the same
// no-growth bound at P = 1..4 for every strategy.
void amx_every_strategy(Isa isa) {
  const Reference ref = make_reference(DType::BF16, isa);
  const std::vector<std::pair<StrategyKind, LayoutKind>> cases = {
      {StrategyKind::Burst, LayoutKind::Zigzag},         {StrategyKind::Ring, LayoutKind::Striped},
      {StrategyKind::AllGather, LayoutKind::Contiguous}, {StrategyKind::Ulysses, LayoutKind::Contiguous},
      {StrategyKind::Usp, LayoutKind::Zigzag},           {StrategyKind::DistFlash, LayoutKind::Contiguous}};
  for (const auto& [strategy, layout] : cases) {
    DistConfig cfg;
    cfg.strategy = strategy;
    cfg.layout = layout;
    cfg.num_threads = 1;
    run_case(cfg, ref);
  }
}

TEST(StrategiesBf16, AmxEmulatedErrorDoesNotGrowWithP) {
  if (!isa_available(Isa::AmxEmulated)) GTEST_SKIP() << "the emulated AMX tiles need AVX2+FMA+F16C";
  amx_every_strategy(Isa::AmxEmulated);
}

TEST(StrategiesBf16, AmxHardwareErrorDoesNotGrowWithP) {
  if (!isa_available(Isa::Amx))
    GTEST_SKIP() << "no usable AMX on this CPU (CPUID, OS tile state or permission)";
  amx_every_strategy(Isa::Amx);
}

TEST(StrategiesBf16, BurstBothBackwardSides) {
  for (BackwardSide side : {BackwardSide::QuerySide, BackwardSide::KvSide}) {
    DistConfig cfg;
    cfg.strategy = StrategyKind::Burst;
    cfg.backward_side = side;
    cfg.num_threads = 1;
    run_case(cfg, reference(DType::BF16));
  }
}

// One rank passes an f32 k to a bf16 plan: every rank throws the same InvalidArgument before any
// payload moves (the façade's checks are agreed over ranks).
// An ISA this CPU cannot run (AMX here when absent or refused) is refused on every rank with the
// same verdict at set-up, before any message.
TEST(StrategiesBf16, UnavailableIsaFailsOnEveryRank) {
  if (isa_available(Isa::Amx)) GTEST_SKIP() << "this CPU runs AMX: no unavailable ISA above it to request";
  ProblemShape shape{1, kS, kH, kHkv, kD};
  shape.dtype = DType::BF16;
  DistConfig cfg;
  cfg.strategy = StrategyKind::Burst;
  cfg.isa = Isa::Amx;
  try {
    DistAttention attn(Communicator::world(), cfg, shape, Mask::causal_mask());
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported) << e.what();
    EXPECT_NE(std::string(e.what()).find("isa=amx"), std::string::npos) << e.what();
  }
}

TEST(StrategiesBf16, MixedDtypesFailOnEveryRank) {
  const Communicator world = Communicator::world();
  ProblemShape shape{1, kS, kH, kHkv, kD};
  shape.dtype = DType::BF16;
  DistConfig cfg;
  cfg.strategy = StrategyKind::Burst;
  DistAttention attn(world, cfg, shape, Mask::causal_mask());
  const std::int64_t n = attn.local_length();
  Rounded q = empty_rounded({1, n, kH, kD}, DType::BF16), k = empty_rounded({1, n, kHkv, kD}, DType::BF16);
  Rounded v = empty_rounded({1, n, kHkv, kD}, DType::BF16), out = empty_rounded({1, n, kH, kD}, DType::BF16);
  Tensor k32({1, n, kHkv, kD}), lse({1, kH, n});
  const bool bad = world.rank() == world.size() - 1;
  try {
    attn.forward(q.view, bad ? k32.view() : k.view, v.view, out.view, lse.view());
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument) << e.what();
    EXPECT_NE(std::string(e.what()).find("k has dtype f32 but the problem's dtype"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(attn.last_stats().bytes_sent, 0);
}

// 16-bit K, V halve the forward bytes of the ring family: (P − 1)·2·b_kv·2 instead of ·4.
TEST(StrategiesBf16, RingFamilyBytesPerDtype) {
  const int P = Communicator::world().size();
  ProblemShape shape{1, kS, kH, kHkv, kD};
  DistConfig cfg;
  cfg.strategy = StrategyKind::Burst;
  const Plan f32 = Plan::make(cfg, shape, Mask::causal_mask(), P, P);
  shape.dtype = DType::BF16;
  const Plan bf16 = Plan::make(cfg, shape, Mask::causal_mask(), P, P);
  const std::int64_t b_kv = kS / P * kHkv * kD;
  for (int g = 0; g < P; ++g) {
    const auto u = static_cast<std::size_t>(g);
    EXPECT_EQ(f32.forward().bytes_sent[u], 4 * (P - 1) * 2 * b_kv);
    EXPECT_EQ(bf16.forward().bytes_sent[u], 2 * (P - 1) * 2 * b_kv);
  }
  // allgather: K, V gathered in 16 bits, dK, dV reduce-scattered in fp32.
  cfg.strategy = StrategyKind::AllGather;
  cfg.layout = LayoutKind::Contiguous;
  const Plan ag = Plan::make(cfg, shape, Mask::causal_mask(), P, P);
  for (int g = 0; g < P; ++g) {
    const auto u = static_cast<std::size_t>(g);
    EXPECT_EQ(ag.forward().bytes_sent[u], 2 * (P - 1) * 2 * b_kv);
    EXPECT_EQ(ag.backward().bytes_sent[u], 2 * (P - 1) * 2 * b_kv + 4 * (P - 1) * 2 * b_kv);
  }
}

// Ulysses keeps Q, K, V, dO in 16 bits through its all-to-alls, on both backward paths: the
// saved context (DeepSpeed's; the 16-bit forward's context is keyed by its rounded output, which
// the backward passes back) and the stateless one (Q, dO, K, V, lse, delta moved).
TEST(StrategiesBf16, UlyssesSavedAndStatelessBackward) {
  for (int slots : {1, 0}) {
    DistConfig cfg;
    cfg.strategy = StrategyKind::Ulysses;
    cfg.saved_contexts = slots;
    cfg.num_threads = 1;
    run_case(cfg, reference(DType::BF16));
  }
}

// usp moves Q, K, V, dO in 16 bits through its all-to-alls and its ring (K, V; Burst-USP's Q, dO),
// on both backward paths (a 16-bit forward's saved context is keyed by its rounded output, as
// ulysses'), with either ring; P > 1 with ulysses_degree 1 is the ring alone.
TEST(StrategiesBf16, UspSavedStatelessAndRings) {
  const int P = Communicator::world().size();
  for (int slots : {1, 0})
    for (UspRing ring : {UspRing::Ring, UspRing::Burst})
      for (int u : {0, 1}) {
        if (u == 1 && P == 1) continue;
        DistConfig cfg;
        cfg.strategy = StrategyKind::Usp;
        cfg.saved_contexts = slots;
        cfg.usp_ring = ring;
        cfg.ulysses_degree = u;
        cfg.num_threads = 1;
        run_case(cfg, reference(DType::BF16));
      }
}

// Per-dtype bytes of usp and headpar, by hand (equal contiguous shards s = S/P): Q, K, V, dO at e
// bytes per element; out, lse, delta and every gradient or partial in fp32. A test that fails if
// either widens its 16-bit payloads again.
TEST(StrategiesBf16, UspAndHeadparBytesPerDtype) {
  const std::int64_t P = Communicator::world().size(), s = kS / P;
  ProblemShape shape{1, kS, kH, kHkv, kD};
  for (DType dt : {DType::F32, DType::BF16}) {
    shape.dtype = dt;
    const std::int64_t e = dt == DType::F32 ? 4 : 2;
    DistConfig cfg;
    cfg.layout = LayoutKind::Contiguous;
    cfg.strategy = StrategyKind::HeadParallel;
    const Plan hp = Plan::make(cfg, shape, Mask::causal_mask(), static_cast<int>(P), static_cast<int>(P));
    // usp with u = 1: the K,V ring alone (one node of P: the last dK, dV hop goes home).
    cfg.strategy = StrategyKind::Usp;
    cfg.ulysses_degree = 1;
    const Plan ring = Plan::make(cfg, shape, Mask::causal_mask(), static_cast<int>(P), static_cast<int>(P));
    cfg.usp_ring = UspRing::Burst;
    const Plan burst = Plan::make(cfg, shape, Mask::causal_mask(), static_cast<int>(P), static_cast<int>(P));
    const std::int64_t hops = P - 1, homes = P > 1 ? P : 0;
    for (std::size_t g = 0; g < static_cast<std::size_t>(P); ++g) {
      EXPECT_EQ(hp.forward().bytes_sent[g], hops * (e * s * (kH + 2 * kHkv) * kD + 4 * s * kH * (kD + 1)))
          << "all-gather Q, K, V; reduce-scatter O, lse";
      EXPECT_EQ(hp.backward().bytes_sent[g],
                hops * (s * (e * (2 * kH + 2 * kHkv) * kD + 4 * 2 * kH) + 4 * s * (kH + 2 * kHkv) * kD))
          << "all-gather Q, dO, K, V, lse, delta; reduce-scatter dQ, dK, dV";
      EXPECT_EQ(ring.forward().bytes_sent[g], hops * e * 2 * s * kHkv * kD) << "K, V ring";
      EXPECT_EQ(ring.backward().bytes_sent[g], hops * e * 2 * s * kHkv * kD + homes * 4 * 2 * s * kHkv * kD)
          << "K, V ring + dK, dV partials";
      EXPECT_EQ(burst.backward().bytes_sent[g], hops * s * kH * (2 * e * kD + 8) + homes * 4 * s * kH * kD)
          << "Burst-USP: Q, dO, delta, lse ring + dQ partials";
    }
  }
}

// Per-dtype bytes of ulysses and distflash, by hand: Q, K, V, dO at e bytes per element, out,
// lse, delta and the gradients in fp32. Equal contiguous shards s = S/P, h = H/P, k = H_kv/P.
TEST(StrategiesBf16, UlyssesAndDistFlashBytesPerDtype) {
  const std::int64_t P = Communicator::world().size();
  ProblemShape shape{1, kS, kH, kHkv, kD};
  DistConfig cfg;
  cfg.strategy = StrategyKind::Ulysses;
  cfg.layout = LayoutKind::Contiguous;
  const std::int64_t s = kS / P, h = kH / P, k = kHkv / P;
  for (DType dt : {DType::F32, DType::BF16}) {
    shape.dtype = dt;
    const std::int64_t e = dt == DType::F32 ? 4 : 2;
    const Plan plan = Plan::make(cfg, shape, Mask::causal_mask(), static_cast<int>(P), static_cast<int>(P));
    for (std::size_t g = 0; g < static_cast<std::size_t>(P); ++g) {
      EXPECT_EQ(plan.forward().bytes_sent[g], (P - 1) * (e * s * (h + 2 * k) * kD + 4 * s * h * (kD + 1)));
      EXPECT_EQ(plan.backward().bytes_sent[g], (P - 1) * (e * s * h * kD + 4 * s * (h + 2 * k) * kD))
          << "saved-context backward: dO in, dQ, dK, dV out";
    }
  }
  // distflash: every input payload halves in bf16, the returned partials do not (a rank that
  // only returns partials sends as much as in fp32).
  cfg.strategy = StrategyKind::DistFlash;
  shape.dtype = DType::F32;
  const Plan f32 = Plan::make(cfg, shape, Mask::causal_mask(), static_cast<int>(P), static_cast<int>(P));
  shape.dtype = DType::BF16;
  const Plan bf16 = Plan::make(cfg, shape, Mask::causal_mask(), static_cast<int>(P), static_cast<int>(P));
  std::int64_t sum16 = 0, sum32 = 0;
  for (std::size_t g = 0; g < static_cast<std::size_t>(P); ++g) {
    EXPECT_LE(bf16.forward().bytes_sent[g], f32.forward().bytes_sent[g]);
    EXPECT_LE(bf16.backward().bytes_sent[g], f32.backward().bytes_sent[g]);
    EXPECT_GE(2 * bf16.forward().bytes_sent[g], f32.forward().bytes_sent[g]);  // never below half
    sum16 += bf16.forward().bytes_sent[g] + bf16.backward().bytes_sent[g];
    sum32 += f32.forward().bytes_sent[g] + f32.backward().bytes_sent[g];
  }
  if (P > 1) { EXPECT_LT(sum16, sum32); }
}

}  // namespace
}  // namespace burst
