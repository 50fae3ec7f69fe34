// src/strategies/distflash.h — DistFlashAttn's load-balanced causal schedule (internal, pure).
//
// DistFlashAttn / LightSeq (arXiv 2310.03294, RulinShao/LightSeq `lightseq_async_attn.py`),
// ../shared/docs/peers.md §3. Contiguous layout: rank r owns chunk r. A causal-like mask needs
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
// the last step (docs/strategies.md §distflash).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "burst/attention.h"
#include "burst/comm.h"

namespace burst::strategies {

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
  int steps = 1;   ///< ⌊P/2⌋ + 1
  std::vector<std::vector<FlashBlock>> local, help;
};

/// Builds the schedule for P ranks; `needed(q, kv)` (kv ≤ q) says whether the mask leaves any
/// visible pair in the block (the diagonal is always kept so every rank initialises its
/// output). Pure. Throws Error(InvalidArgument) for P < 1.
DistFlashSchedule make_distflash_schedule(int P, const std::function<bool(int, int)>& needed);

/// Payload sizes of one chunk, in floats: Q/O/dO/dQ (B·c·H·D), K/V/dK/dV (B·c·H_kv·D), one row
/// vector lse/delta (B·H·c).
struct ChunkFloats {
  std::int64_t q = 0, kv = 0, row = 0;
};

/// Bytes rank `rank` sends in a forward / backward pass under the schedule (fp32):
///  fwd: K,V (2·kv) per local off-diagonal block it serves; Q (q) per helped block of its
///       queries; partial O and lse (q + row) per block it helps with.
///  bwd: K,V (2·kv) per local off-diagonal block it serves, dK,dV (2·kv) back per off-diagonal
///       local block of its queries; Q, dO, lse, delta (2·q + 2·row) per helped block of its
///       queries; dQ (q) per block it helps with.
std::int64_t distflash_forward_bytes(const DistFlashSchedule& s, const ChunkFloats& c, int rank);
std::int64_t distflash_backward_bytes(const DistFlashSchedule& s, const ChunkFloats& c, int rank);

struct PassTimes;

/// Forward under the schedule on the contiguous layout: q [B,c,H,D], k, v [B,c,H_kv,D] (chunk
/// comm.rank()), out like q, lse [B,H,c] contiguous. `base` carries scale, mask, kernel; chunk
/// offsets and S_global = P·c are set per block. Collective over comm (P = s.P ranks).
/// Memory O(c): own payloads, one step's inbox, one partial buffer.
void distflash_forward(const Communicator& comm, const DistFlashSchedule& s, const AttentionParams& base,
                       const TensorView& q, const TensorView& k, const TensorView& v,
                       const TensorView& out, const TensorView& lse, PassTimes& times);
/// Backward: dq like q, dk, dv like k (overwritten). Collective.
void distflash_backward(const Communicator& comm, const DistFlashSchedule& s, const AttentionParams& base,
                        const TensorView& dout, const TensorView& q, const TensorView& k,
                        const TensorView& v, const TensorView& out, const TensorView& lse,
                        const TensorView& dq, const TensorView& dk, const TensorView& dv, PassTimes& times);

}  // namespace burst::strategies
