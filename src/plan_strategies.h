// src/plan_strategies.h — pure planning of ulysses, usp, headpar and distflash (internal, no MPI; the
// ring family's steps are in plan_steps.cc). Namespace burst::strategies: the strategy files use it.
//
// What the head-parallel strategies (ulysses, usp, headpar) and DistFlashAttn decide before any
// message moves: which heads each rank owns under GQA (HeadSplit), DistFlashAttn's
// load-balanced causal schedule, whether a configuration is supported, and the documented
// per-rank byte formulas that the comm counters must equal (docs/strategies.md). Used by the
// strategy files, by Plan::make (predicted bytes) and by the tests. Computed identically on
// every rank; never communicates.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "burst/mask.h"
#include "burst/plan.h"

namespace burst::strategies {

// ------------------------------------------------------------------ heads (ulysses, usp, headpar)

/// Query/KV heads of each of `u` head-parallel ranks. Rank p owns query heads
/// [p·heads, (p+1)·heads) and KV heads [kv_lo(p), kv_lo(p) + kv_heads).
/// Two GQA regimes (g = H / H_kv query heads per KV head):
///  - H_kv % u == 0: KV heads are split like query heads (kv_heads = H_kv / u); no copies.
///  - otherwise u % H_kv == 0 (u > H_kv): KV heads are REPLICATED: rank p reads the one KV head
///    p / (u / H_kv), so u / H_kv ranks hold copies and their dK/dV contributions are summed
///    when gradients return to the token owner (torchtitan / LoongTrain "KV replication").
struct HeadSplit {
  std::int64_t H = 0, H_kv = 0;
  int u = 1;
  std::int64_t heads = 0;     ///< query heads per rank, H / u
  std::int64_t kv_heads = 0;  ///< KV heads per rank: H_kv / u, or 1 when replicated
  bool kv_replicated = false;

  std::int64_t q_lo(int p) const { return p * heads; }
  std::int64_t kv_lo(int p) const { return kv_replicated ? p / (u / static_cast<int>(H_kv)) : p * kv_heads; }
};

/// Builds the split. Throws Error(Unsupported) naming `strategy`, H, H_kv and u when H % u ≠ 0
/// or when neither H_kv % u == 0 nor u % H_kv == 0; Error(InvalidArgument) for u < 1, H < 1 or
/// H % H_kv ≠ 0. Pure.
HeadSplit make_head_split(std::int64_t H, std::int64_t H_kv, int u, const char* strategy);

/// Bytes (fp32) member `me` of a Ulysses group of u = split.u members holding S_local[j]
/// tokens each sends in one forward / backward pass:
///  fwd: Σ_{j≠me} 4·B·[S_local(me)·(heads + 2·kv_heads)·D  (Q, K, V)  + S_local(j)·heads·D  (O)
///                     + S_local(j)·heads  (lse, only when with_lse: the caller asked for it)]
///  bwd, saved (the forward's head-sharded Q, K, V, O, lse kept as context — DeepSpeed's
///       autograd context): Σ_{j≠me} 4·B·[S_local(me)·heads·D  (dO)  + S_local(j)·(heads + 2·kv_heads)·D
///       (dQ, dK, dV)];
///  bwd, stateless (no saved context of these inputs): Σ_{j≠me} 4·B·[S_local(me)·(heads·(2D + 2)
///       + 2·kv_heads·D)  (Q, dO, lse, delta, K, V)  + S_local(j)·(heads + 2·kv_heads)·D  (dQ, dK, dV)].
/// With equal shards and MHA the forward without lse and the saved backward both move
/// 4·(u−1)/u·B·S_local·H·D floats per rank: DeepSpeed's 4 all-to-alls each way (arXiv
/// 2309.14509 §3.1). Per dtype (e = bytes per element of Q, K, V, dO: 4 f32, 2 bf16/f16): the
/// inputs Q, K, V, dO count e bytes per element instead of 4, the rest (O, lse, delta, dQ, dK,
/// dV) stays fp32, and each partner's message is the WireLayout of its fields (wire_layout.h:
/// the stateless backward's lse, delta start at the next 4-byte boundary after the 16-bit
/// fields; nothing else is padded), the bytes the exchange sends. Pure.
std::int64_t ulysses_forward_bytes(const HeadSplit& split, const std::vector<std::int64_t>& S_local,
                                   std::int64_t B, std::int64_t D, int me, bool with_lse = true,
                                   std::int64_t e = 4);
std::int64_t ulysses_backward_bytes(const HeadSplit& split, const std::vector<std::int64_t>& S_local,
                                    std::int64_t B, std::int64_t D, int me, bool saved = true,
                                    std::int64_t e = 4);

// ------------------------------------------------------------------ usp

/// usp's Ulysses degree u: `requested` when > 0, else the largest divisor of P dividing H_kv.
int resolve_ulysses_degree(int requested, int P, std::int64_t H_kv);
/// Sorted global positions of each of the P/u Ulysses groups (ranks [g·u, (g+1)·u)) — what
/// ring member g holds after the all-to-all. Pure.
std::vector<std::vector<std::int64_t>> usp_ring_groups(const SequenceLayout& layout, int u);
/// Whether cfg runs a topology-aware ring: burst, ring or usp (either usp_ring), when
/// cfg.double_ring. The façade then discovers the node topology and Plan::make keeps
/// ranks_per_node. Pure.
bool uses_node_topology(const DistConfig& cfg);
/// Nodes × members per node of usp's ring (RingAttention's or, usp_ring = burst, burst's) over
/// the r = P/u Ulysses groups. Ring member i
/// (ranks [i·u, (i+1)·u)) lies on node ⌊i·u/L⌋ (L = ranks per node): L % u == 0 gives L/u
/// members on each of P/L nodes (BurstEngine: Ulysses inside a node, the double ring across
/// nodes); u % L == 0 gives one member per node (r nodes × 1); otherwise a group straddles
/// nodes and the ring is flat (1 × r), as it is without double_ring. Pure.
struct RingTopology {
  int nodes = 1, ranks_per_node = 1;
};
RingTopology usp_ring_topology(int P, int u, int L, bool double_ring);
/// Bytes ring member i sends in Burst-USP's query-side backward over `groups` (equal sizes S_g,
/// heads per rank) on a ring of `topo` (r = nodes·ranks_per_node members): Q, dO (e bytes per
/// element: 4 f32, 2 bf16/f16), delta, lse (fp32) hop r − 1 times; the fp32 dQ partial follows
/// on the write chain, w = r hops (chain inside a node, one home hop per round), w = r − 1 when
/// ranks_per_node = 1 (round 0's block is the member's own):
/// (r − 1)·B·S_g·heads·(2·e·D + 8) + 4·w·B·S_g·heads·D, 0 when r = 1
/// (docs/algorithm.md §3, §7 on the group's tensors). The forward is usp's K,V ring
/// (ring_group_forward_bytes). Pure.
std::int64_t burst_group_backward_bytes(const std::vector<std::vector<std::int64_t>>& groups,
                                        RingTopology topo, std::int64_t B, std::int64_t heads, std::int64_t D,
                                        std::int64_t e = 4);
/// Bytes ring member i sends in usp's K,V ring over `groups` (kv_heads per rank; K, V in e
/// bytes per element — 4 f32, 2 bf16/f16 — the dK, dV partials in fp32):
///  fwd Σ_{s=0}^{r−2} 2·B·|group (i−s) mod r|·kv_heads·D · e  (K, V forwarded r−1 times);
///  bwd the same K, V hops plus dK, dV of the held block at each of the r steps (the last hop
///  brings them home): equal groups give 2·B·S_group·kv_heads·D·((r−1)·e + r·4) (0 when r = 1).
///  The same on the double ring of `topo` (chain hops inside a node, one home hop per round),
///  except with one member per node (ranks_per_node = 1): round 0's block is the member's own
///  and its dK, dV stay, 2·B·S_group·kv_heads·D·(r−1)·(e + 4). The forward is the same on any topo.
std::int64_t ring_group_forward_bytes(const std::vector<std::vector<std::int64_t>>& groups, std::int64_t B,
                                      std::int64_t kv_heads, std::int64_t D, int i, std::int64_t e = 4);
std::int64_t ring_group_backward_bytes(const std::vector<std::vector<std::int64_t>>& groups,
                                       RingTopology topo, std::int64_t B, std::int64_t kv_heads,
                                       std::int64_t D, int i, std::int64_t e = 4);

// ------------------------------------------------------------------ headpar

/// Bytes rank `rank` sends in headpar's forward / backward (S_i = tokens of rank i; e = bytes
/// per element of Q, K, V, dO in shape.dtype — 4 f32, 2 bf16/f16; ⌈·⌉₄ rounds up to a multiple
/// of 4 bytes, where the fp32 fields of a block start; wire_layout.h):
///  fwd: all-gather of Q, K, V, (P−1)·e·B·S_rank·(H + 2·H_kv)·D, plus reduce-scatter of O, lse
///       (fp32) zero-padded to all heads, 4·Σ_{i≠rank} B·S_i·H·(D + 1);
///  bwd: all-gather of Q, dO, K, V (e) and lse, delta (fp32) in one block per rank,
///       (P−1)·(⌈e·B·S_rank·(2·H·D + 2·H_kv·D)⌉₄ + 8·B·S_rank·H), plus reduce-scatter of dQ, dK, dV
///       (fp32), 4·Σ_{i≠rank} B·S_i·(H + 2·H_kv)·D.
/// Pure. Source: Megatron-LM sequence parallelism (arXiv 2205.05198; AG + RS over the full width).
std::int64_t headpar_forward_bytes(const SequenceLayout& layout, const ProblemShape& shape, int rank);
std::int64_t headpar_backward_bytes(const SequenceLayout& layout, const ProblemShape& shape, int rank);

// ------------------------------------------------------------------ distflash

// DistFlashAttn / LightSeq (arXiv 2310.03294, RulinShao/LightSeq `lightseq_async_attn.py`),
// docs/strategies.md § distflash. Contiguous layout: rank r owns chunk r. A causal-like mask needs
// the blocks (q chunk i, kv chunk j) with j ≤ i; the distance i − j decides who computes it:
//  - distance t ≤ L = ⌊P/2⌋: the query owner i computes it itself at step t, after receiving
//    K_j, V_j from rank j (step 0 is the diagonal, no message);
//  - distance d > L: the KV owner j — idle by then, because its own work ends at step j — computes
//    it at step t = P − d with its own K_j, V_j, after receiving Q_i (fwd) or Q_i, dO_i, lse_i,
//    delta_i (bwd) from rank i, and sends the partial (O, lse) or dQ back to rank i.
// Steps 0..L: ⌊P/2⌋ + 1 instead of the ring's P; every block of the causal triangle is
// computed exactly once. Blocks the mask leaves empty are neither computed nor shipped.
// This generalises the code's even-P schedule to any P: odd P gives every rank exactly one
// block per step ((P+1)/2 steps × P ranks = P(P+1)/2 blocks); even P leaves P/2 ranks idle in
// the last step.

/// One (q chunk, kv chunk) block of the schedule. q < 0 means "nothing".
struct FlashBlock {
  int q = -1, kv = -1;
  bool valid() const { return q >= 0; }
};

/// The whole schedule, identical on every rank. local[t][r]: the block rank r computes for
/// itself at step t (q == r); help[t][r]: the block rank r computes for another rank at step t
/// (kv == r, q ≠ r).
struct DistFlashSchedule {
  int P = 1;
  int steps = 1;  ///< ⌊P/2⌋ + 1
  std::vector<std::vector<FlashBlock>> local, help;
};

/// Builds the schedule for P ranks; `needed(q, kv)` (kv ≤ q) says whether the mask leaves any
/// visible pair in the block (the diagonal is always kept so every rank initialises its
/// output). Pure. Throws Error(InvalidArgument) for P < 1.
DistFlashSchedule make_distflash_schedule(int P, const std::function<bool(int, int)>& needed);

/// Sizes of one chunk, in elements: Q/O/dO/dQ (B·c·H·D), K/V/dK/dV (B·c·H_kv·D), one row
/// vector lse/delta (B·H·c); e = bytes per element of Q, K, V, dO (4 f32, 2 bf16/f16: they
/// travel in their storage dtype), partials O, dQ, dK, dV and rows always 4 bytes.
struct ChunkFloats {
  std::int64_t q = 0, kv = 0, row = 0;
  std::int64_t e = 4;
};

/// Bytes rank `rank` sends in a forward / backward pass under the schedule:
///  fwd: K,V (2·kv·e) per local off-diagonal block it serves; Q (q·e) per helped block of its
///       queries; partial O and lse (4·(q + row)) per block it
///       helps with.
///  bwd: K,V (2·kv·e) per local off-diagonal block it serves, dK,dV (4·2·kv) back per
///       off-diagonal local block of its queries; Q, dO (2·q·e), lse, delta (4·2·row) per helped
///       block of its queries; dQ (4·q) per block it helps with.
std::int64_t distflash_forward_bytes(const DistFlashSchedule& s, const ChunkFloats& c, int rank);
std::int64_t distflash_backward_bytes(const DistFlashSchedule& s, const ChunkFloats& c, int rank);

/// Exact visible pairs of the block (q chunk i, kv chunk j) of c-token contiguous chunks.
std::int64_t distflash_block_pairs(const ResolvedMask& mask, std::int64_t c, int i, int j);
/// The schedule for the contiguous layout of S_global tokens under `mask` (blocks with no
/// visible pair skipped).
DistFlashSchedule make_distflash_schedule(const ResolvedMask& mask, std::int64_t S_global, int P);
/// Throws Error(Unsupported) unless the layout is contiguous and no visible pair has its key in
/// a later chunk than its query (causal-like at chunk granularity: causal, causal windows,
/// causal documents, causal block-sparse, prefix-LM whose prefix stays inside one chunk);
/// Error(InvalidArgument) when P does not divide S_global. `mask`: resolved over
/// (S_global, S_global). Pure.
void check_distflash_support(LayoutKind layout, const ProblemShape& shape, const ResolvedMask& mask, int P);

// ------------------------------------------------------------------ plan entries

/// Per-rank plan numbers of one configuration of a peer strategy (ulysses, usp, distflash,
/// headpar), the same numbers the strategy reports in DistStats:
///  forward_bytes / backward_bytes: the byte formulas above;
///  visible_pairs: the rank's share of the work in (q, k) pairs per (batch, head) — ulysses and
///    headpar: visible pairs of the whole mask / P (every rank does all pairs for H/P heads); usp:
///    its group's queries against the whole sequence / u; distflash: the blocks it computes;
///  forward_peak / backward_peak: bytes of the working and communication buffers a pass holds
///    at once (gathered head-parallel tensors, exchange or ring buffers, payload copies);
///    ulysses and usp: backward_bytes / backward_peak of the saved-context backward when
///    cfg.saved_contexts > 0 (else stateless), backward_stateless_peak that of the stateless one.
/// All empty for other strategies and for configurations the strategy rejects (never throws),
/// so Plan::make can always call it.
struct StrategyPlan {
  std::vector<std::int64_t> forward_bytes, backward_bytes, visible_pairs, forward_peak, backward_peak;
  std::vector<std::int64_t> backward_stateless_peak;  ///< ulysses, usp only
  std::string forward_payload, backward_payload;      ///< what moves, for Plan::table()
  bool empty() const { return forward_bytes.empty(); }
};
/// `mask`: resolved over (shape.S_global, shape.S_global) — the caller's one resolution (the
/// type keeps a second one from happening here). `ranks_per_node`: the resolved L of usp
/// ring=burst's double ring (0 → one node).
StrategyPlan strategy_plan(const DistConfig& cfg, const ProblemShape& shape, const SequenceLayout& layout,
                           const ResolvedMask& mask, int ranks_per_node = 0);

/// Fills the totals of a one-step pass (Plan::make's collective_pass) from strategy_plan: bytes,
/// visible pairs and peak per rank, in the pass and in its single step. Leaves the passes alone
/// (bytes_sent cleared) when strategy_plan is empty.
void fill_strategy_passes(const DistConfig& cfg, const ProblemShape& shape, const SequenceLayout& layout,
                          const ResolvedMask& mask, int ranks_per_node, PassPlan& forward,
                          PassPlan& backward);

}  // namespace burst::strategies
