// Pure planning, part 2: the per-step plan of each strategy (what every rank computes on and
// sends at every step), predicted bytes per rank per pass, buffer bounds, and the printable
// table. The formulas here are the ones docs/strategies.md states and the tests hold the byte
// counters to. Ring family schedule: docs/algorithm.md §2, §3 and §7 (double ring).
#include <algorithm>
#include <iomanip>
#include <numeric>
#include <sstream>

#include "burst/error.h"
#include "burst/plan.h"
#include "plan_ring.h"
#include "plan_strategies.h"
#include "wire_layout.h"

namespace burst {

namespace {

constexpr std::int64_t kF32 = 4;
using ring::mod;

/// Elements of one rank's Q (or O, dQ), K (or V, dK, dV) and one row vector (lse, delta).
struct Sizes {
  std::int64_t q_numel = 0, kv_numel = 0, row_numel = 0;
};

Sizes sizes_of(const ProblemShape& s, int P) {
  const std::int64_t S_local = s.S_global / P;
  return {s.B * S_local * s.H * s.D, s.B * S_local * s.H_kv * s.D, s.B * s.H * S_local};
}

/// Bytes per element of what burst and ring circulate (Q, K, V, dO): the problem's storage dtype.
std::int64_t element_bytes(const ProblemShape& s) { return static_cast<std::int64_t>(dtype_size(s.dtype)); }

/// The ring family's messages (what RingExecutor and ring_family.cc send; wire_layout.h): the
/// K,V read payload, the query side's Q,dO,delta,lse payload, and a write partial of n values
/// in the partials dtype (DistConfig::partials_dtype).
std::int64_t kv_bytes(const ProblemShape& s, const Sizes& z) {
  return wire::kv_block(s.dtype, z.kv_numel).bytes();
}
std::int64_t query_bytes(const ProblemShape& s, const Sizes& z) {
  return wire::query_block(s.dtype, z.q_numel, z.row_numel).bytes();
}
std::int64_t partial_bytes(std::int64_t n, DType partials_dtype) {
  return wire::partial(partials_dtype, n).bytes();
}

/// Partition held by rank g at step t (0-based) of the (double) ring: docs/algorithm.md §7.
int ring_partition(int g, int t, int n, int L) { return ring::partition({n, L}, g, t); }

/// Ring-family pass: read payload of `read` bytes circulates; an optional write accumulator
/// of `write` bytes follows it one step behind (chain inside a node, home hop per round).
/// `write` is the bytes of one write hop on the wire, `write_buf` the bytes of one write buffer
/// in the buffer bound (the fp32 accumulator's: a bf16 wire copy is smaller).
/// `query_rows` says whether the rank holds the circulating block's queries (backward query
/// side) or its keys (forward, backward KV side) — it selects block_pairs[j][g] vs [g][j].
PassPlan ring_pass(int P, int n, int L, std::int64_t read, std::int64_t write, std::int64_t write_buf,
                   const std::string& payload, bool query_rows,
                   const std::vector<std::vector<std::int64_t>>& pairs, std::int64_t work_bytes) {
  PassPlan pass;
  pass.bytes_sent.assign(static_cast<std::size_t>(P), 0);
  pass.visible_pairs.assign(static_cast<std::size_t>(P), 0);
  for (int t = 0; t < P; ++t) {
    PlanStep step;
    step.payload = payload;
    const int u = t % L, k = t / L;
    const bool intra = P > 1 && u<L - 1, inter = P> 1 && u == 0 && k < n - 1;
    step.link = intra && inter ? "intra+inter" : intra ? "intra" : inter ? "inter" : "-";
    for (int g = 0; g < P; ++g) {
      const int j = ring_partition(g, t, n, L);
      const int a = g / L, b = g % L;
      std::int64_t bytes = (intra ? read : 0) + (inter ? read : 0);
      if (write > 0 && P > 1) {
        if (u >= 1) bytes += write;  // chain hop
        if (u == 0 && t > 0) {       // home hop of round k−1
          const int prev = ring_partition(g, t - 1, n, L);
          if (prev != g) bytes += write;
        }
      }
      step.partition.push_back(j);
      step.send_to.push_back(intra ? a * L + mod(b + 1, L) : inter ? mod(a + 1, n) * L + b : -1);
      step.bytes_sent.push_back(bytes);
      const std::int64_t vp = query_rows ? pairs[static_cast<std::size_t>(j)][static_cast<std::size_t>(g)]
                                         : pairs[static_cast<std::size_t>(g)][static_cast<std::size_t>(j)];
      step.visible_pairs.push_back(vp);
      pass.bytes_sent[static_cast<std::size_t>(g)] += bytes;
      pass.visible_pairs[static_cast<std::size_t>(g)] += vp;
    }
    pass.steps.push_back(std::move(step));
  }
  if (write > 0 && P > 1) {  // final home hop of the last round
    PlanStep fin;
    fin.payload = "final hop";
    fin.link = n > 1 ? "inter" : "intra";
    for (int g = 0; g < P; ++g) {
      const int last = ring_partition(g, P - 1, n, L);
      const std::int64_t bytes = last != g ? write : 0;
      fin.partition.push_back(-1);
      fin.send_to.push_back(last != g ? last : -1);
      fin.bytes_sent.push_back(bytes);
      fin.visible_pairs.push_back(0);
      pass.bytes_sent[static_cast<std::size_t>(g)] += bytes;
    }
    pass.steps.push_back(std::move(fin));
  }
  // Buffers (executor in strategies/ring_skeleton.cc): read current + next + the previous one
  // (its send completes by the end of the step after it), plus the inter copy and inter receive
  // on a double ring; write: step partial, chain accumulator in flight (this step's and the
  // previous step's send), chain receive, the previous round's home send still in flight, one
  // home receive per round; plus the step's working buffers (work_bytes). With a write
  // accumulator the own read payload is kept for the own block's second half after the last
  // step (RingExecutor::run, split_own).
  const std::int64_t read_bufs = P == 1 ? 1 : (n > 1 ? 5 : 3) + (write > 0 ? 1 : 0);
  const std::int64_t write_bufs = write > 0 ? 5 + n : 0;
  const std::int64_t peak = read_bufs * read + write_bufs * write_buf + work_bytes;
  pass.peak_buffer_bytes.assign(static_cast<std::size_t>(P), peak);
  return pass;
}

/// Mask-aware ring-family pass (strategies/ring_direct.cc): the steps of ring_pass, but rank g
/// receives block j's read payload only when it computes on it (need(g, j): a visible pair),
/// straight from the owner, and sends its step contribution straight home. Per rank: read bytes
/// for every other rank that needs its block, write bytes for every other block it computes on.
PassPlan direct_pass(int P, int n, int L, std::int64_t read, std::int64_t write, std::int64_t write_buf,
                     const std::string& payload, bool query_rows,
                     const std::vector<std::vector<std::int64_t>>& pairs, std::int64_t work_bytes) {
  const auto at = [&](int q_rank, int k_rank) {
    return pairs[static_cast<std::size_t>(q_rank)][static_cast<std::size_t>(k_rank)];
  };
  // Visible pairs rank g computes on with block j (query side: j's queries, g's keys).
  const auto work = [&](int g, int j) { return query_rows ? at(j, g) : at(g, j); };
  PassPlan pass;
  pass.mask_aware = true;
  pass.bytes_sent.assign(static_cast<std::size_t>(P), 0);
  pass.visible_pairs.assign(static_cast<std::size_t>(P), 0);
  std::vector<std::int64_t> partials(static_cast<std::size_t>(P), 0);  // write buffers held per rank
  PlanStep own{payload, std::string(1, '-'), {}, {}, {}, {}};          // step 0: own blocks, nothing moves
  for (int g = 0; g < P; ++g) {
    own.partition.push_back(g);
    own.send_to.push_back(-1);
    own.bytes_sent.push_back(0);
    own.visible_pairs.push_back(work(g, g));
    pass.visible_pairs[static_cast<std::size_t>(g)] += work(g, g);
  }
  pass.steps.push_back(std::move(own));
  ring::for_each_direct_step(
      {n, L}, [&](int reader, int owner) { return work(reader, owner) > 0; },
      [&](const ring::DirectStep& d) {
        if (d.g == 0) {
          PlanStep step;
          step.payload = payload;
          pass.steps.push_back(std::move(step));
        }
        PlanStep& step = pass.steps.back();
        const auto g = static_cast<std::size_t>(d.g);
        std::int64_t bytes = d.serves ? read : 0;  // my block to the rank holding it now
        if (write > 0 && d.computes) {             // my partial of block d.block goes home
          bytes += write;
          ++partials[g];  // sent home, held until the pass ends
        }
        if (write > 0 && d.serves) ++partials[g];  // the partial of my block, received
        const std::int64_t vp = work(d.g, d.block);
        step.partition.push_back(d.block);
        step.send_to.push_back(d.serves ? d.holder : -1);
        step.bytes_sent.push_back(bytes);
        step.visible_pairs.push_back(vp);
        pass.bytes_sent[g] += bytes;
        pass.visible_pairs[g] += vp;
        if (d.g == P - 1) {
          const bool moves = std::any_of(step.bytes_sent.begin(), step.bytes_sent.end(),
                                         [](std::int64_t b) { return b > 0; });
          step.link = moves ? "direct" : "-";
        }
      });
  // Buffers: own + current + next read payload + one send copy; write: result, step partial, the
  // own block's second half and every partial sent or received (held until the pass ends); plus
  // the working buffers.
  for (int g = 0; g < P; ++g)
    pass.peak_buffer_bytes.push_back(4 * read + (3 + partials[static_cast<std::size_t>(g)]) * write_buf +
                                     work_bytes);
  return pass;
}

/// True when some off-diagonal block has no visible pair (the mask-aware schedule then moves less).
bool has_empty_block(const std::vector<std::vector<std::int64_t>>& pairs) {
  for (std::size_t i = 0; i < pairs.size(); ++i)
    for (std::size_t j = 0; j < pairs.size(); ++j)
      if (i != j && pairs[i][j] == 0) return true;
  return false;
}

/// Collective pass with totals only (one logical step).
PassPlan collective_pass(int P, const std::string& payload, std::int64_t bytes_per_rank, std::int64_t peak,
                         const std::vector<std::int64_t>& pairs_per_rank) {
  PassPlan pass;
  PlanStep step;
  step.payload = payload;
  step.link = P > 1 ? "collective" : "-";
  for (int g = 0; g < P; ++g) {
    step.partition.push_back(-1);
    step.send_to.push_back(-1);
    step.bytes_sent.push_back(P > 1 ? bytes_per_rank : 0);
    step.visible_pairs.push_back(pairs_per_rank[static_cast<std::size_t>(g)]);
  }
  pass.bytes_sent = step.bytes_sent;
  pass.visible_pairs = pairs_per_rank;
  pass.peak_buffer_bytes.assign(static_cast<std::size_t>(P), peak);
  pass.steps.push_back(std::move(step));
  return pass;
}

}  // namespace

double PassPlan::balance() const {
  if (visible_pairs.empty()) return 1.0;
  const double mx = static_cast<double>(*std::max_element(visible_pairs.begin(), visible_pairs.end()));
  const double mean =
      static_cast<double>(std::accumulate(visible_pairs.begin(), visible_pairs.end(), std::int64_t{0})) /
      static_cast<double>(visible_pairs.size());
  return mean > 0 ? mx / mean : 1.0;
}

std::int64_t ring_backward_bytes(BackwardSide side, const ProblemShape& shape, int P, DType partials_dtype) {
  BURST_CHECK(P >= 1 && shape.S_global % P == 0, InvalidArgument,
              "ring_backward_bytes: S_global=", shape.S_global, " not divisible by P=", P);
  if (P == 1) return 0;
  const Sizes z = sizes_of(shape, P);
  // Q, dO (query side) or K, V (KV side) hop P − 1 times in the storage dtype; delta, lse and
  // the dQ (or dK, dV) partials (fp32, or bf16 on request) make P hops (chain + home).
  if (side == BackwardSide::QuerySide)
    return (P - 1) * query_bytes(shape, z) + P * partial_bytes(z.q_numel, partials_dtype);
  return (P - 1) * kv_bytes(shape, z) + P * partial_bytes(2 * z.kv_numel, partials_dtype);
}

BackwardSide choose_backward_side(const ProblemShape& shape, int P, DType partials_dtype) {
  return ring_backward_bytes(BackwardSide::QuerySide, shape, P, partials_dtype) <=
                 ring_backward_bytes(BackwardSide::KvSide, shape, P, partials_dtype)
             ? BackwardSide::QuerySide
             : BackwardSide::KvSide;
}

Plan Plan::make(const DistConfig& cfg, const ProblemShape& shape, const Mask& mask, int P,
                int ranks_per_node) {
  return make(cfg, shape, ResolvedMask(mask, shape.S_global, shape.S_global), P, ranks_per_node);
}

Plan Plan::make(const DistConfig& cfg, const ProblemShape& shape, const ResolvedMask& resolved, int P,
                int ranks_per_node) {
  BURST_CHECK(shape.B >= 1 && shape.S_global >= 1 && shape.H >= 1 && shape.H_kv >= 1 && shape.D >= 1,
              InvalidArgument, "problem shape B=", shape.B, " S_global=", shape.S_global, " H=", shape.H,
              " H_kv=", shape.H_kv, " D=", shape.D, " must be positive");
  BURST_CHECK(shape.H % shape.H_kv == 0, InvalidArgument, "H=", shape.H,
              " not divisible by H_kv=", shape.H_kv);
  BURST_CHECK(ranks_per_node >= 1 && P % ranks_per_node == 0, InvalidArgument,
              "ranks_per_node=", ranks_per_node, " does not divide P=", P);
  Plan plan;
  plan.cfg_ = cfg;
  plan.shape_ = shape;
  BURST_CHECK(resolved.seq_q() == shape.S_global && resolved.seq_kv() == shape.S_global, InvalidArgument,
              "plan of S_global=", shape.S_global, " under a mask resolved for (", resolved.seq_q(), ", ",
              resolved.seq_kv(), ")");
  plan.layout_ = cfg.positions.empty() ? make_layout(cfg.layout, P, shape.S_global, resolved)
                                       : make_explicit_layout(cfg.layout, P, shape.S_global, cfg.positions);
  plan.mask_text_ = resolved.describe();
  const bool double_ring = strategies::uses_node_topology(cfg);
  plan.ranks_per_node_ = double_ring ? ranks_per_node : P;
  plan.block_pairs_.assign(static_cast<std::size_t>(P),
                           std::vector<std::int64_t>(static_cast<std::size_t>(P)));
  for (int i = 0; i < P; ++i)
    for (int j = 0; j < P; ++j)
      plan.block_pairs_[static_cast<std::size_t>(i)][static_cast<std::size_t>(j)] =
          resolved.visible_pairs(plan.layout_.positions[static_cast<std::size_t>(i)],
                                 plan.layout_.positions[static_cast<std::size_t>(j)]);
  std::vector<std::int64_t> own_pairs;
  for (int i = 0; i < P; ++i) {
    const auto& row = plan.block_pairs_[static_cast<std::size_t>(i)];
    own_pairs.push_back(std::accumulate(row.begin(), row.end(), std::int64_t{0}));
  }
  const Sizes z = sizes_of(shape, P);
  const int L = plan.ranks_per_node_, n = P / L;
  const std::int64_t kv_global = shape.B * shape.S_global * shape.H_kv * shape.D;
  switch (cfg.strategy) {
    case StrategyKind::Burst:
    case StrategyKind::Ring: {
      // Forward: K,V circulate in the storage dtype; working buffers: one fp32 partial out + lse.
      // Mask-aware (DistConfig::mask_aware): only needed blocks move, owner to reader.
      const auto make_pass =
          cfg.mask_aware && P > 1 && has_empty_block(plan.block_pairs_) ? direct_pass : ring_pass;
      plan.forward_ = make_pass(P, n, L, kv_bytes(shape, z), 0, 0, "K,V", false, plan.block_pairs_,
                                kF32 * (z.q_numel + z.row_numel));
      plan.forward_.side = "kv";
      BackwardSide side = BackwardSide::KvSide;
      if (cfg.strategy == StrategyKind::Burst)
        side = cfg.backward_side == BackwardSide::Auto ? choose_backward_side(shape, P, cfg.partials_dtype)
                                                       : cfg.backward_side;
      plan.side_ = side;
      // Write partials on the wire: fp32, or bf16 (DistConfig::partials_dtype), which the
      // executor holds as wire copies besides its fp32 accumulators: the buffer bound counts every
      // write buffer at the accumulator's fp32 size, an upper bound either way.
      const DType pd = cfg.partials_dtype;
      if (side == BackwardSide::QuerySide) {
        // Read: Q, dO, delta, lse; write: dQ. Working: own delta (r) + packed own payload.
        plan.backward_ =
            make_pass(P, n, L, query_bytes(shape, z), partial_bytes(z.q_numel, pd), kF32 * z.q_numel,
                      pd == DType::BF16 ? "Q,dO,delta,lse | dQ bf16" : "Q,dO,delta,lse | dQ", true,
                      plan.block_pairs_, kF32 * z.row_numel);
        plan.backward_.side = "query";
      } else {
        plan.backward_ =
            make_pass(P, n, L, kv_bytes(shape, z), partial_bytes(2 * z.kv_numel, pd), kF32 * 2 * z.kv_numel,
                      pd == DType::BF16 ? "K,V | dK,dV bf16" : "K,V | dK,dV", false, plan.block_pairs_,
                      kF32 * z.row_numel);
        plan.backward_.side = "kv";
      }
      break;
    }
    case StrategyKind::AllGather: {
      // Forward: all-gather K,V (rank order) then reorder into position order: 2 global K,V
      // copies + the packed local K,V. Backward: the rank-order K,V (one kernel call per rank
      // block, no reorder), the fp32 rank-order dK,dV blocks (the reduce-scatter's send buffer),
      // the received dK,dV and delta.
      // K, V gathered in the storage dtype (e bytes); dK, dV reduce-scattered in fp32.
      const std::int64_t e = element_bytes(shape);
      const std::int64_t fwd_bytes = (P - 1) * kv_bytes(shape, z);
      plan.forward_ = collective_pass(P, "all-gather K,V", fwd_bytes,
                                      e * (2 * 2 * kv_global + 2 * z.kv_numel), own_pairs);
      plan.forward_.side = "kv";
      plan.backward_ = collective_pass(
          P, "all-gather K,V; reduce-scatter dK,dV", fwd_bytes + kF32 * (P - 1) * 2 * z.kv_numel,
          e * 2 * kv_global + kF32 * (2 * kv_global + 2 * z.kv_numel + z.row_numel), own_pairs);
      plan.backward_.side = "kv";
      break;
    }
    default: {
      // No step model in this file: totals of the local work only (bytes are documented by the
      // strategy's own file).
      plan.forward_ = collective_pass(P, "see docs/strategies.md", 0, 0, own_pairs);
      plan.backward_ = collective_pass(P, "see docs/strategies.md", 0, 0, own_pairs);
      // ulysses, usp, distflash, headpar: per-rank bytes, work and buffers from their own formulas
      // (src/plan_strategies.h); bytes cleared when the configuration is rejected.
      strategies::fill_strategy_passes(cfg, shape, plan.layout_, resolved, plan.ranks_per_node_,
                                       plan.forward_, plan.backward_);
      break;
    }
  }
  return plan;
}

std::string Plan::table() const {
  std::ostringstream os;
  const int P = ranks();
  os << "strategy " << to_string(cfg_.strategy) << ", layout " << to_string(layout_.kind) << ", P=" << P
     << " (nodes " << nodes() << " x " << ranks_per_node_ << "), B=" << shape_.B
     << " S_global=" << shape_.S_global << " H=" << shape_.H << " H_kv=" << shape_.H_kv << " D=" << shape_.D
     << " dtype=" << to_string(shape_.dtype) << ", mask " << mask_text_ << "\n";
  os << "tokens per rank:";
  for (int r = 0; r < P; ++r) {
    const auto& pos = layout_.positions[static_cast<std::size_t>(r)];
    os << "  r" << r << "[" << pos.size() << "]";
    if (!pos.empty()) os << " " << pos.front() << ".." << pos.back();
  }
  os << "\n";
  auto pass_table = [&](const char* name, const PassPlan& pass) {
    os << name << " (side " << pass.side << ", balance " << std::fixed << std::setprecision(3)
       << pass.balance() << ")\n";
    os << "  step  link         payload                     per rank: partition/bytes/pairs\n";
    for (std::size_t t = 0; t < pass.steps.size(); ++t) {
      const PlanStep& s = pass.steps[t];
      os << "  " << std::setw(4) << t << "  " << std::left << std::setw(12) << s.link << " " << std::setw(27)
         << s.payload << std::right;
      for (std::size_t g = 0; g < s.partition.size(); ++g)
        os << "  " << s.partition[g] << "/" << s.bytes_sent[g] << "/" << s.visible_pairs[g];
      os << "\n";
    }
    os << "  total bytes per rank:";
    for (auto b : pass.bytes_sent) os << " " << b;
    os << "\n  visible pairs per rank:";
    for (auto v : pass.visible_pairs) os << " " << v;
    os << "\n  peak buffer bytes per rank:";
    for (auto v : pass.peak_buffer_bytes) os << " " << v;
    os << "\n";
  };
  pass_table("forward", forward_);
  pass_table("backward", backward_);
  return os.str();
}

}  // namespace burst
