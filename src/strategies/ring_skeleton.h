// src/strategies/ring_skeleton.h — the step skeleton shared by the ring family (burst, ring).
//
// RingExecutor circulates a read-only payload (K,V forward; Q,dO,delta,lse or K,V backward)
// around a flat ring or the topology-aware double ring (docs/algorithm.md §7), double-buffered:
// step t posts the transfer of the payload for step t+1, computes on the current one while the
// kernel's progress hook polls MPI_Testall, then waits for its receives and swaps. A step's
// sends (payload, chain partial) complete by the end of the next step, not its own: a rank
// waits for its left neighbour (whose data it needs) at every step but for its right one (who
// must have posted the matching receive) one step later, so one slower rank does not stall the
// rank behind it step by step (the buffers: one more payload and one more chain partial). An optional write
// accumulator (dQ for the query side, dK,dV for the KV side) follows its read block one step
// behind: inside a node it accumulates along the intra ring (chain hop per step, overlapped
// with the next step's compute); at the end of each round the node's partial sum goes home to
// the block's owner in one hop, and the owner sums its n node partials in round order
// (deterministic). With one node this is exactly BurstAttention's dQ ring lagging one step plus
// the final hop (docs/algorithm.md §3); bytes: n·(L−1) chain hops + n home hops per rank (minus one
// when L = 1: round 0's block is the rank's own). Write wire dtype (DistConfig::partials_dtype):
// F32 sends the fp32 accumulator itself; BF16 sends a copy rounded to bf16 (half the bytes;
// layout wire::partial) and the receiver adds it into its fp32 accumulator — only the wire copy is rounded,
// once per hop, and no sum is ever formed in 16 bits.
// Channels: intra read, inter read, chain, home — four MPI_Comm_dups so rings never match each
// other's messages (docs/algorithm.md §6).
// Staging (strategies/staging.h): payloads and partials live in the device's memory; the own
// payload is copied out to a pinned wire buffer once, a received one copied in once, and a
// forwarded one sent again from its wire buffer. On the CPU this moves storage only.
// Failure policy: an exception inside a step with payload in flight aborts the communicator
// with a rank-tagged message (no peer is left waiting).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "burst/comm.h"
#include "device/device.h"
#include "strategies/staging.h"
#include "strategies/step_log.h"
#include "strategies/views.h"
#include "wire_layout.h"

namespace burst::strategies {

/// Per-run measurements of this rank.
struct RingRunStats {
  double compute_seconds = 0;       ///< inside the compute callback
  double exposed_comm_seconds = 0;  ///< blocked in waits after compute
  std::int64_t buffer_bytes = 0;    ///< all payload buffers the run allocated (its peak)
  /// Per-step record (DistConfig::timeline), filled when non-null: run() writes P records plus
  /// the write ring's final hop (with a write accumulator and P > 1: the plan's steps), and
  /// run_direct() P records, its end-of-pass work (second half, home sums) in the last one.
  std::vector<StepTimes>* steps = nullptr;
};

/// The part of a block's work a compute call does: the index-th of `count` equal ranges of the
/// block's rows (the callback picks the dimension: query rows or key rows), {0, 1} = all of it.
struct RowSlice {
  int index = 0, count = 1;
  std::int64_t begin(std::int64_t rows) const { return rows * index / count; }
  std::int64_t end(std::int64_t rows) const { return rows * (index + 1) / count; }
};

class RingExecutor {
 public:
  /// Compute callback of one step: `partition` is the block whose read payload `read` holds;
  /// `write` (null when the run has no write accumulator) is a zeroed buffer for this step's
  /// contribution to that block's accumulator; `progress` must be called between tiles; `slice`
  /// the part of the block to compute (always {0, 1} unless run() was asked to split_own).
  using StepFn = std::function<void(int step, int partition, const std::byte* read, float* write,
                                    const std::function<void()>& progress, RowSlice slice)>;

  /// Collective over `comm` (creates four channels sharing its counters). nodes·ranks_per_node
  /// must equal comm.size(); rank = node·L + local_rank. overlap = false waits for each
  /// transfer before computing (the no-overlap ablation). write_wire: F32 or BF16, the dtype the
  /// write partials travel in (every rank the same).
  /// `dev`: the device of every payload and partial (outlives the executor).
  RingExecutor(const Communicator& comm, const device::Device& dev, int nodes, int ranks_per_node,
               bool overlap, DType write_wire = DType::F32);

  /// Partition held by `rank` at step t (docs/algorithm.md §7; flat ring: (rank − t) mod P).
  int partition(int rank, int t) const;
  int ranks() const { return P_; }
  /// This member's place in the ring (the communicator's rank).
  int rank() const { return rank_; }
  /// The executor's buffer pool: message and partial buffers live here between runs, and the
  /// passes take their packed payloads and partial outputs from it and give them back (a
  /// model's repeated calls then reuse the same memory; src/device/device.h).
  device::BufferPool& pool() const { return stage_.pool(); }
  const device::Device& device() const { return stage_.device(); }

  /// Runs the P steps. own_read: this rank's read payload in device memory (a message laid out
  /// by the caller's WireLayout, every rank the same size; best taken from pool(), to which it
  /// returns).
  /// write_floats: fp32 values of the write accumulator (0 → none). Returns the summed write
  /// accumulator of this rank's own partition (4 · write_floats bytes of fp32 in device memory;
  /// empty when write_floats = 0), a pool buffer: hand it back with pool().put once read.
  /// Collective: every rank calls with equal sizes.
  /// split_own (with a write accumulator, P > 1, overlap): step 0 computes only the first half of
  /// the rank's own block ({0, 2}); the second half ({1, 2}) runs after the last step, while the
  /// last round's partial crosses to its owner — the one transfer nothing else can hide — and
  /// its write contribution is added at home (the block is the rank's own). compute must then
  /// honour slices and accumulate (not overwrite) into resident results.
  device::Buffer run(device::Buffer own_read, std::int64_t write_floats, const StepFn& compute,
                     RingRunStats& stats, bool split_own = false) const;

  /// The mask-aware schedule (MagiAttention's zero-redundant communication, docs/strategies.md
  /// § Mask-aware rings): the same steps and compute order as run(), but a rank receives a
  /// block's read payload only when it computes on it — need[g][j] != 0: rank g reads owner j's
  /// payload — and straight from the owner (who sends one copy to each rank that needs it), and
  /// each step's write contribution goes straight home to the block's owner, which sums them in
  /// step order (the order of run()'s chain on a flat ring). compute is called at step 0 and at
  /// the steps whose block is needed. Steps needed by no rank move nothing. Collective; need
  /// (P × P) identical on every rank. split_own as run() (its sums stay run()'s, bit for bit).
  device::Buffer run_direct(device::Buffer own_read, std::int64_t write_floats,
                            const std::vector<std::vector<char>>& need, const StepFn& compute,
                            RingRunStats& stats, bool split_own = false) const;

  /// The message of a write partial of w fp32 values: wire::partial(write wire dtype, w).
  WireLayout wire_layout(std::int64_t w) const;

 private:
  /// The message that carries write partial `acc`: acc itself (F32), or its bf16 rounding in a
  /// pool buffer (acc goes back to the pool).
  ByteBuffer to_wire(device::Buffer acc) const;
  /// acc[i] += value i of a received wire message (staged in; widened from bf16 when the wire
  /// is BF16); the wire goes back to the pool.
  void add_wire(device::Buffer& acc, ByteBuffer wire) const;
  /// acc[i] += x[i] (fp32, same length, device memory).
  void add_into(device::Buffer& acc, const device::Buffer& x) const;
  /// split_own's second half: computes RowSlice{1, 2} of the rank's own block (payload `own`)
  /// into a zeroed write buffer of W fp32 values (a pool buffer, returned), polling `progress`.
  device::Buffer own_second_half(const StepFn& compute, const std::byte* own, std::int64_t W,
                                 const std::function<void()>& progress, RingRunStats& stats, StepLog& log,
                                 int record) const;

  class Run;  // one run(): its state and its steps by name (ring_skeleton.cc)

  mutable Stager stage_;  // run() is logically const: the pools only cache memory
  Communicator intra_, inter_, chain_, home_;
  int P_ = 1, n_ = 1, L_ = 1, rank_ = 0;
  bool overlap_ = true;
  DType wire_ = DType::F32;
};

}  // namespace burst::strategies
