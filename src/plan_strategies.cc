// Pure planning of ulysses, usp, headpar and distflash (plan_strategies.h): head split, DistFlashAttn
// schedule and support check, and the per-rank byte formulas of ulysses, usp, headpar and distflash.
#include "plan_strategies.h"

#include <algorithm>
#include <utility>

#include "burst/error.h"
#include "wire_layout.h"

namespace burst::strategies {

// ------------------------------------------------------------------ heads

HeadSplit make_head_split(std::int64_t H, std::int64_t H_kv, int u, const char* strategy) {
  BURST_CHECK(u >= 1 && H >= 1 && H_kv >= 1 && H % H_kv == 0, InvalidArgument, strategy,
              ": invalid head split H=", H, " H_kv=", H_kv, " over ", u, " ranks");
  BURST_CHECK(H % u == 0, Unsupported, strategy, " splits query heads over ranks: H=", H,
              " is not divisible by ", u, " ranks (needs H % P == 0)");
  HeadSplit s;
  s.H = H;
  s.H_kv = H_kv;
  s.u = u;
  s.heads = H / u;
  if (H_kv % u == 0) {
    s.kv_heads = H_kv / u;
  } else {
    BURST_CHECK(u % H_kv == 0, Unsupported, strategy, ": H_kv=", H_kv, " KV heads cannot be split ", "over ",
                u, " ranks (needs H_kv % P == 0, or P % H_kv == 0 to replicate KV heads)");
    s.kv_heads = 1;
    s.kv_replicated = true;
  }
  return s;
}

namespace {
/// A dtype of `e` bytes per element: the layouts (wire_layout.h) depend on the element size
/// only, so bf16 stands for f16 too.
DType dtype_of_size(std::int64_t e) { return e == 4 ? DType::F32 : e == 8 ? DType::F64 : DType::BF16; }
}  // namespace

std::int64_t ulysses_forward_bytes(const HeadSplit& s, const std::vector<std::int64_t>& S_local,
                                   std::int64_t B, std::int64_t D, int me, bool with_lse, std::int64_t e) {
  // The segments UlyssesExchange sends (strategies/ulysses.cc segment_layout), field by field.
  const DType dt = dtype_of_size(e);
  const std::int64_t mine = B * S_local[static_cast<std::size_t>(me)];
  const WireLayout qkv{
      {"q", dt, mine * s.heads * D}, {"k", dt, mine * s.kv_heads * D}, {"v", dt, mine * s.kv_heads * D}};
  std::int64_t bytes = 0;
  for (int j = 0; j < s.u; ++j) {
    if (j == me) continue;
    const std::int64_t theirs = B * S_local[static_cast<std::size_t>(j)];
    WireLayout out{{"out", DType::F32, theirs * s.heads * D}};
    if (with_lse) out.add("lse", DType::F32, theirs * s.heads);
    bytes += qkv.bytes() + out.bytes();
  }
  return bytes;
}

std::int64_t ulysses_backward_bytes(const HeadSplit& s, const std::vector<std::int64_t>& S_local,
                                    std::int64_t B, std::int64_t D, int me, bool saved, std::int64_t e) {
  // The segments UlyssesExchange sends (strategies/ulysses.cc segment_layout), field by field.
  const DType dt = dtype_of_size(e);
  const std::int64_t mine = B * S_local[static_cast<std::size_t>(me)];
  const WireLayout in =
      saved ? WireLayout{{"dout", dt, mine * s.heads * D}}
            : WireLayout{{"q", dt, mine * s.heads * D},       {"dout", dt, mine * s.heads * D},
                         {"k", dt, mine * s.kv_heads * D},    {"v", dt, mine * s.kv_heads * D},
                         {"lse", DType::F32, mine * s.heads}, {"delta", DType::F32, mine * s.heads}};
  std::int64_t bytes = 0;
  for (int j = 0; j < s.u; ++j) {
    if (j == me) continue;
    const std::int64_t theirs = B * S_local[static_cast<std::size_t>(j)];
    const WireLayout grads{{"dq", DType::F32, theirs * s.heads * D},
                           {"dk", DType::F32, theirs * s.kv_heads * D},
                           {"dv", DType::F32, theirs * s.kv_heads * D}};
    bytes += in.bytes() + grads.bytes();
  }
  return bytes;
}

// ------------------------------------------------------------------ usp

int resolve_ulysses_degree(int requested, int P, std::int64_t H_kv) {
  if (requested != 0) return requested;
  for (int u = P; u >= 1; --u)
    if (P % u == 0 && H_kv % u == 0) return u;
  return 1;
}

std::vector<std::vector<std::int64_t>> usp_ring_groups(const SequenceLayout& layout, int u) {
  std::vector<std::vector<std::int64_t>> out;
  for (int g = 0; g < layout.P / u; ++g) {
    std::vector<std::int64_t> all;
    for (int m = 0; m < u; ++m) {
      const auto& p = layout.positions[static_cast<std::size_t>(g * u + m)];
      all.insert(all.end(), p.begin(), p.end());
    }
    std::sort(all.begin(), all.end());
    out.push_back(std::move(all));
  }
  return out;
}

std::int64_t ring_group_forward_bytes(const std::vector<std::vector<std::int64_t>>& groups, std::int64_t B,
                                      std::int64_t kv_heads, std::int64_t D, int i, std::int64_t e) {
  // The K, V blocks usp's ring circulates (wire::kv_block, strategies/usp.cc).
  const int r = static_cast<int>(groups.size());
  std::int64_t bytes = 0;
  for (int s = 0; s + 1 < r; ++s) {
    const auto tokens = static_cast<std::int64_t>(groups[static_cast<std::size_t>((i - s + r) % r)].size());
    bytes += wire::kv_block(dtype_of_size(e), B * tokens * kv_heads * D).bytes();
  }
  return bytes;
}

std::int64_t ring_group_backward_bytes(const std::vector<std::vector<std::int64_t>>& groups,
                                       RingTopology topo, std::int64_t B, std::int64_t kv_heads,
                                       std::int64_t D, int i, std::int64_t e) {
  const int r = static_cast<int>(groups.size());
  if (r == 1) return 0;
  // One member per node: the partial of round 0's block (the member's own) is already home.
  const bool own_stays = topo.ranks_per_node == 1;
  std::int64_t bytes = 0;
  for (int s = 0; s < r; ++s) {
    const std::int64_t n =
        B * static_cast<std::int64_t>(groups[static_cast<std::size_t>((i - s + r) % r)].size()) * kv_heads *
        D;
    // dK, dV of the held block (the last hop brings it home); K, V (wire_layout.h).
    if (s > 0 || !own_stays) bytes += wire::partial(DType::F32, 2 * n).bytes();
    if (s + 1 < r) bytes += wire::kv_block(dtype_of_size(e), n).bytes();
  }
  return bytes;
}

bool uses_node_topology(const DistConfig& cfg) {
  return cfg.double_ring && (cfg.strategy == StrategyKind::Burst || cfg.strategy == StrategyKind::Ring ||
                             cfg.strategy == StrategyKind::Usp);
}

RingTopology usp_ring_topology(int P, int u, int L, bool double_ring) {
  const int r = P / u;
  if (double_ring && L >= 1 && P % L == 0) {
    if (L % u == 0) return {P / L, L / u};
    if (u % L == 0) return {r, 1};
  }
  return {1, r};
}

std::int64_t burst_group_backward_bytes(const std::vector<std::vector<std::int64_t>>& groups,
                                        RingTopology topo, std::int64_t B, std::int64_t heads, std::int64_t D,
                                        std::int64_t e) {
  const std::int64_t r = static_cast<std::int64_t>(groups.size());
  if (r == 1) return 0;
  const std::int64_t S = static_cast<std::int64_t>(groups[0].size());
  const std::int64_t w = topo.ranks_per_node == 1 ? r - 1 : r;
  // Q, dO, delta, lse circulate; the dQ partials hop w times (wire_layout.h).
  const std::int64_t n = B * S * heads * D, rows = B * S * heads;
  return (r - 1) * wire::query_block(dtype_of_size(e), n, rows).bytes() +
         w * wire::partial(DType::F32, n).bytes();
}

// ------------------------------------------------------------------ headpar

std::int64_t headpar_forward_bytes(const SequenceLayout& layout, const ProblemShape& s, int rank) {
  const std::int64_t mine =
      static_cast<std::int64_t>(layout.positions[static_cast<std::size_t>(rank)].size());
  // Q, K, V all-gathered: one block per rank (strategies/headpar.cc block_layout).
  const WireLayout qkv{{"q", s.dtype, s.B * mine * s.H * s.D},
                       {"k", s.dtype, s.B * mine * s.H_kv * s.D},
                       {"v", s.dtype, s.B * mine * s.H_kv * s.D}};
  std::int64_t bytes = (layout.P - 1) * qkv.bytes();
  for (int i = 0; i < layout.P; ++i) {  // reduce-scatter O, lse (fp32)
    if (i == rank) continue;
    bytes += 4 * s.B * static_cast<std::int64_t>(layout.positions[static_cast<std::size_t>(i)].size()) * s.H *
             (s.D + 1);
  }
  return bytes;
}

std::int64_t headpar_backward_bytes(const SequenceLayout& layout, const ProblemShape& s, int rank) {
  const std::int64_t mine =
      static_cast<std::int64_t>(layout.positions[static_cast<std::size_t>(rank)].size());
  // Q, dO, K, V in their dtype, lse, delta fp32: one block per rank (headpar.cc block_layout).
  const WireLayout in{{"q", s.dtype, s.B * mine * s.H * s.D},    {"dout", s.dtype, s.B * mine * s.H * s.D},
                      {"k", s.dtype, s.B * mine * s.H_kv * s.D}, {"v", s.dtype, s.B * mine * s.H_kv * s.D},
                      {"lse", DType::F32, s.B * mine * s.H},     {"delta", DType::F32, s.B * mine * s.H}};
  std::int64_t bytes = (layout.P - 1) * in.bytes();
  for (int i = 0; i < layout.P; ++i) {  // reduce-scatter dQ, dK, dV (fp32)
    if (i == rank) continue;
    bytes += 4 * s.B * static_cast<std::int64_t>(layout.positions[static_cast<std::size_t>(i)].size()) *
             (s.H + 2 * s.H_kv) * s.D;
  }
  return bytes;
}

// ------------------------------------------------------------------ distflash

DistFlashSchedule make_distflash_schedule(int P, const std::function<bool(int, int)>& needed) {
  BURST_CHECK(P >= 1, InvalidArgument, "distflash schedule for P=", P, " ranks");
  DistFlashSchedule s;
  s.P = P;
  const int L = P / 2;
  s.steps = L + 1;
  s.local.assign(static_cast<std::size_t>(s.steps), std::vector<FlashBlock>(static_cast<std::size_t>(P)));
  s.help = s.local;
  for (int q = 0; q < P; ++q) {
    for (int kv = 0; kv <= q; ++kv) {
      const int d = q - kv;
      if (d > 0 && !needed(q, kv)) continue;
      if (d <= L) {
        s.local[static_cast<std::size_t>(d)][static_cast<std::size_t>(q)] = {q, kv};
      } else {
        // The KV owner kv finished its own blocks at step kv < P − d: it helps at step P − d.
        s.help[static_cast<std::size_t>(P - d)][static_cast<std::size_t>(kv)] = {q, kv};
      }
    }
  }
  return s;
}

namespace {

const FlashBlock& at(const std::vector<std::vector<FlashBlock>>& m, int t, int r) {
  return m[static_cast<std::size_t>(t)][static_cast<std::size_t>(r)];
}

}  // namespace

std::int64_t distflash_forward_bytes(const DistFlashSchedule& s, const ChunkFloats& c, int rank) {
  // The messages of strategies/distflash.cc (wire_layout.h).
  const DType dt = dtype_of_size(c.e);
  const std::int64_t kv = wire::kv_block(dt, c.kv).bytes(), q = wire::query_only(dt, c.q).bytes(),
                     partial = wire::out_lse(c.q, c.row).bytes();
  std::int64_t bytes = 0;
  for (int t = 1; t < s.steps; ++t) {
    for (int r = 0; r < s.P; ++r) {
      const FlashBlock& lb = at(s.local, t, r);
      if (lb.valid() && lb.kv == rank) bytes += kv;  // K, V to the query owner
      const FlashBlock& hb = at(s.help, t, r);
      if (hb.valid() && hb.q == rank) bytes += q;         // Q to the helper
      if (hb.valid() && hb.kv == rank) bytes += partial;  // partial O, lse back
    }
  }
  return bytes;
}

std::int64_t distflash_backward_bytes(const DistFlashSchedule& s, const ChunkFloats& c, int rank) {
  const DType dt = dtype_of_size(c.e);
  const std::int64_t kv = wire::kv_block(dt, c.kv).bytes(), q = wire::query_block(dt, c.q, c.row).bytes(),
                     dkv = wire::partial(DType::F32, 2 * c.kv).bytes(),
                     dq = wire::partial(DType::F32, c.q).bytes();
  std::int64_t bytes = 0;
  for (int t = 1; t < s.steps; ++t) {
    for (int r = 0; r < s.P; ++r) {
      const FlashBlock& lb = at(s.local, t, r);
      if (lb.valid() && lb.kv == rank) bytes += kv;  // K, V to the query owner
      if (lb.valid() && lb.q == rank) bytes += dkv;  // dK, dV back
      const FlashBlock& hb = at(s.help, t, r);
      if (hb.valid() && hb.q == rank) bytes += q;    // Q, dO, delta, lse
      if (hb.valid() && hb.kv == rank) bytes += dq;  // dQ back
    }
  }
  return bytes;
}

std::int64_t distflash_block_pairs(const ResolvedMask& mask, std::int64_t c, int i, int j) {
  std::vector<std::int64_t> qp(static_cast<std::size_t>(c)), kp(static_cast<std::size_t>(c));
  for (std::int64_t x = 0; x < c; ++x) {
    qp[static_cast<std::size_t>(x)] = i * c + x;
    kp[static_cast<std::size_t>(x)] = j * c + x;
  }
  return mask.visible_pairs(qp, kp);
}

DistFlashSchedule make_distflash_schedule(const ResolvedMask& mask, std::int64_t S_global, int P) {
  const std::int64_t c = S_global / P;
  return make_distflash_schedule(P, [&](int i, int j) { return distflash_block_pairs(mask, c, i, j) > 0; });
}

void check_distflash_support(LayoutKind layout, const ProblemShape& shape, const ResolvedMask& resolved,
                             int P) {
  BURST_CHECK(layout == LayoutKind::Contiguous, Unsupported, "distflash: its schedule is defined ",
              "on the contiguous layout (rank r owns chunk r; it balances causal work itself), got layout=",
              to_string(layout));
  BURST_CHECK(P >= 1 && shape.S_global % P == 0, InvalidArgument, "distflash: S_global=", shape.S_global,
              " is not divisible by P=", P);
  const std::int64_t c = shape.S_global / P;
  for (int i = 0; i < P; ++i)
    for (int j = i + 1; j < P; ++j)
      BURST_CHECK(
          distflash_block_pairs(resolved, c, i, j) == 0, Unsupported, "distflash computes only blocks at ",
          "or below the diagonal (causal-like masks), but mask ", resolved.describe(), " has visible ",
          "pairs in block (q chunk ", i, ", kv chunk ", j, ") at P=", P, "; use ring, burst or allgather");
}

// ------------------------------------------------------------------ plan entries

namespace {

std::vector<std::int64_t> lengths_of(const SequenceLayout& layout, int first, int count) {
  std::vector<std::int64_t> out;
  for (int m = 0; m < count; ++m)
    out.push_back(static_cast<std::int64_t>(layout.positions[static_cast<std::size_t>(first + m)].size()));
  return out;
}

/// Floats a Ulysses exchange pass holds at once: the gathered head-parallel tensors for the
/// whole pass plus the larger of its two all-to-alls (send + receive buffers). The saved
/// backward holds the context (Q, K, V, O, lse) and gathers only dO.
std::int64_t ulysses_peak_floats(const HeadSplit& sp, const std::vector<std::int64_t>& len, std::int64_t B,
                                 std::int64_t D, int me, bool backward, bool saved) {
  std::int64_t S = 0;
  for (std::int64_t l : len) S += l;
  const std::int64_t s = len[static_cast<std::size_t>(me)], u = sp.u, h = sp.heads, k = sp.kv_heads;
  if (!backward) {
    const std::int64_t gathered = B * S * (2 * h + 2 * k) * D + B * h * S;
    const std::int64_t in = B * (s * u + S) * (h + 2 * k) * D, back = B * (S + s * u) * h * (D + 1);
    return gathered + std::max(in, back);
  }
  const std::int64_t back = B * (S + s * u) * (h + 2 * k) * D;
  if (saved) {
    const std::int64_t gathered =
        B * S * (4 * h + 4 * k) * D + 2 * B * h * S;  // context, dO, dQ, dK, dV, delta
    return gathered + std::max(B * (s * u + S) * h * D, back);
  }
  const std::int64_t gathered = B * S * (3 * h + 4 * k) * D + 2 * B * h * S + B * h * u * s;  // + local delta
  const std::int64_t in = B * (s * u + S) * (h * (2 * D + 2) + 2 * k * D);
  return gathered + std::max(in, back);
}

}  // namespace

StrategyPlan strategy_plan(const DistConfig& cfg, const ProblemShape& shape, const SequenceLayout& layout,
                           const ResolvedMask& resolved, int ranks_per_node) {
  StrategyPlan out;
  const int P = layout.P;
  if (ranks_per_node <= 0) ranks_per_node = P;
  const std::int64_t B = shape.B, D = shape.D;
  BURST_CHECK(resolved.seq_q() == shape.S_global && resolved.seq_kv() == shape.S_global, Internal,
              "strategy plan of S_global=", shape.S_global, " under a mask resolved for (", resolved.seq_q(),
              ", ", resolved.seq_kv(), ")");
  try {
    switch (cfg.strategy) {
      case StrategyKind::Ulysses: {
        const HeadSplit s = make_head_split(shape.H, shape.H_kv, P, "ulysses");
        // Q, K, V, dO travel in their storage dtype (e bytes); a 16-bit forward's context is
        // keyed by its output rounded to that dtype (context_key), so the saved path holds.
        const bool saved = cfg.saved_contexts > 0;
        const auto e = static_cast<std::int64_t>(dtype_size(shape.dtype));
        out.forward_payload = "a2a Q,K,V seq->heads | a2a O,lse heads->seq";
        out.backward_payload =
            saved ? "a2a dO (Q,K,V,O,lse kept) | a2a dQ,dK,dV" : "a2a Q,dO,K,V,lse,delta | a2a dQ,dK,dV";
        const auto len = lengths_of(layout, 0, P);
        for (int r = 0; r < P; ++r) {
          out.forward_bytes.push_back(ulysses_forward_bytes(s, len, B, D, r, true, e));
          out.backward_bytes.push_back(ulysses_backward_bytes(s, len, B, D, r, saved, e));
          out.visible_pairs.push_back(resolved.visible_pairs() / P);
          out.forward_peak.push_back(4 * ulysses_peak_floats(s, len, B, D, r, false, false));
          out.backward_peak.push_back(4 * ulysses_peak_floats(s, len, B, D, r, true, saved));
          out.backward_stateless_peak.push_back(4 * ulysses_peak_floats(s, len, B, D, r, true, false));
        }
        break;
      }
      case StrategyKind::Usp: {
        const int u = resolve_ulysses_degree(cfg.ulysses_degree, P, shape.H_kv);
        if (u < 1 || P % u != 0) break;
        const HeadSplit s = make_head_split(shape.H, shape.H_kv, u, "usp");
        const auto groups = usp_ring_groups(layout, u);
        const bool burst = cfg.usp_ring == UspRing::Burst;
        const RingTopology topo = usp_ring_topology(P, u, ranks_per_node, cfg.double_ring);
        out.forward_payload = "a2a(u=" + std::to_string(u) + ") Q,K,V | " + (burst ? "burst " : "") +
                              "ring(r=" + std::to_string(P / u) + ", " + std::to_string(topo.nodes) + "x" +
                              std::to_string(topo.ranks_per_node) + ") K,V | a2a O,lse";
        // Q, K, V, dO travel in their storage dtype (e bytes) through the all-to-alls and the
        // ring; a 16-bit forward's context is keyed by its rounded output (as ulysses').
        const bool saved = cfg.saved_contexts > 0;
        const auto e = static_cast<std::int64_t>(dtype_size(shape.dtype));
        out.backward_payload = std::string(saved ? "a2a dO (Q,K,V,O,lse kept)" : "a2a Q,dO,K,V,lse,delta") +
                               (burst ? " | ring Q,dO,delta,lse + dQ" : " | ring K,V + dK,dV") +
                               " | a2a dQ,dK,dV";
        std::vector<std::int64_t> all(static_cast<std::size_t>(shape.S_global));
        for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<std::int64_t>(i);
        for (int r = 0; r < P; ++r) {
          const auto len = lengths_of(layout, r / u * u, u);
          const auto& grp = groups[static_cast<std::size_t>(r / u)];
          const std::int64_t S = static_cast<std::int64_t>(grp.size()), kvb = 2 * B * S * s.kv_heads * D;
          out.forward_bytes.push_back(ulysses_forward_bytes(s, len, B, D, r % u, true, e) +
                                      ring_group_forward_bytes(groups, B, s.kv_heads, D, r / u, e));
          out.backward_bytes.push_back(
              ulysses_backward_bytes(s, len, B, D, r % u, saved, e) +
              (burst ? burst_group_backward_bytes(groups, topo, B, s.heads, D, e)
                     : ring_group_backward_bytes(groups, topo, B, s.kv_heads, D, r / u, e)));
          out.visible_pairs.push_back(resolved.visible_pairs(grp, all) / u);
          // Ring: the partial (out, lse) and three K,V buffers (own, in flight, in use); backward
          // three K,V and three dK,dV buffers. Burst-USP (ring_skeleton.h): two read buffers
          // (four on a double ring: inter copy and receive) and 4 + nodes dQ buffers; its
          // forward's K,V likewise.
          const std::int64_t rd = topo.nodes > 1 ? 4 : 3;
          const std::int64_t qb = B * S * s.heads * D, readb = B * S * s.heads * (2 * D + 2);
          const std::int64_t ring_fwd = burst ? rd * kvb : 3 * kvb;
          const std::int64_t ring_bwd = burst ? rd * readb + (4 + topo.nodes) * qb : 6 * kvb;
          out.forward_peak.push_back(4 * (ulysses_peak_floats(s, len, B, D, r % u, false, false) +
                                          B * S * s.heads * (D + 1) + ring_fwd));
          out.backward_peak.push_back(4 * (ulysses_peak_floats(s, len, B, D, r % u, true, saved) + ring_bwd));
          out.backward_stateless_peak.push_back(
              4 * (ulysses_peak_floats(s, len, B, D, r % u, true, false) + ring_bwd));
        }
        break;
      }
      case StrategyKind::HeadParallel: {
        const HeadSplit s = make_head_split(shape.H, shape.H_kv, P, "headpar");
        out.forward_payload = "all-gather Q,K,V | reduce-scatter O,lse (full width)";
        out.backward_payload = "all-gather Q,dO,K,V,lse,delta | reduce-scatter dQ,dK,dV";
        const std::int64_t S = shape.S_global, H = shape.H, Hk = shape.H_kv, h = s.heads, k = s.kv_heads;
        for (int r = 0; r < P; ++r) {
          const std::int64_t n =
              static_cast<std::int64_t>(layout.positions[static_cast<std::size_t>(r)].size());
          out.forward_bytes.push_back(headpar_forward_bytes(layout, shape, r));
          out.backward_bytes.push_back(headpar_backward_bytes(layout, shape, r));
          out.visible_pairs.push_back(resolved.visible_pairs() / P);
          // Gathered heads + all-gather send/receive + reduce-scatter send/receive (full width).
          out.forward_peak.push_back(4 * (B * S * (2 * h + 2 * k) * D + B * h * S +
                                          B * (n + S) * (H + 2 * Hk) * D + B * (S + n) * H * (D + 1)));
          out.backward_peak.push_back(4 * (B * S * (3 * h + 4 * k) * D + 2 * B * h * S + B * H * n +
                                           B * (n + S) * (2 * H * D + 2 * Hk * D + 2 * H) +
                                           B * (S + n) * (H + 2 * Hk) * D));
        }
        break;
      }
      case StrategyKind::DistFlash: {
        check_distflash_support(layout.kind, shape, resolved, P);
        const DistFlashSchedule sched = make_distflash_schedule(resolved, shape.S_global, P);
        out.forward_payload =
            std::to_string(sched.steps) + " steps: K,V to late ranks; Q to helpers, (O,lse) back";
        out.backward_payload =
            std::to_string(sched.steps) + " steps: K,V + dK,dV back; Q,dO,lse,delta to helpers, dQ back";
        const std::int64_t c = shape.S_global / P;
        const ChunkFloats f{B * c * shape.H * D, B * c * shape.H_kv * D, B * shape.H * c,
                            static_cast<std::int64_t>(dtype_size(shape.dtype))};
        for (int r = 0; r < P; ++r) {
          out.forward_bytes.push_back(distflash_forward_bytes(sched, f, r));
          out.backward_bytes.push_back(distflash_backward_bytes(sched, f, r));
          std::int64_t pairs = 0;
          for (int t = 0; t < sched.steps; ++t)
            for (const auto* m : {&sched.local, &sched.help}) {
              const FlashBlock& b = (*m)[static_cast<std::size_t>(t)][static_cast<std::size_t>(r)];
              if (b.valid()) pairs += distflash_block_pairs(resolved, c, b.q, b.kv);
            }
          out.visible_pairs.push_back(pairs);
          // Own payloads, the next step's inbox (two of them across a step boundary), the
          // returned partials / gradients of two steps (one travels during the next step's
          // compute) and one step's outgoing result.
          out.forward_peak.push_back(4 * (2 * f.kv + f.q + 2 * (2 * f.kv + f.q) + 3 * (f.q + f.row) + f.row));
          out.backward_peak.push_back(4 *
                                      (2 * f.kv + 2 * f.q + 2 * f.row + 2 * (2 * f.kv + 2 * f.q + 2 * f.row) +
                                       3 * (2 * f.kv + f.q) + f.row));
        }
        break;
      }
      default: break;
    }
  } catch (const Error&) {
    return {};  // unsupported configuration: the strategy's validation reports it
  }
  return out;
}

void fill_strategy_passes(const DistConfig& cfg, const ProblemShape& shape, const SequenceLayout& layout,
                          const ResolvedMask& mask, int ranks_per_node, PassPlan& forward,
                          PassPlan& backward) {
  const StrategyPlan peer = strategy_plan(cfg, shape, layout, mask, ranks_per_node);
  if (peer.empty()) {
    forward.bytes_sent.clear();
    backward.bytes_sent.clear();
    return;
  }
  const auto fill = [&](PassPlan& pass, const std::vector<std::int64_t>& bytes,
                        const std::vector<std::int64_t>& peak, const std::string& payload) {
    pass.bytes_sent = bytes;
    pass.visible_pairs = peer.visible_pairs;
    pass.peak_buffer_bytes = peak;
    for (PlanStep& step : pass.steps) {
      step.payload = payload;
      step.bytes_sent = bytes;
      step.visible_pairs = peer.visible_pairs;
    }
  };
  fill(forward, peer.forward_bytes, peer.forward_peak, peer.forward_payload);
  fill(backward, peer.backward_bytes, peer.backward_peak, peer.backward_payload);
}

}  // namespace burst::strategies
