// burst/cost_model.h — the planner: predicted time, bytes and memory of every context-parallel
// strategy on a cluster that may not be this machine.
//
// Owns: ClusterSpec (devices, compute rates, links), Workload (the attention problem), the
// α–β link and collective formulas, a dependency-driven step simulator (a rank starts step t+1
// when its own step-t compute is done AND the payload for t+1 has arrived), per-strategy
// schedules (which (q-shard, kv-shard) block every rank computes at every step, what it sends
// on which link) and the ranked recommendation.
// Imbalance is modelled, not assumed: per-block work is the mask's visible-pair count of the
// layout's (q-rank, kv-rank) blocks (ResolvedMask::visible_pairs), so a causal mask on the
// contiguous layout costs what the slowest rank does.
// Invariants: pure — never communicates, never times anything, deterministic.
// Does not: model congestion between concurrent collectives, NIC sharing across jobs, kernel
// efficiency changing with the block size beyond a fixed per-call overhead, or memory
// fragmentation. See docs/cost_model.md for the formulas, their sources and the limits.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "burst/mask.h"
#include "burst/plan.h"

namespace burst {

/// One cluster as the model sees it. Rates are per device (a GPU, or one single-threaded rank on
/// a CPU), bandwidths are unidirectional per device in bytes/s, latencies in seconds.
struct ClusterSpec {
  std::string name = "unnamed";
  int nodes = 1;                             ///< nodes
  int devices_per_node = 1;                  ///< L: devices (ranks) per node
  double matmul_flops = 0;                   ///< dense matmul FLOP/s per device, compute dtype
  double attention_efficiency_forward = 1;   ///< attention-kernel FLOP/s ÷ matmul_flops, forward
  double attention_efficiency_backward = 1;  ///< same, backward (FLOPs counted as 2.5× forward)
  /// Attention-kernel FLOP/s with bf16 operands (Workload::bf16_arithmetic) ÷ the fp32 rate
  /// above, forward and backward. 1: bf16 runs at the same rate (a CPU whose bf16 requests are
  /// widened to fp32, or a GPU spec whose matmul_flops is already its bf16 rate). `burst
  /// calibrate` measures them for the path the dispatch rule picks for bf16 on the CPU (AMX tiles
  /// or vdpbf16ps; burst/dispatch.h, docs/cost_model.md).
  double bf16_speedup_forward = 1, bf16_speedup_backward = 1;
  double kernel_call_seconds = 0;  ///< fixed overhead per attention-kernel call (forward)
  /// Same for a backward call (delta, packing and accumulation are per-call costs too);
  /// < 0 → kernel_call_seconds.
  double kernel_call_seconds_backward = -1;
  /// Dense linear layers' FLOP/s ÷ matmul_flops (whole-layer mode only, Workload::whole_layer).
  double linear_efficiency = 1;
  /// Kernel tile rows (q × kv). > 0: work is counted at tile granularity — a tile with any
  /// visible pair costs its whole area, as tiled kernels compute partial tiles whole and mask
  /// them; 0: visible pairs only.
  int kernel_tile_q = 0, kernel_tile_kv = 0;
  /// Tile rows of the backward kernel (q × kv) when it tiles differently (this library's Tiled
  /// backward: 64 × 96); 0 → the forward's tiles.
  int kernel_tile_q_backward = 0, kernel_tile_kv_backward = 0;
  /// Measured kernel thread scaling on this host (ranks × threads, kernel_thread_efficiency):
  /// entry T − 1 = the attention kernel's rate at T threads ÷ (T × its one-thread rate), forward
  /// and backward, measured on one rank's shape (the many-core host check fills them from `burst
  /// bench kernel`). Empty, or shorter than T: the item count alone decides.
  std::vector<double> thread_scaling_forward, thread_scaling_backward;
  /// Per-element masking of Partial tiles (tile mode only): seconds per query row of each
  /// Partial tile, per head and batch (the kernel builds each row's visible ranges and writes
  /// −inf); partial_row_seconds_backward < 0 → the forward value. 0: not charged.
  double partial_row_seconds = 0;
  double partial_row_seconds_backward = -1;
  /// The part of that per-row cost that grows with the head dim D: seconds per Partial-tile row
  /// per unit of D (forward; backward), added to the above as t_row(D) = partial_row_seconds +
  /// D · partial_row_seconds_per_dim. `burst calibrate` fits the backward's line through its
  /// masking probe at five head dims (most of that cost is this part) and keeps the forward's
  /// flat (docs/cost_model.md). 0: the same cost at every D.
  double partial_row_seconds_per_dim = 0;
  double partial_row_seconds_per_dim_backward = 0;
  double memory_bandwidth = 0;  ///< device memory bytes/s (elementwise passes)
  double memory_capacity = 0;   ///< device memory bytes (0 → unlimited)
  double intra_bandwidth = 0;   ///< bytes/s per device to a peer in its node
  double intra_latency = 0;     ///< seconds per intra-node message
  double inter_bandwidth = 0;   ///< bytes/s per device to a peer in another node
  double inter_latency = 0;     ///< seconds per inter-node message
  /// Inter-node links (NICs) per node that its devices share: 0 → one per device (rails, as on
  /// GPU clusters). n in 1..devices_per_node−1: local device d sends on link d mod n, so the
  /// messages of the devices sharing a link go out one after the other (a CPU node with one
  /// NIC: n = 1). inter_bandwidth is what one link gives one sender. `burst calibrate` measures
  /// it (docs/cost_model.md § Shared inter-node links).
  int inter_links_per_node = 0;
  /// Bytes/s per inter-node link stream that collectives across nodes (all-gather,
  /// reduce-scatter, all-to-all) reach, where it differs from point-to-point inter_bandwidth
  /// (many concurrent flows through one link, the MPI library's own algorithms); 0 →
  /// inter_bandwidth. `burst calibrate` measures it from an all-gather over every rank.
  double inter_collective_bandwidth = 0;
  /// The same for a reduce-scatter, whose algorithm differs (Open MPI's non-blocking one reduces
  /// whole buffers up a tree, then scatters); 0 → collective_inter_bandwidth().
  double inter_reduce_scatter_bandwidth = 0;
  /// Bytes/s per block that an all-gather among a node's devices reaches, where it differs from
  /// point-to-point intra_bandwidth (every device of the node copying at once through shared
  /// memory and caches, on cores they may share); 0 → intra_bandwidth. `burst calibrate`
  /// measures it from an all-gather over node 0's ranks.
  double intra_collective_bandwidth = 0;
  /// The same for a reduce-scatter among a node's devices; 0 → collective_intra_bandwidth().
  double intra_reduce_scatter_bandwidth = 0;
  /// Devices of a node that can compute at once (cores ÷ threads per rank on a CPU node); 0 →
  /// each device is its own. With more devices on a node than that (ranks oversubscribing a
  /// machine's cores), the devices computing at a moment share the slots: each runs at
  /// min(1, slots / busy) of the rates above, which are one device's alone. `burst calibrate`
  /// sets it when it finds the ranks sharing cores.
  int compute_slots_per_node = 0;
  /// inter_collective_bandwidth, or inter_bandwidth when it is 0.
  double collective_inter_bandwidth() const {
    return inter_collective_bandwidth > 0 ? inter_collective_bandwidth : inter_bandwidth;
  }
  /// intra_collective_bandwidth, or intra_bandwidth when it is 0.
  double collective_intra_bandwidth() const {
    return intra_collective_bandwidth > 0 ? intra_collective_bandwidth : intra_bandwidth;
  }
  /// intra_reduce_scatter_bandwidth, or collective_intra_bandwidth() when it is 0.
  double reduce_scatter_intra_bandwidth() const {
    return intra_reduce_scatter_bandwidth > 0 ? intra_reduce_scatter_bandwidth : collective_intra_bandwidth();
  }
  /// inter_reduce_scatter_bandwidth, or collective_inter_bandwidth() when it is 0.
  double reduce_scatter_inter_bandwidth() const {
    return inter_reduce_scatter_bandwidth > 0 ? inter_reduce_scatter_bandwidth : collective_inter_bandwidth();
  }
  /// Which inter-node link device `rank` (0-based over the cluster) sends on: its own when
  /// inter_links_per_node is 0 or ≥ devices_per_node, else node·n + local mod n offset past
  /// the devices (ids never collide with a device's own).
  int inter_link_of(int rank) const {
    if (!inter_links_shared()) return rank;
    return devices() + (rank / devices_per_node) * inter_links_per_node +
           (rank % devices_per_node) % inter_links_per_node;
  }
  /// Devices of a node sending on one inter-node link at once (1 with a link per device).
  int devices_per_inter_link() const {
    if (!inter_links_shared()) return 1;
    return (devices_per_node + inter_links_per_node - 1) / inter_links_per_node;
  }
  /// Whether some devices of a node share an inter-node link (0 < inter_links_per_node <
  /// devices_per_node).
  bool inter_links_shared() const {
    return inter_links_per_node > 0 && inter_links_per_node < devices_per_node;
  }
  std::string source;  ///< where the numbers come from (URLs, calibration run)

  int devices() const { return nodes * devices_per_node; }
  /// kernel_call_seconds, or for a backward call kernel_call_seconds_backward when ≥ 0.
  double call_overhead(bool backward) const {
    return backward && kernel_call_seconds_backward >= 0 ? kernel_call_seconds_backward : kernel_call_seconds;
  }
  /// The tile (q rows, kv rows) of a forward or backward call: the backward's when set.
  std::pair<int, int> kernel_tile(bool backward) const {
    if (backward && kernel_tile_q_backward > 0 && kernel_tile_kv_backward > 0)
      return {kernel_tile_q_backward, kernel_tile_kv_backward};
    return {kernel_tile_q, kernel_tile_kv};
  }
  /// Seconds per Partial-tile row at head dim D: partial_row_seconds (for a backward call
  /// partial_row_seconds_backward when ≥ 0) + D · partial_row_seconds_per_dim[_backward].
  double partial_row_cost(bool backward, std::int64_t D) const {
    const double base =
        backward && partial_row_seconds_backward >= 0 ? partial_row_seconds_backward : partial_row_seconds;
    const double per_dim = backward ? partial_row_seconds_per_dim_backward : partial_row_seconds_per_dim;
    return base + static_cast<double>(D) * per_dim;
  }
  /// Throws Error(InvalidArgument) naming the first non-positive or non-finite field.
  void validate() const;
};

/// Which passes one "attention call" comprises.
enum class PassKind : std::uint8_t { Forward, Backward, ForwardBackward };
const char* to_string(PassKind pass) noexcept;
PassKind pass_from_string(const std::string& name);  ///< "fwd"|"bwd"|"fwd_bwd"; Throws InvalidArgument

/// The attention problem of one layer. Tensors are BSHD with `bytes_per_element` per value;
/// row vectors (lse, delta) are fp32.
struct Workload {
  int layers = 1;  ///< seconds and bytes are reported per layer; total ×layers
  std::int64_t B = 1, S_global = 0, H = 0, H_kv = 0, D = 0;
  /// headpar only: 0 → head-parallel attention as src/strategies/headpar.cc runs it (all-gather
  /// Q, K, V; reduce-scatter O, lse); h > 0 → Megatron SP traffic (all-gather and
  /// reduce-scatter of X [S/P, h]: the layer as `burst train --strategy tp` runs it).
  std::int64_t model_width = 0;
  /// Whole transformer layer (Llama-style: QKV and output projections, SwiGLU MLP) around the
  /// attention call: its linear FLOPs, its weights in memory, and the non-attention traffic of
  /// each strategy (TP: Megatron SP all-gather + reduce-scatter around the MLP; sequence/context
  /// parallel strategies: the weight-gradient all-reduce). Needs model_width > 0.
  bool whole_layer = false;
  std::int64_t ffn_width = 0;  ///< SwiGLU hidden width f (0 → default_ffn_width(h))
  Mask mask;                   ///< on global positions of a sequence of mask_length
  /// Length at which `mask` was built and the visible pairs are counted (0 → S_global). When
  /// smaller than S_global, every block's pair count is scaled by (S_global/mask_length)² —
  /// exact for masks defined by fractions of the sequence, an approximation otherwise.
  std::int64_t mask_length = 0;
  PassKind pass = PassKind::Forward;
  int bytes_per_element = 4;  ///< 4 fp32 (this library), 2 bf16 (GPU practice)
  /// burst, ring: bytes per value of the dQ / dK, dV partials on the write ring's wire
  /// (DistConfig::partials_dtype: 4 fp32, the default; 2 bf16). The other strategies' partials
  /// travel in fp32 whatever this says.
  int partial_bytes_per_element = 4;
  /// The kernels compute on bf16 operands (bf16 inputs on a bf16-operand path: AMX, or
  /// vdpbf16ps where the dispatch rule keeps it): kernel rates
  /// × ClusterSpec::bf16_speedup_*. Separate from bytes_per_element: fp16 moves 2 bytes per value
  /// but computes in fp32.
  bool bf16_arithmetic = false;

  /// Throws Error(InvalidArgument) for non-positive sizes, H % H_kv ≠ 0, a mask_length
  /// that does not divide into S_global, or whole_layer without model_width > 0.
  void validate() const;
  /// ffn_width, or default_ffn_width(model_width) when it is 0.
  std::int64_t resolved_ffn_width() const;
};

/// One strategy configuration to score.
struct Candidate {
  StrategyKind strategy = StrategyKind::Burst;
  LayoutKind layout = LayoutKind::Zigzag;
  int ulysses_degree = 0;  ///< usp: u (P = u·r); 0 → largest divisor of P dividing H_kv
  BackwardSide backward_side = BackwardSide::Auto;
  bool double_ring = true;  ///< burst/ring: topology-aware double ring when nodes > 1
  /// usp: the ring across the Ulysses groups; Burst (Burst-USP) runs burst's query-side
  /// backward on it (DistConfig::usp_ring), Ring the K,V-side one.
  UspRing usp_ring = UspRing::Ring;
};

/// Summary of one step of the forward (or backward) schedule, max over ranks.
struct StepEstimate {
  double compute_max = 0;   ///< seconds, slowest rank's kernel time this step
  double compute_mean = 0;  ///< seconds, mean over ranks
  double transfer = 0;      ///< seconds, slowest rank's transfer that feeds the next step
  bool inter_node = false;  ///< the transfer crosses nodes
};

/// Per-pass prediction.
struct PassEstimate {
  double seconds = 0;                 ///< wall time of the pass (max over ranks)
  double compute_seconds = 0;         ///< max over ranks of summed kernel time
  double exposed_comm_seconds = 0;    ///< seconds − compute_seconds of the critical rank
  double balance = 1;                 ///< max / mean per-rank kernel time
  std::int64_t bytes_per_device = 0;  ///< bytes sent, max over ranks
  std::int64_t memory_bytes = 0;      ///< peak bytes held per device (inputs, outputs, buffers)
  std::vector<StepEstimate> steps;
};

/// The rest of a transformer layer around one attention call (whole-layer mode), per device.
struct LayerEstimate {
  double linear_flops = 0;            ///< this device's linear-layer FLOPs (tokens/P share, or 1/P of TP)
  double linear_seconds = 0;          ///< linear_flops / (matmul_flops · linear_efficiency)
  double comm_seconds = 0;            ///< non-attention communication not hidden behind compute
  std::int64_t comm_bytes = 0;        ///< non-attention bytes sent per device
  std::int64_t weight_bytes = 0;      ///< layer weights (+ their gradients when backward) held
  double seconds = 0;                 ///< attention seconds + linear_seconds + comm_seconds
  std::int64_t bytes_per_device = 0;  ///< attention + non-attention bytes
};

/// The model's verdict for one candidate.
struct Estimate {
  Candidate candidate;
  bool feasible = true;
  std::string reason;         ///< why not feasible (unsupported mask/heads/memory)
  int ulysses_degree = 0;     ///< resolved u (usp), else 0
  std::string backward_side;  ///< "query" / "kv" for burst/ring backward, else ""
  double seconds = 0;         ///< per layer, all requested passes
  double compute_seconds = 0;
  double exposed_comm_seconds = 0;
  double balance = 1;
  std::int64_t bytes_per_device = 0;
  std::int64_t memory_bytes = 0;   ///< max over the requested passes
  double flops = 0;                ///< useful FLOPs (mask area, LongCA-bench convention), all ranks
  PassEstimate forward, backward;  ///< present when requested
  /// Whole-layer mode only (Workload::whole_layer), per layer, all requested passes:
  LayerEstimate layer;
};

// ---- Formulas (exposed for the tests and docs; all pure) -------------------------------------

/// Forward FLOPs of `pairs` visible (q, k) pairs: 4·D·H·B·pairs (two matmuls of 2 flop/MAC).
/// Backward = 2.5× (five matmuls with the recompute of P). Source: FlashAttention-2 (arXiv 2307.08691) FLOP
/// counts, LongCA-bench (arXiv 2510.17896).
double attention_flops(double pairs, std::int64_t B, std::int64_t H, std::int64_t D, bool backward);
/// Llama's SwiGLU width for model width h: 8h/3 rounded up to a multiple of 256
/// (h = 4096 → 11008). Source: Llama reference code, `multiple_of = 256`.
std::int64_t default_ffn_width(std::int64_t h);
/// Linear-layer FLOPs of one Llama-style layer's forward over `tokens` tokens (2 flop/MAC):
/// QKV 2·t·h·(H + 2·H_kv)·D + output 2·t·H·D·h + SwiGLU 3·2·t·h·f. Backward = 2× forward
/// (input and weight gradients). Source: the counting of Narayanan et al. 2021 (arXiv
/// 2104.04473, §5.1), with GQA's narrower K, V projections and a gated MLP.
double linear_flops(double tokens, std::int64_t h, std::int64_t H, std::int64_t H_kv, std::int64_t D,
                    std::int64_t f, bool backward);
/// Weights of those linear layers: h·(H + 2·H_kv)·D + H·D·h + 3·h·f (norm weights ignored).
double layer_weight_count(std::int64_t h, std::int64_t H, std::int64_t H_kv, std::int64_t D, std::int64_t f);
/// Ring all-reduce of `bytes` over P ranks: 2·(P−1)·(α + bytes/P/β) (reduce-scatter then
/// all-gather, NCCL's ring); each rank sends 2·(P−1)/P·bytes.
double all_reduce_seconds(const ClusterSpec& c, int P, double bytes, bool inter_node);
/// Kernel seconds of one call: overhead + flops / (matmul_flops · efficiency [· bf16_speedup when
/// bf16]), the overhead kernel_call_seconds (forward) or kernel_call_seconds_backward when ≥ 0
/// (backward).
double kernel_seconds(const ClusterSpec& c, double flops, bool backward, bool bf16 = false);
/// The kernel rate of a call in FLOP/s: matmul_flops · efficiency, × bf16_speedup when bf16.
double kernel_rate(const ClusterSpec& c, bool backward, bool bf16);
/// Rate and per-call overhead of a kernel, fitted from timings (`burst calibrate`).
struct KernelFit {
  double rate = 0;      ///< FLOP/s
  double overhead = 0;  ///< seconds per call, ≥ 0
};
/// Least-squares fit of t = overhead + flops / rate to (flops, seconds) points, weighted by
/// 1/t² so every point counts by its relative error (short calls are not drowned by long
/// ones). A negative intercept is clamped to 0 and the slope refitted through the origin.
/// Throws Error(InvalidArgument) for fewer than 2 points, non-positive values, or a fit whose
/// time does not grow with the FLOPs (message: machine too noisy, rerun).
KernelFit fit_kernel_time(const std::vector<std::pair<double, double>>& flops_seconds);
/// α–β time of one message of `bytes` on an intra- or inter-node link: α + bytes / β.
double link_seconds(const ClusterSpec& c, double bytes, bool inter_node);
/// Ring all-gather (or reduce-scatter, same volume) of `block_bytes` per rank over `P` ranks,
/// spanning nodes or not: (P−1)·(α + block/β) on the slowest link of the ring. Source: NCCL
/// ring algorithm, docs/cost_model.md. Across nodes whose devices share inter-node links
/// (k = devices_per_inter_link() > 1) at least (P−1)·α + (P−L)·k·block/β_inter, L = min(P,
/// devices_per_node): each device's remote blocks, k devices' through one link; blocks at
/// ClusterSpec::collective_intra_bandwidth() within a node, collective_inter_bandwidth() across.
double all_gather_seconds(const ClusterSpec& c, int P, double block_bytes, bool inter_node);
/// Reduce-scatter of `block_bytes` per rank over `P` ranks: all_gather_seconds' volume,
/// at ClusterSpec::reduce_scatter_intra_bandwidth() within a node, reduce_scatter_inter_bandwidth()
/// across nodes.
double reduce_scatter_seconds(const ClusterSpec& c, int P, double block_bytes, bool inter_node);
/// Pairwise all-to-all where each of `P` ranks holds `bytes` to redistribute ((P−1)/P leave):
/// (P−1)·α + intra share / β_intra + inter share / β_inter, intra share (L'−1)/P·bytes with
/// L' = ranks of the group on one node (`group_per_node`), inter share the rest (× k when k
/// devices share an inter-node link: they all exchange at once; at collective_inter_bandwidth()).
double all_to_all_seconds(const ClusterSpec& c, int P, int group_per_node, double bytes);

/// P×P matrix, row-major: pairs[i·P + j] = visible (q, k) pairs with q on rank i and k on rank j
/// of `layout`, scaled by `scale` (see Workload::mask_length). Cost: O(P² · S/P · slices).
/// With tile_q, tile_kv > 0 it counts the pairs a tiled kernel computes instead: rank i's rows
/// and rank j's keys are cut into tiles as the kernels cut them (consecutive rows, a new tile at
/// each of a few jumps of more than a tile in the positions, such as a zigzag block's seam; see
/// docs/design.md § Tiles follow the position runs), and every tile that ResolvedMask::classify
/// does not call Empty on its position hulls counts its whole area (the kernel's own rule);
/// then `partial_rows` (if given) receives the P×P matrix of query rows summed over the tiles
/// classified Partial (those the kernel masks per element), unscaled.
std::vector<double> visible_pair_matrix(const ResolvedMask& mask, const SequenceLayout& layout,
                                        double scale = 1.0, std::int64_t tile_q = 0, std::int64_t tile_kv = 0,
                                        std::vector<double>* partial_rows = nullptr);

// ---- The model ---------------------------------------------------------------------------------

/// Scores one candidate; with workload.whole_layer also Estimate::layer (and memory_bytes then
/// includes the layer's weights, sharded P ways for headpar). Infeasible candidates (strategy cannot express
/// the mask, head counts not divisible, memory over capacity, layout divisibility) come back with feasible =
/// false and a reason — never an exception. Throws: Error(InvalidArgument) from cluster.validate() /
/// workload.validate().
Estimate estimate(const ClusterSpec& cluster, const Workload& workload, const Candidate& candidate);

/// Every strategy × sensible layout (ring/burst: contiguous, zigzag, striped; allgather:
/// zigzag, contiguous; distflash: contiguous; ulysses/usp/headpar: contiguous), scored and ranked:
/// feasible first by seconds (whole-layer mode: by layer.seconds), then infeasible in input order. Throws as
/// estimate().
std::vector<Estimate> rank_strategies(const ClusterSpec& cluster, const Workload& workload);
/// The candidates rank_strategies() scores, for P = cluster.devices().
std::vector<Candidate> default_candidates(const ClusterSpec& cluster);

// ---- Ranks × threads on a node's cores ---------------------------------------------------------

/// Share of `threads` kernel threads a tiled kernel call keeps busy: its parallel items (forward:
/// B·H·q tiles of the rank's S_global/P rows; backward: B·H_kv (b, kv-head) items, each split
/// into NC kv chunks, NC = max(⌈8 / (B·H_kv)⌉, min(⌈32 / (B·H_kv)⌉, ⌊n / 1024⌋), ⌈n / 1024⌉) for
/// n = S_global/P kv rows, capped by the kv tiles and by 512 MiB of partial dQ (NC·B·H·n·D·4
/// bytes) —
/// src/kernels/attention_tiled*.cc) dealt to the threads in rounds: items /
/// (threads·⌈items/threads⌉); with a measured thread_scaling entry for `threads`, the smaller of
/// the two. Pure. 1 for threads = 1.
double kernel_thread_efficiency(const ClusterSpec& per_core, const Workload& w, int P, int threads,
                                bool backward);

/// One way to run every node's cores: ranks_per_node ranks of `threads` kernel threads each.
struct RankThreadSplit {
  int ranks_per_node = 1, threads = 1;
  ClusterSpec cluster;  ///< the cluster the model scored: a device is one rank of `threads` cores
  double efficiency_forward = 1, efficiency_backward = 1;  ///< kernel_thread_efficiency
  Estimate best;       ///< the fastest feasible candidate at this split (infeasible if none is)
  double seconds = 0;  ///< best's seconds (whole-layer mode: layer seconds); +inf when infeasible
};

/// The cluster of ranks_per_node ranks × `threads` threads on the nodes of `per_core`, a spec
/// whose device is one single-threaded rank on one core (what `burst calibrate` measures): the
/// attention and linear kernel rates × threads × kernel_thread_efficiency, the per-element
/// masking cost of Partial tiles ÷ the same, every device its own cores (compute_slots_per_node
/// 0). Unchanged: per-call overheads, links and memory bandwidth (a rank's copies, merges and
/// messages run on one thread). Pure. Throws Error(InvalidArgument) for ranks_per_node or
/// threads < 1.
ClusterSpec cluster_for_split(const ClusterSpec& per_core, const Workload& w, int ranks_per_node,
                              int threads);

/// Every split of `cores_per_node` cores into ranks × threads (ranks_per_node · threads =
/// cores_per_node, ranks_per_node a divisor), each scored on cluster_for_split: the fastest of
/// `candidates` (empty: default_candidates of that cluster), ranked by seconds — feasible first,
/// so the front is the recommendation. The workload's mask_length must split into every P the
/// splits make (a multiple of 2·nodes·cores_per_node), else those candidates are infeasible.
/// Pure. Throws as estimate(), and Error(InvalidArgument) for cores_per_node < 1.
std::vector<RankThreadSplit> rank_thread_splits(const ClusterSpec& per_core, const Workload& w,
                                                int cores_per_node,
                                                const std::vector<Candidate>& candidates = {});

}  // namespace burst
