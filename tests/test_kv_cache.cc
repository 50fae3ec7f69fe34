// DistKVCache under mpiexec -n 1..4: decode against the single-process fp64 oracle over the
// whole cache (GQA, a batch of unequal lengths, appends crossing ranks, 1 and several query rows,
// causal and not, Tiled and Reference partial kernels, chunks of 64 tokens so every sequence
// spans several); prefill through DistAttention then decode equals a full causal forward over the
// same tokens; the append policies keep ranks within one token; thread-count invariance; bytes
// per call independent of the context; bad input throws on every rank and leaves the cache
// unchanged. Tolerances: test_util.h's rule (naive fp32 vs fp64 on the same problem).
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "burst/attention.h"
#include "burst/comm.h"
#include "burst/error.h"
#include "burst/kv_cache.h"
#include "burst/strategy.h"
#include "dist_test_util.h"
#include "test_util.h"

namespace burst {
namespace {

constexpr std::int64_t kD = 16;

KVCacheConfig config(std::int64_t H, std::int64_t H_kv, KernelImpl impl = KernelImpl::Tiled) {
  KVCacheConfig c;
  c.H = H;
  c.H_kv = H_kv;
  c.D = kD;
  c.capacity_per_rank = 100000;
  c.chunk_tokens = 64;
  c.kernel = impl;
  c.num_threads = 2;
  return c;
}

// Global K/V of one sequence, token-major [L, H_kv, D], as the test appended it.
struct Seq {
  std::vector<float> k, v;
};

// The values a cache of `dtype` holds for fp32 input x (bf16: rounded to nearest even).
float stored(DType dtype, float x) { return dtype == DType::BF16 ? bf16_to_float(bf16_from_float(x)) : x; }

// Appends `n` random tokens to every sequence (the same values on every rank); seqs records what
// the cache holds (rounded for a bf16 cache: the oracle sees the rounded inputs).
void append_random(DistKVCache& cache, const std::vector<std::int64_t>& ids, std::vector<Seq>& seqs,
                   std::int64_t n, std::uint64_t seed) {
  const std::int64_t B = static_cast<std::int64_t>(ids.size()), H_kv = cache.config().H_kv;
  Tensor k = test::random_tensor({B, n, H_kv, kD}, seed), v = test::random_tensor({B, n, H_kv, kD}, seed + 1);
  cache.append(ids, k.view(), v.view());
  for (float& x : k.vec()) x = stored(cache.config().dtype, x);
  for (float& x : v.vec()) x = stored(cache.config().dtype, x);
  const std::int64_t row = n * H_kv * kD;
  for (std::int64_t b = 0; b < B; ++b) {
    auto& s = seqs[static_cast<std::size_t>(b)];
    s.k.insert(s.k.end(), k.data() + b * row, k.data() + (b + 1) * row);
    s.v.insert(s.v.end(), v.data() + b * row, v.data() + (b + 1) * row);
  }
}

// fp64 oracle of one sequence's decode rows and the naive fp32 error (the tolerance rule).
struct Expected {
  Tensor out, lse;
  double tol_out, tol_lse;
};
Expected expected(const Tensor& q_b, const Seq& s, std::int64_t H_kv, bool causal) {
  const std::int64_t L = static_cast<std::int64_t>(s.k.size()) / (H_kv * kD), S_q = q_b.shape()[1];
  Tensor k({1, L, H_kv, kD}), v({1, L, H_kv, kD});
  std::copy(s.k.begin(), s.k.end(), k.data());
  std::copy(s.v.begin(), s.v.end(), v.data());
  std::vector<std::int64_t> qp;
  for (std::int64_t i = 0; i < S_q; ++i) qp.push_back(L - S_q + i);
  AttentionParams p;
  p.impl = KernelImpl::Reference;
  if (causal) p.mask = Mask::causal_mask();
  p.q_positions = qp.data();
  p.seq_q_global = p.seq_kv_global = L;
  AttentionOutput r = attention_forward(q_b.view(), k.view(), v.view(), p);
  const AttentionOutput n = test::naive_fp32_forward(q_b, k, v, p);
  const double tol_out = test::tolerance(test::max_abs_diff(n.out, r.out), test::max_abs(r.out));
  const double tol_lse = test::tolerance(test::max_abs_diff(n.lse, r.lse), test::max_abs(r.lse));
  return {std::move(r.out), std::move(r.lse), tol_out, tol_lse};
}

// Decodes S_q random rows per sequence and checks every sequence against the oracle.
void check_decode(DistKVCache& cache, const std::vector<std::int64_t>& ids, const std::vector<Seq>& seqs,
                  std::int64_t S_q, bool causal, std::uint64_t seed) {
  const std::int64_t B = static_cast<std::int64_t>(ids.size()), H = cache.config().H,
                     H_kv = cache.config().H_kv;
  Tensor q = test::random_tensor({B, S_q, H, kD}, seed), out({B, S_q, H, kD}), lse({B, H, S_q});
  cache.decode(ids, q.view(), out.view(), lse.view(), causal);
  for (std::int64_t b = 0; b < B; ++b) {
    Tensor q_b({1, S_q, H, kD}), out_b({1, S_q, H, kD}), lse_b({1, H, S_q});
    std::copy(q.data() + b * q_b.numel(), q.data() + (b + 1) * q_b.numel(), q_b.data());
    std::copy(out.data() + b * out_b.numel(), out.data() + (b + 1) * out_b.numel(), out_b.data());
    std::copy(lse.data() + b * lse_b.numel(), lse.data() + (b + 1) * lse_b.numel(), lse_b.data());
    const Expected e = expected(q_b, seqs[static_cast<std::size_t>(b)], H_kv, causal);
    EXPECT_LE(test::max_abs_diff(out_b, e.out), e.tol_out)
        << "sequence " << b << " S_q=" << S_q << " causal=" << causal;
    EXPECT_LE(test::max_abs_diff(lse_b, e.lse), e.tol_lse) << "sequence " << b << " S_q=" << S_q;
  }
}

struct Case {
  std::int64_t H, H_kv;
  KernelImpl impl;
  AppendPolicy policy;
  DType dtype = DType::F32;
};

// bf16 cases: the cache rounds K/V once when storing; decode is exact attention over the rounded
// K/V, so the oracle runs on the rounded values with the fp32 tolerance rule.
TEST(KVCache, DecodeMatchesFp64OverUnequalLengthsAndCrossRankAppends) {
  const Communicator comm = Communicator::world();
  for (const Case c : {Case{4, 2, KernelImpl::Tiled, AppendPolicy::LeastLoaded},
                       Case{2, 2, KernelImpl::Tiled, AppendPolicy::RoundRobin},
                       Case{6, 1, KernelImpl::Reference, AppendPolicy::LeastLoaded},
                       Case{4, 2, KernelImpl::Tiled, AppendPolicy::LeastLoaded, DType::BF16},
                       Case{6, 1, KernelImpl::Reference, AppendPolicy::RoundRobin, DType::BF16}}) {
    KVCacheConfig cfg = config(c.H, c.H_kv, c.impl);
    cfg.policy = c.policy;
    cfg.dtype = c.dtype;
    DistKVCache cache(comm, cfg);
    std::vector<std::int64_t> ids{7, 3, 11};
    std::vector<Seq> seqs(3);
    // Unequal lengths: sequence 3 gets a long first append, 11 joins late; appends of 1..70 tokens.
    append_random(cache, {7, 3}, seqs, 5, 10);
    std::vector<Seq> one(1);
    append_random(cache, {3}, one, 130, 12);
    seqs[1].k.insert(seqs[1].k.end(), one[0].k.begin(), one[0].k.end());
    seqs[1].v.insert(seqs[1].v.end(), one[0].v.begin(), one[0].v.end());
    append_random(cache, ids, seqs, 1, 13);
    append_random(cache, ids, seqs, 70, 14);
    EXPECT_EQ(cache.length(7), 76);
    EXPECT_EQ(cache.length(3), 206);
    EXPECT_EQ(cache.length(11), 71);
    for (auto id : ids) {
      const auto counts = cache.rank_lengths(id);
      EXPECT_LE(
          *std::max_element(counts.begin(), counts.end()) - *std::min_element(counts.begin(), counts.end()),
          1)
          << "sequence " << id << " policy " << to_string(c.policy);
      EXPECT_EQ(static_cast<std::int64_t>(cache.local_positions(id).size()),
                counts[static_cast<std::size_t>(comm.rank())]);
    }
    for (std::int64_t S_q : {1, 3})
      for (bool causal : {true, false}) check_decode(cache, ids, seqs, S_q, causal, 100 + S_q);
    // A batch that is a subset, in another order.
    check_decode(cache, {11, 3}, {seqs[2], seqs[1]}, 2, true, 200);
  }
}

TEST(KVCache, LocalShardHoldsTheAppendedRows) {
  const Communicator comm = Communicator::world();
  DistKVCache cache(comm, config(2, 1));
  std::vector<Seq> seqs(1);
  append_random(cache, {0}, seqs, 150, 21);
  std::vector<float> k, v;
  cache.local_kv(0, k, v);
  const auto pos = cache.local_positions(0);
  ASSERT_EQ(k.size(), pos.size() * kD);
  for (std::size_t i = 0; i < pos.size(); ++i)
    for (std::int64_t d = 0; d < kD; ++d) {
      const auto g = static_cast<std::size_t>(pos[i] * kD + d);
      ASSERT_EQ(k[i * kD + static_cast<std::size_t>(d)], seqs[0].k[g]);
      ASSERT_EQ(v[i * kD + static_cast<std::size_t>(d)], seqs[0].v[g]);
    }
}

TEST(KVCache, PrefillThroughStrategiesThenDecodeEqualsFullForward) {
  const Communicator comm = Communicator::world();
  constexpr std::int64_t S0 = 96, extra = 5, H = 4, H_kv = 2, S = S0 + extra;
  const Tensor q = test::random_tensor({1, S, H, kD}, 31), k = test::random_tensor({1, S, H_kv, kD}, 32),
               v = test::random_tensor({1, S, H_kv, kD}, 33);
  AttentionParams p;
  p.impl = KernelImpl::Reference;
  p.mask = Mask::causal_mask();
  const AttentionOutput full = attention_forward(q.view(), k.view(), v.view(), p);
  const AttentionOutput naive = test::naive_fp32_forward(q, k, v, p);
  const double tol = test::tolerance(test::max_abs_diff(naive.out, full.out), test::max_abs(full.out));
  for (auto [strategy, layout] : {std::pair{StrategyKind::Burst, LayoutKind::Zigzag},
                                  std::pair{StrategyKind::Ring, LayoutKind::Contiguous},
                                  std::pair{StrategyKind::Ulysses, LayoutKind::Contiguous}}) {
    if (strategy == StrategyKind::Ulysses && H_kv % comm.size() != 0) continue;
    DistConfig dc;
    dc.strategy = strategy;
    dc.layout = layout;
    dc.num_threads = 1;
    // The prefill: a distributed causal forward over the first S0 tokens, whose local K/V go
    // into the cache exactly where the layout put them.
    Tensor q0({1, S0, H, kD}), k0({1, S0, H_kv, kD}), v0({1, S0, H_kv, kD});
    std::copy(q.data(), q.data() + q0.numel(), q0.data());
    std::copy(k.data(), k.data() + k0.numel(), k0.data());
    std::copy(v.data(), v.data() + v0.numel(), v0.data());
    DistAttention dist(comm, dc, {1, S0, H, H_kv, kD}, Mask::causal_mask());
    const auto& layout_plan = dist.plan().layout();
    const Tensor ql = test::shard_of(layout_plan, comm.rank(), q0),
                 kl = test::shard_of(layout_plan, comm.rank(), k0),
                 vl = test::shard_of(layout_plan, comm.rank(), v0);
    Tensor ol(ql.shape()), lsel({1, H, dist.local_length()});
    dist.forward(ql.view(), kl.view(), vl.view(), ol.view(), lsel.view());
    DistKVCache cache(comm, config(H, H_kv));
    cache.prefill({0}, kl.view(), vl.view(), dist.positions(), S0);
    EXPECT_EQ(cache.local_positions(0), dist.positions());
    // Decode the remaining tokens one at a time: append the token's K/V, then attend its query.
    for (std::int64_t t = S0; t < S; ++t) {
      Tensor kt({1, 1, H_kv, kD}), vt({1, 1, H_kv, kD}), qt({1, 1, H, kD}), ot({1, 1, H, kD}), lt({1, H, 1});
      std::copy(k.data() + t * H_kv * kD, k.data() + (t + 1) * H_kv * kD, kt.data());
      std::copy(v.data() + t * H_kv * kD, v.data() + (t + 1) * H_kv * kD, vt.data());
      std::copy(q.data() + t * H * kD, q.data() + (t + 1) * H * kD, qt.data());
      cache.append({0}, kt.view(), vt.view());
      cache.decode({0}, qt.view(), ot.view(), lt.view());
      EXPECT_LE(test::max_abs_diff(ot.data(), full.out.data() + t * H * kD, H * kD), tol)
          << to_string(strategy) << " token " << t;
    }
    const auto counts = cache.rank_lengths(0);
    EXPECT_LE(
        *std::max_element(counts.begin(), counts.end()) - *std::min_element(counts.begin(), counts.end()), 1);
  }
}

// decode(ids, k_new, v_new, q, ...) — one agreement — equals append then decode bit for bit, and
// a bf16 cache keeps exactly half the bytes of an f32 one and holds the rounded rows.
TEST(KVCache, FusedAppendDecodeEqualsAppendThenDecodeAndBf16HalvesTheBytes) {
  const Communicator comm = Communicator::world();
  constexpr std::int64_t H = 4, H_kv = 2, B = 2;
  for (DType dtype : {DType::F32, DType::BF16}) {
    KVCacheConfig cfg = config(H, H_kv);
    cfg.dtype = dtype;
    DistKVCache split(comm, cfg), fused(comm, cfg);
    std::vector<Seq> seqs(B), unused(B);
    append_random(split, {0, 1}, seqs, 150, 71);
    append_random(fused, {0, 1}, unused, 150, 71);
    for (std::int64_t step = 0; step < 3; ++step) {
      const Tensor k = test::random_tensor({B, 2, H_kv, kD}, 80 + 3 * static_cast<std::uint64_t>(step)),
                   v = test::random_tensor({B, 2, H_kv, kD}, 81 + 3 * static_cast<std::uint64_t>(step)),
                   q = test::random_tensor({B, 2, H, kD}, 82 + 3 * static_cast<std::uint64_t>(step));
      Tensor o1({B, 2, H, kD}), l1({B, H, 2}), o2({B, 2, H, kD}), l2({B, H, 2});
      split.append({0, 1}, k.view(), v.view());
      split.decode({0, 1}, q.view(), o1.view(), l1.view());
      fused.decode({0, 1}, k.view(), v.view(), q.view(), o2.view(), l2.view());
      EXPECT_EQ(test::max_abs_diff(o1, o2), 0.0) << to_string(dtype) << " step " << step;
      EXPECT_EQ(test::max_abs_diff(l1, l2), 0.0) << to_string(dtype) << " step " << step;
      EXPECT_EQ(split.rank_lengths(1), fused.rank_lengths(1));
    }
    std::vector<float> k, v;
    fused.local_kv(0, k, v);
    const auto pos = fused.local_positions(0);
    for (std::size_t i = 0; i < pos.size() && pos[i] < 150; ++i)
      for (std::int64_t e = 0; e < H_kv * kD; ++e)
        ASSERT_EQ(k[i * H_kv * kD + static_cast<std::size_t>(e)],
                  seqs[0].k[static_cast<std::size_t>(pos[i] * H_kv * kD + e)]);
  }
  KVCacheConfig c32 = config(H, H_kv), c16 = config(H, H_kv);
  c16.dtype = DType::BF16;
  DistKVCache a(comm, c32), b(comm, c16);
  std::vector<Seq> sa(1), sb(1);
  append_random(a, {0}, sa, 300, 90);
  append_random(b, {0}, sb, 300, 90);
  EXPECT_EQ(2 * b.local_bytes(), a.local_bytes());
  const Tensor q = test::random_tensor({1, 1, H, kD}, 91);
  Tensor oa({1, 1, H, kD}), la({1, H, 1}), ob({1, 1, H, kD}), lb({1, H, 1});
  a.decode({0}, q.view(), oa.view(), la.view());
  b.decode({0}, q.view(), ob.view(), lb.view());
  EXPECT_EQ(2 * b.last_stats().kv_bytes_read, a.last_stats().kv_bytes_read);
  EXPECT_GT(test::max_abs_diff(oa, ob), 0.0);  // the bf16 cache really holds rounded rows
}

TEST(KVCache, ThreadCountInvariantAndBytesIndependentOfContext) {
  const Communicator comm = Communicator::world();
  constexpr std::int64_t H = 4, H_kv = 2, B = 2, S_q = 2;
  std::vector<Tensor> outs;
  std::vector<std::int64_t> bytes;
  for (int threads : {1, 2}) {
    KVCacheConfig cfg = config(H, H_kv);
    cfg.num_threads = threads;
    DistKVCache cache(comm, cfg);
    std::vector<Seq> seqs(B);
    const Tensor q = test::random_tensor({B, S_q, H, kD}, 41);
    for (std::int64_t n : {100, 300}) {
      append_random(cache, {0, 1}, seqs, n, 40 + static_cast<std::uint64_t>(n));
      Tensor out({B, S_q, H, kD}), lse({B, H, S_q});
      cache.decode({0, 1}, q.view(), out.view(), lse.view());
      outs.push_back(std::move(out));
      bytes.push_back(cache.last_stats().bytes_sent);
    }
  }
  EXPECT_EQ(test::max_abs_diff(outs[0], outs[2]), 0.0);
  EXPECT_EQ(test::max_abs_diff(outs[1], outs[3]), 0.0);
  const std::int64_t P = comm.size();
  EXPECT_EQ(bytes[0], B * S_q * H * (kD + 1) * 4 * (P - 1));
  EXPECT_EQ(bytes[1], bytes[0]);
}

// Everything observable about the cache, to show a failed call changed nothing.
struct Snapshot {
  std::vector<std::int64_t> ids, lengths, positions;
  std::vector<float> k, v, out;
  bool operator==(const Snapshot&) const = default;
};
Snapshot snapshot(DistKVCache& cache) {
  Snapshot s;
  s.ids = cache.sequences();
  for (auto id : s.ids) {
    s.lengths.push_back(cache.length(id));
    const auto pos = cache.local_positions(id);
    s.positions.insert(s.positions.end(), pos.begin(), pos.end());
    std::vector<float> k, v;
    cache.local_kv(id, k, v);
    s.k.insert(s.k.end(), k.begin(), k.end());
    s.v.insert(s.v.end(), v.begin(), v.end());
  }
  const Tensor q = test::random_tensor({1, 1, cache.config().H, kD}, 51);
  Tensor out({1, 1, cache.config().H, kD}), lse({1, cache.config().H, 1});
  cache.decode({s.ids.front()}, q.view(), out.view(), lse.view());
  s.out = out.vec();
  return s;
}

template <typename F>
void expect_error_everywhere(const Communicator& comm, DistKVCache& cache, const char* what, F&& f,
                             const char* needle) {
  const Snapshot before = snapshot(cache);
  bool thrown = false;
  try {
    f();
  } catch (const Error& e) {
    thrown =
        e.kind() == ErrorKind::InvalidArgument && std::string(e.what()).find(needle) != std::string::npos;
    if (!thrown) ADD_FAILURE() << what << ": unexpected message " << e.what();
  }
  EXPECT_TRUE(thrown) << what << ": no error on rank " << comm.rank();
  EXPECT_TRUE(snapshot(cache) == before) << what << ": the cache changed";
}

TEST(KVCache, BadInputThrowsOnEveryRankAndLeavesTheCacheUnchanged) {
  const Communicator comm = Communicator::world();
  const std::int64_t P = comm.size();
  KVCacheConfig cfg = config(4, 2);
  cfg.capacity_per_rank = 40;
  DistKVCache cache(comm, cfg);
  std::vector<Seq> seqs(1);
  append_random(cache, {0}, seqs, 30, 61);
  const Tensor k1 = test::random_tensor({1, 1, 2, kD}, 62), k3 = test::random_tensor({1, 1, 3, kD}, 63);
  const Tensor big = test::random_tensor({1, 40 * P, 2, kD}, 64);
  expect_error_everywhere(
      comm, cache, "overflow", [&] { cache.append({0}, big.view(), big.view()); }, "overflow");
  expect_error_everywhere(
      comm, cache, "mismatched kv heads", [&] { cache.append({0}, k3.view(), k3.view()); }, "k_new");
  Tensor q5({1, 1, 5, kD}), o5({1, 1, 5, kD}), l5({1, 5, 1});
  expect_error_everywhere(
      comm, cache, "mismatched query heads", [&] { cache.decode({0}, q5.view(), o5.view(), l5.view()); },
      "q ");
  expect_error_everywhere(
      comm, cache, "fused call with mismatched query heads: nothing appended",
      [&] { cache.decode({0}, k1.view(), k1.view(), q5.view(), o5.view(), l5.view()); }, "q ");
  expect_error_everywhere(
      comm, cache, "fused call overflowing: nothing appended",
      [&] {
        Tensor qb({1, 40 * P, 4, kD}), ob({1, 40 * P, 4, kD}), lb({1, 4, 40 * P});
        cache.decode({0}, big.view(), big.view(), qb.view(), ob.view(), lb.view());
      },
      "overflow");
  Tensor q({1, 1, 4, kD}), o({1, 1, 4, kD}), l({1, 4, 1});
  expect_error_everywhere(
      comm, cache, "unknown id", [&] { cache.decode({9}, q.view(), o.view(), l.view()); },
      "unknown sequence id 9");
  expect_error_everywhere(
      comm, cache, "repeated id",
      [&] {
        cache.decode({0, 0}, q.view(), o.view(), l.view());
      },
      "distinct");
  const Tensor k5 = test::random_tensor({1, 5, 2, kD}, 66);
  const std::vector<std::int64_t> same_everywhere{0, 1, 2, 3, 4};
  expect_error_everywhere(
      comm, cache, "positions not a partition",
      [&] { cache.prefill({20}, k5.view(), k5.view(), same_everywhere, 5 * P + (P == 1)); }, "partition");
  if (P > 1) {
    expect_error_everywhere(
        comm, cache, "ids differ between ranks",
        [&] { cache.append({comm.rank() == 1 ? 5 : 0}, k1.view(), k1.view()); }, "differs between ranks");
    // A rank-inconsistent state: rank 1 alone gains a sequence (remove is message-free).
    append_random(cache, {8}, seqs, 1, 65);
    if (comm.rank() == 0) cache.remove(8);
    bool thrown = false;
    try {
      cache.decode({0}, q.view(), o.view(), l.view());
    } catch (const Error& e) { thrown = std::string(e.what()).find("cache state") != std::string::npos; }
    EXPECT_TRUE(thrown) << "inconsistent state not detected on rank " << comm.rank();
  }
}

// NaN and inf are refused (docs/api.md § NaN and inf) with the element and sequence id named, on
// every rank, the cache unchanged: in appended K or V (where, before, a NaN in the newest token's
// V made the causal decode rows before it NaN though they do not see it), in the fused call, in
// a decode's q, and in prefill rows that one rank alone holds (the agreed verdict reaches all).
TEST(KVCache, NonFiniteInputIsRefusedOnEveryRank) {
  const Communicator comm = Communicator::world();
  const std::int64_t P = comm.size();
  DistKVCache cache(comm, config(4, 2));
  std::vector<Seq> seqs(1);
  append_random(cache, {0}, seqs, 20, 71);
  Tensor k = test::random_tensor({1, 4, 2, kD}, 72), v = test::random_tensor({1, 4, 2, kD}, 73);
  v.data()[(3 * 2 + 1) * kD + 5] = std::numeric_limits<float>::quiet_NaN();  // token 3, head 1, d 5
  expect_error_everywhere(
      comm, cache, "NaN in v_new", [&] { cache.append({0}, k.view(), v.view()); }, "v_new holds a NaN");
  expect_error_everywhere(
      comm, cache, "NaN in v_new names the element", [&] { cache.append({0}, k.view(), v.view()); },
      "[0,3,1,5] (sequence id 0)");
  Tensor q({1, 4, 4, kD}), o({1, 4, 4, kD}), l({1, 4, 4});
  expect_error_everywhere(
      comm, cache, "fused call with NaN in v_new: nothing appended",
      [&] { cache.decode({0}, k.view(), v.view(), q.view(), o.view(), l.view()); }, "v_new holds a NaN");
  q.data()[7] = -std::numeric_limits<float>::infinity();
  expect_error_everywhere(
      comm, cache, "inf in q", [&] { cache.decode({0}, q.view(), o.view(), l.view()); }, "q holds a NaN");
  // Prefill: a NaN only in the last rank's rows; every rank gets the error.
  Tensor kp = test::random_tensor({1, 2, 2, kD}, 74);
  if (comm.rank() == P - 1) kp.data()[3] = std::numeric_limits<float>::quiet_NaN();
  const std::vector<std::int64_t> pos{2 * comm.rank(), 2 * comm.rank() + 1};
  expect_error_everywhere(
      comm, cache, "NaN in one rank's prefill rows",
      [&] { cache.prefill({30}, kp.view(), kp.view(), pos, 2 * P); }, "k_local holds a NaN");
}

TEST(KVCache, OperandOnAGpuIsNamedOnEveryRank) {
  const Communicator comm = Communicator::world();
  DistKVCache cache(comm, config(4, 2));
  std::vector<Seq> seqs(1);
  append_random(cache, {0}, seqs, 6, 71);
  const bool last = comm.rank() == comm.size() - 1;
  // A view marked as on cuda:1 on the last rank only, pointing at an address no host read survives.
  const auto on_gpu = [&](const Tensor& t) {
    TensorView v = t.view();
    if (last) {
      v.device = Device{DeviceKind::Cuda, 1};
      v.data = reinterpret_cast<void*>(std::uintptr_t{64});
    }
    return v;
  };
  const Tensor k1 = test::random_tensor({1, 1, 2, kD}, 72), q = test::random_tensor({1, 1, 4, kD}, 73);
  Tensor o({1, 1, 4, kD}), l({1, 4, 1});
  expect_error_everywhere(
      comm, cache, "append, v_new on a GPU", [&] { cache.append({0}, k1.view(), on_gpu(k1)); },
      "v_new is on cuda:1");
  expect_error_everywhere(
      comm, cache, "decode, out on a GPU", [&] { cache.decode({0}, q.view(), on_gpu(o), l.view()); },
      "out is on cuda:1");
  expect_error_everywhere(
      comm, cache, "fused decode, q on a GPU",
      [&] { cache.decode({0}, k1.view(), k1.view(), on_gpu(q), o.view(), l.view()); }, "q is on cuda:1");
  const Tensor k0({1, 0, 2, kD});  // an empty sequence: valid on the host
  expect_error_everywhere(
      comm, cache, "prefill, k_local on a GPU", [&] { cache.prefill({5}, on_gpu(k0), k0.view(), {}, 0); },
      "k_local is on cuda:1");
}

}  // namespace
}  // namespace burst
