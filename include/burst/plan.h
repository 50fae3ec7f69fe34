// burst/plan.h — pure planning: who owns which global tokens and what moves at each step.
//
// Owns: sequence layouts (contiguous, zigzag, striped, balanced) and the per-strategy plan
// (steps, payloads, bytes) that strategies execute, the cost model scores and `burst plan`
// prints. Invariants: computed without MPI, identical on every rank for identical inputs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "burst/attention.h"
#include "burst/mask.h"
#include "burst/tensor.h"

namespace burst {

class Timeline;  // strategy.h

enum class LayoutKind : std::uint8_t { Contiguous, Zigzag, Striped, Balanced };
const char* to_string(LayoutKind kind) noexcept;
LayoutKind layout_from_string(const std::string& name);  ///< Throws Error(InvalidArgument)

/// Assignment of the S_global tokens to P ranks. positions[r] is increasing.
struct SequenceLayout {
  LayoutKind kind = LayoutKind::Contiguous;
  int P = 1;
  std::int64_t S_global = 0;
  std::vector<std::vector<std::int64_t>> positions;
};

/// Builds a layout. zigzag: 2P chunks, rank r holds chunks r and 2P−1−r; striped: token t on
/// rank t mod P; balanced: contiguous chunks assigned so per-rank visible work under `mask`
/// is even. Throws Error(InvalidArgument) when S_global is not divisible as the layout needs
/// (contiguous/striped: P; zigzag: 2P).
SequenceLayout make_layout(LayoutKind kind, int P, std::int64_t S_global, const Mask& mask = {});
/// As above with the mask already resolved over (S_global, S_global) (DistAttention resolves it
/// once); only `balanced` reads it. Throws Error(InvalidArgument) also when the mask was
/// resolved for other lengths.
SequenceLayout make_layout(LayoutKind kind, int P, std::int64_t S_global, const ResolvedMask& mask);

/// A layout the caller states rank by rank (e.g. ring-flash-attention's varlen split, which cuts
/// every packed document into P or 2P chunks): positions[r] are the global positions rank r
/// holds, increasing. `kind` is only recorded. Pure. Throws Error(InvalidArgument) unless there
/// are P lists of equal length that together are a permutation of [0, S_global).
SequenceLayout make_explicit_layout(LayoutKind kind, int P, std::int64_t S_global,
                                    std::vector<std::vector<std::int64_t>> positions);

/// The smallest length ≥ S_global that `kind` splits over P ranks: the next multiple of P (2P for
/// zigzag). Pure. Throws Error(InvalidArgument) for P < 1 or S_global < 1.
std::int64_t padded_length(LayoutKind kind, int P, std::int64_t S_global);
/// `mask` confined to the real tokens [0, S_global) so that it can be resolved at a padded
/// length: a padding position (≥ S_global) sees no key and no query sees it, hence out = 0,
/// lse = −inf and zero gradients there (mask.h). Shorthands become the equivalent slice; explicit
/// slices already lie in [0, S_global). Pure.
Mask mask_without_padding(const Mask& mask, std::int64_t S_global);

/// Copies rank `rank`'s tokens from a global BSHD tensor [B,S_global,H,D] into a local one
/// [B,S_local,H,D] (shard) and back (unshard). Not collective; pure.
void shard(const SequenceLayout& layout, int rank, const TensorView& global, const TensorView& local);
void unshard(const SequenceLayout& layout, int rank, const TensorView& local, const TensorView& global);

/// Checks that `layout` is a bijection of [0, S_global) onto its P ranks with increasing
/// positions per rank. Throws Error(Internal) naming the first violation. Pure.
void check_layout(const SequenceLayout& layout);
/// Per-rank visible (q, k) pairs of the rank's queries against the whole sequence under
/// `mask` — the forward work of the rank (per head, per batch). Pure.
std::vector<std::int64_t> layout_work(const SequenceLayout& layout, const ResolvedMask& mask);

// ------------------------------------------------------------------ strategies and problems
// (declared here, below strategy.h, because a plan is a function of them; strategy.h includes
// this header.)

/// HeadParallel ("headpar"): head-parallel attention with all-gather of Q, K, V and
/// reduce-scatter of O (docs/strategies.md § headpar); Megatron tensor parallelism of the whole
/// layer is the LM's `--strategy tp` (apps/lm/model_tp.h), not an attention strategy.
enum class StrategyKind : std::uint8_t { Burst, Ring, AllGather, Ulysses, Usp, DistFlash, HeadParallel };
/// Which side circulates in the backward: query side (Q, dO, D, lse + dQ ring; BurstAttention)
/// or KV side (K, V + dK, dV ring; RingAttention). Auto picks fewer bytes (docs/strategies.md).
enum class BackwardSide : std::uint8_t { Auto, QuerySide, KvSide };

/// usp's ring across the Ulysses groups: `Ring` — RingAttention's K,V ring with the dK,dV
/// backward (yunchang's USP); `Burst` — BurstEngine's hybrid (arXiv 2509.19836): burst's ring,
/// i.e. the query-side backward (Q, dO, delta, lse circulate with the dQ partial following).
/// Either runs on the topology-aware double ring when the ring's members span several nodes
/// and DistConfig::double_ring (docs/strategies.md §usp).
enum class UspRing : std::uint8_t { Ring, Burst };
const char* to_string(UspRing r) noexcept;
UspRing usp_ring_from_string(const std::string& name);  ///< "ring" | "burst"; throws Error(InvalidArgument)

const char* to_string(StrategyKind s) noexcept;
StrategyKind strategy_from_string(const std::string& name);  ///< Throws Error(InvalidArgument)
std::vector<StrategyKind> all_strategies();

struct DistConfig {
  StrategyKind strategy = StrategyKind::Burst;
  LayoutKind layout = LayoutKind::Zigzag;
  int ulysses_degree = 0;  ///< usp: Ulysses degree u (P = u·r); 0 → largest divisor of P dividing H_kv
  UspRing usp_ring = UspRing::Ring;  ///< usp: the ring across the Ulysses groups (Burst-USP: Burst)
  int ranks_per_node = 0;            ///< double ring's L (burst, ring, usp); 0 → discovered
  bool double_ring = true;           ///< burst, ring, usp: topology-aware double ring when nodes > 1
  BackwardSide backward_side = BackwardSide::Auto;
  bool overlap = true;  ///< double buffering + progress polling between tiles
  /// distflash: the partials a helper returns (O and lse forward; dQ, and dK, dV to the KV owner,
  /// backward) travel during the next step's compute and are merged after it, as LightSeq does
  /// (arXiv 2310.03294 §3.2). false waits for them inside the step that produced them (the
  /// ablation docs/strategies.md § distflash measures). Results are bitwise the same either way
  /// (merged in step order). No effect when overlap = false (then every transfer is waited for).
  bool return_overlap = true;
  /// burst, ring: mask-aware communication (MagiAttention's zero-redundant communication): when
  /// the mask leaves some (q rank, kv rank) block with no visible pair, a rank receives only the
  /// blocks its mask needs, straight from their owners, and steps nobody needs move nothing
  /// (docs/strategies.md § Mask-aware rings). false: every block circulates the whole ring.
  bool mask_aware = true;
  /// burst, ring: dtype of the write ring's wire copies — the dQ partials (query-side backward)
  /// or dK, dV partials (KV side) on their chain and home hops. F32 (default): exact fp32 sums.
  /// BF16: each hop sends its fp32 running sum rounded to bf16 (half the write bytes) and the
  /// receiver adds it into its fp32 accumulator, so the sum is rounded once per hop and its
  /// error grows with the hops (docs/strategies.md § bf16 write-ring partials). Other strategies
  /// accept F32 only (Error(Unsupported)); F16 is rejected (its range would overflow partials).
  DType partials_dtype = DType::F32;
  int num_threads = 0;  ///< kernel threads per rank; 0 → OpenMP default
  std::optional<float> softmax_scale;
  KernelImpl kernel = KernelImpl::Tiled;  ///< local kernel (Reference: the fp64 oracle, tests)
  /// Tiled-path ISA of every local kernel call; Auto → the fastest path for the dtype on each
  /// rank's CPU (burst/dispatch.h). An ISA some rank's CPU lacks is Error(Unsupported) on every
  /// rank. Not part of the agreed fingerprint (heterogeneous ranks may resolve Auto differently).
  Isa isa = Isa::Auto;
  /// S_global need not split as the layout needs: DistAttention pads the sequence to
  /// padded_length(layout, P, S_global) with tokens at positions ≥ S_global that are masked out
  /// (mask_without_padding); local tensors then hold the padded layout's tokens (S_padded / P
  /// per rank, padding included). Every strategy and layout.
  bool pad = false;
  /// Explicit layout (make_explicit_layout): positions[r] = rank r's global positions; empty →
  /// built from `layout`. burst, ring and allgather only (the other strategies derive their
  /// schedules from the layout kind); not combined with `pad`.
  std::vector<std::vector<std::int64_t>> positions;
  /// ulysses, usp: forward passes whose head-sharded Q, K, V, O, lse are kept for their backward
  /// (DeepSpeed's autograd context: the backward then moves only dO, dQ, dK, dV). One per layer
  /// that shares this DistAttention; 0 = stateless backward (regathers Q, K, V, lse, delta).
  int saved_contexts = 1;
  /// Communication watchdog (Communicator::set_timeout): a wait in which no transfer or
  /// collective of this DistAttention completes for this many seconds aborts the job with a
  /// message naming the rank, its host, the peers it waits on, the strategy, pass and ring step.
  /// 0 = wait forever. Not part of the agreed fingerprint (ranks may differ). Tools and the
  /// Python module take the default from BURST_COMM_TIMEOUT.
  double comm_timeout_seconds = 300;
  /// Per-step measurements (strategy.h, Timeline): when set, every pass appends one StepRecord
  /// per step of its plan for this rank (compute, wait and copy seconds, bytes). Not owned: it
  /// must outlive the passes that write to it. nullptr (default): nothing is recorded and no
  /// clock beyond the pass's usual ones is read. Not part of the agreed fingerprint (ranks may
  /// differ: a rank that records and one that does not run the same messages).
  Timeline* timeline = nullptr;
};

struct ProblemShape {
  std::int64_t B = 1, S_global = 0, H = 0, H_kv = 0, D = 0;
  /// Storage dtype of q, k, v, dout (F32, BF16 or F16; computed in fp32 either way). burst and
  /// ring move Q, K, V, dO in it; lse, delta and the dQ/dK/dV partials stay fp32 (unless
  /// DistConfig::partials_dtype); docs/strategies.md § Bytes per dtype gives every strategy's bytes.
  DType dtype = DType::F32;
};

/// Stable fingerprint of everything in (cfg, shape, mask) that must be identical on all ranks.
std::uint64_t fingerprint(const DistConfig& cfg, const ProblemShape& shape, const Mask& mask);

/// One step of one pass: what every rank computes and sends. Vectors are indexed by rank.
struct PlanStep {
  std::string payload;                      ///< what moves, e.g. "K,V" or "Q,dO,delta,lse | dQ"
  std::string link;                         ///< "intra", "inter", "intra+inter", "collective", "-"
  std::vector<int> partition;               ///< block (partition) each rank computes on; −1 none
  std::vector<int> send_to;                 ///< main payload destination of each rank; −1 none
  std::vector<std::int64_t> bytes_sent;     ///< per rank, this step (payload bytes)
  std::vector<std::int64_t> visible_pairs;  ///< per rank, (q, k) pairs per (batch, head) computed
};

/// One pass (forward or backward) of a plan.
struct PassPlan {
  std::string side;  ///< backward: "query" or "kv"; forward: "kv"
  std::vector<PlanStep> steps;
  std::vector<std::int64_t> bytes_sent;         ///< per rank, whole pass — the counters must equal it
  std::vector<std::int64_t> visible_pairs;      ///< per rank, whole pass
  std::vector<std::int64_t> peak_buffer_bytes;  ///< per rank bound on comm + working buffers
  /// burst, ring: the mask-aware schedule runs (DistConfig::mask_aware and some block empty):
  /// payloads go from owner to reader only where needed; link "direct".
  bool mask_aware = false;
  /// max/mean of visible_pairs over ranks (1 = perfectly balanced; 1 when no work).
  double balance() const;
};

/// The pure plan of one DistAttention: layout, per-step movement and predicted bytes.
/// Identical on every rank for identical inputs; never communicates.
class Plan {
 public:
  /// Builds the plan of exactly `shape` (cfg.pad is not applied here: DistAttention passes the
  /// padded shape and mask). `ranks_per_node` is the resolved L (1..P, P % L == 0) for the burst
  /// double ring; pass P (one node) when unknown. Throws Error(InvalidArgument) for invalid
  /// shapes / layouts (e.g. S_global % 2P ≠ 0 under zigzag). Strategy support is checked by
  /// the strategies, not here; for strategies without a step model the passes hold totals only.
  static Plan make(const DistConfig& cfg, const ProblemShape& shape, const Mask& mask, int P,
                   int ranks_per_node);
  /// As above with `mask` resolved over (shape.S_global, shape.S_global) by the caller
  /// (DistAttention resolves its mask once and hands the same object to the plan, the strategy
  /// plan and the strategies). Throws Error(InvalidArgument) when it was resolved for other lengths.
  static Plan make(const DistConfig& cfg, const ProblemShape& shape, const ResolvedMask& mask, int P,
                   int ranks_per_node);

  const DistConfig& config() const { return cfg_; }
  const ProblemShape& shape() const { return shape_; }
  const SequenceLayout& layout() const { return layout_; }
  int ranks() const { return layout_.P; }
  int nodes() const { return layout_.P / ranks_per_node_; }
  int ranks_per_node() const { return ranks_per_node_; }
  const PassPlan& forward() const { return forward_; }
  const PassPlan& backward() const { return backward_; }
  /// Resolved backward side (never Auto): burst under Auto picks the cheaper circulation from
  /// the byte formulas (docs/algorithm.md §4.4); ring always KvSide.
  BackwardSide backward_side() const { return side_; }
  /// Visible pairs of queries of rank i against keys of rank j ([i][j]).
  const std::vector<std::vector<std::int64_t>>& block_pairs() const { return block_pairs_; }
  /// A human-readable table of the plan (header, per-step rows, totals).
  std::string table() const;

 private:
  DistConfig cfg_;
  ProblemShape shape_;
  SequenceLayout layout_;
  int ranks_per_node_ = 1;
  BackwardSide side_ = BackwardSide::KvSide;
  PassPlan forward_, backward_;
  std::vector<std::vector<std::int64_t>> block_pairs_;
  std::string mask_text_;
};

/// Predicted backward bytes per rank of the two circulations on a flat or double ring with P
/// ranks, e = bytes per element of shape.dtype (4 f32, 2 bf16/f16), w = bytes of one partial
/// word on the write ring (4 for F32 partials, 2 for BF16: DistConfig::partials_dtype), rows fp32:
/// query side (P−1)·(e·2·b_q + 4·2·r) + P·w·b_q, KV side (P−1)·e·2·b_kv + P·w·2·b_kv, where
/// b_q = B·H·S_local·D, b_kv = B·H_kv·S_local·D, r = B·H·S_local (0 when P = 1); exact bytes
/// (src/wire_layout.h: nothing is padded in these messages). With e = w = 4 these are
/// 4·[(P−1)·(2·b_q + 2·r) + P·b_q] and 4·(2P−1)·2·b_kv. Source: docs/algorithm.md §4.2.
std::int64_t ring_backward_bytes(BackwardSide side, const ProblemShape& shape, int P,
                                 DType partials_dtype = DType::F32);
/// The Auto rule: QuerySide iff its bytes are ≤ the KV side's (with the same partials dtype).
BackwardSide choose_backward_side(const ProblemShape& shape, int P, DType partials_dtype = DType::F32);

}  // namespace burst
