// tests/dist_test_util.h — helpers shared by the distributed tests: cut a rank's shard out of
// global reference tensors, following a SequenceLayout; memoise the global references; the
// distributed-error assertion.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "burst/attention.h"
#include "burst/comm.h"
#include "burst/mask.h"
#include "burst/plan.h"
#include "burst/strategy.h"
#include "burst/tensor.h"
#include "test_util.h"

namespace burst::test {

/// BSHD [B,S_global,H,D] → this rank's [B,S_local,H,D] (rows follow the layout's positions).
inline Tensor shard_of(const SequenceLayout& layout, int rank, const Tensor& global) {
  const auto& s = global.shape();
  Tensor local(
      {s[0], static_cast<std::int64_t>(layout.positions[static_cast<std::size_t>(rank)].size()), s[2], s[3]});
  shard(layout, rank, global.view(), local.view());
  return local;
}

/// One DistAttention forward on this rank's shards of the global q [B,S,H,D], k, v [B,S,H_kv,D]:
/// its stats and layout (the byte-counter tests). Collective over `world`.
struct ForwardRun {
  DistStats stats;
  SequenceLayout layout;
};
inline ForwardRun run_forward(const Communicator& world, const DistConfig& cfg, const ProblemShape& shape,
                              const Mask& mask, const Tensor& q, const Tensor& k, const Tensor& v) {
  DistAttention attn(world, cfg, shape, mask);
  const SequenceLayout& layout = attn.plan().layout();
  const int rank = world.rank();
  Tensor ql = shard_of(layout, rank, q), kl = shard_of(layout, rank, k), vl = shard_of(layout, rank, v);
  Tensor out(ql.shape()), lse({shape.B, shape.H, attn.local_length()});
  attn.forward(ql.view(), kl.view(), vl.view(), out.view(), lse.view());
  return {attn.last_stats(), layout};
}

/// lse [B,H,S_global] → this rank's rows [B,H,S_local].
inline Tensor rows_of(const SequenceLayout& layout, int rank, const Tensor& global) {
  const auto& s = global.shape();
  const auto& pos = layout.positions[static_cast<std::size_t>(rank)];
  const auto n = static_cast<std::int64_t>(pos.size());
  Tensor local({s[0], s[1], n});
  for (std::int64_t bh = 0; bh < s[0] * s[1]; ++bh)
    for (std::int64_t i = 0; i < n; ++i)
      local.data()[bh * n + i] = global.data()[bh * s[2] + pos[static_cast<std::size_t>(i)]];
  return local;
}

/// The mask families the distributed tests sweep (benchmark masks of LongCA-bench, arXiv 2510.17896).
enum class Family { Full, Causal, SlidingWindow, SlidingWindowCausal, Document, PrefixLm, BlockSparse };

/// The benchmark mask name of a family ("full", "sliding_window_causal", ...).
inline const char* name_of(Family f) {
  switch (f) {
    case Family::Full: return "full";
    case Family::Causal: return "causal";
    case Family::SlidingWindow: return "sliding_window";
    case Family::SlidingWindowCausal: return "sliding_window_causal";
    case Family::Document: return "causal_document";
    case Family::PrefixLm: return "prefix_lm_causal";
    case Family::BlockSparse: return "qk_sparse";
  }
  return "?";
}

/// The family's mask over S tokens: 5 ragged documents (crossing rank boundaries), 16-token
/// sparse blocks, the given seed and window.
inline Mask mask_of(Family f, std::int64_t S, std::uint64_t seed, std::int64_t window) {
  BenchmarkMaskConfig cfg;
  cfg.seed = seed;
  cfg.num_documents = 5;
  cfg.window = window;
  cfg.block = 16;
  switch (f) {
    case Family::Full: return Mask::full();
    case Family::Causal: return Mask::causal_mask();
    case Family::SlidingWindow: return make_benchmark_mask(MaskType::SlidingWindow, S, cfg);
    case Family::SlidingWindowCausal: return make_benchmark_mask(MaskType::SlidingWindowCausal, S, cfg);
    case Family::Document: return make_benchmark_mask(MaskType::CausalDocument, S, cfg);
    case Family::PrefixLm: return make_benchmark_mask(MaskType::PrefixLmCausal, S, cfg);
    case Family::BlockSparse: return make_benchmark_mask(MaskType::QkSparse, S, cfg);
  }
  return Mask::full();
}

/// One global problem and its fp64 oracle: seeded q, dout [B,S,H,D] and k, v [B,S,H_kv,D]
/// (seeds seed + 1 .. seed + 4, fp32), the Reference kernel's out, lse [B,H,S], dq, dk, dv on
/// them, and for each of those five the tolerance rule (test_util.h) from the naive-fp32 twin's
/// error on the same inputs.
struct OracleCase {
  ProblemShape shape;
  Mask mask;
  Tensor q, k, v, dout, out, lse, dq, dk, dv;
  double tol[5] = {};  // out, lse, dq, dk, dv
  /// The five results, in tol's order.
  std::array<const Tensor*, 5> results() const { return {&out, &lse, &dq, &dk, &dv}; }
};

inline OracleCase oracle_case(const ProblemShape& shape, Mask mask, std::uint64_t seed) {
  OracleCase r;
  r.shape = shape;
  r.mask = std::move(mask);
  r.q = random_tensor({shape.B, shape.S_global, shape.H, shape.D}, seed + 1);
  r.k = random_tensor({shape.B, shape.S_global, shape.H_kv, shape.D}, seed + 2);
  r.v = random_tensor({shape.B, shape.S_global, shape.H_kv, shape.D}, seed + 3);
  r.dout = random_tensor({shape.B, shape.S_global, shape.H, shape.D}, seed + 4);
  AttentionParams p;
  p.mask = r.mask;
  p.impl = KernelImpl::Reference;
  AttentionOutput o = attention_forward(r.q.view(), r.k.view(), r.v.view(), p);
  AttentionGrads g =
      attention_backward(r.dout.view(), r.q.view(), r.k.view(), r.v.view(), o.out.view(), o.lse.view(), p);
  const AttentionOutput n = naive_fp32_forward(r.q, r.k, r.v, p);
  const AttentionGrads ng = naive_fp32_backward(r.dout, r.q, r.k, r.v, o.out, o.lse, p);
  r.out = std::move(o.out);
  r.lse = std::move(o.lse);
  r.dq = std::move(g.dq);
  r.dk = std::move(g.dk);
  r.dv = std::move(g.dv);
  const Tensor* naive[5] = {&n.out, &n.lse, &ng.dq, &ng.dk, &ng.dv};
  const auto refs = r.results();
  for (int i = 0; i < 5; ++i) r.tol[i] = tolerance(max_abs_diff(*naive[i], *refs[i]), max_abs(*refs[i]));
  return r;
}

/// make(B, H, H_kv, family), computed once per argument tuple (fp64 references are the slow part
/// of the distributed tests and are shared by many cases). One cache per (Ref, Make) type.
template <typename Ref, typename Family, typename Make>
const Ref& memoised(std::int64_t B, std::int64_t H, std::int64_t H_kv, Family family, Make make) {
  static std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t, int>, Ref> cache;
  const auto key = std::make_tuple(B, H, H_kv, static_cast<int>(family));
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, make(B, H, H_kv, family)).first;
  return it->second;
}

/// The distributed error must be within the tolerance rule (test_util.h) AND must not grow
/// materially with P: at most 4× the single-process fp32 kernel's error on the same global
/// problem plus the rule's floor (all-to-alls move values exactly; ring merges and partial sums
/// add a few roundings per step, never an error that scales with P or the data).
inline ::testing::AssertionResult dist_close(const char* what, const Tensor& got, const Tensor& want,
                                             double tol, double local_err) {
  const double err = max_abs_diff(got, want);
  if (err <= tol && err <= 4.0 * local_err + tol / kTolC) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": max |dist − ref| = " << err << ", tolerance " << tol
                                       << ", single-process fp32 error " << local_err;
}

/// Nodes the emulated cluster provides (ctest label multinode: tests/CMakeLists.txt runs the
/// Multinode.* tests through scripts/cluster.sh with BURST_TEST_NODES set); 0 elsewhere, where
/// those tests skip. Tests may read the environment; the library never does.
inline int multinode_expected_nodes() {
  const char* v = std::getenv("BURST_TEST_NODES");
  return v ? std::atoi(v) : 0;
}

/// The layouts a Multinode.* sweep covers: `all`, or the comma-separated names in
/// BURST_TEST_LAYOUTS (tests/multinode_faults.sh lossy runs one layout: at 50 ms one-way each
/// layout's cases take ~45 s of round trips over the emulated link). Throws on an unknown name.
inline std::vector<LayoutKind> multinode_layouts(const std::vector<LayoutKind>& all) {
  const char* v = std::getenv("BURST_TEST_LAYOUTS");
  if (!v || !*v) return all;
  std::vector<LayoutKind> out;
  std::string list = v;
  for (std::size_t at = 0; at <= list.size();) {
    const std::size_t end = std::min(list.find(',', at), list.size());
    out.push_back(layout_from_string(list.substr(at, end - at)));
    at = end + 1;
  }
  return out;
}

/// The topology MPI_Comm_split_type(SHARED) discovers must be the cluster's: `nodes` hosts with
/// P / nodes ranks each, rank = node·L + local_rank (no ranks_per_node override).
inline ::testing::AssertionResult discovered_topology_is(int nodes) {
  const Communicator world = Communicator::world();
  const NodeTopology t = world.node_topology(0);
  const int L = world.size() / nodes;
  if (t.nodes == nodes && t.ranks_per_node == L && t.node == world.rank() / L &&
      t.local_rank == world.rank() % L)
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "discovered nodes=" << t.nodes << " L=" << t.ranks_per_node << " node=" << t.node
         << " local_rank=" << t.local_rank << ", expected nodes=" << nodes << " L=" << L;
}

}  // namespace burst::test
