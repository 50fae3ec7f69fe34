// src/strategies/backward_spans.h — how a backward step's kernel work is cut into calls (internal, pure).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "burst/mask.h"

namespace burst::strategies {

/// Rows [q0, q1) × [k0, k1) of one kernel call (backward_spans).
struct KernelSpan {
  std::int64_t q0 = 0, q1 = 0, k0 = 0, k1 = 0;
};

/// How a backward step's kernel work is cut into calls: one call per piece of the key rows,
/// each on the query rows from the first to the last query piece that the mask does not leave
/// Empty against it (hull classification, ResolvedMask::classify), less its leading and
/// trailing rows that see none of the piece's keys (exactly, through the mask's visible
/// intervals: a sliding window's block before the diagonal keeps only the rows its window
/// reaches back from); key pieces nobody sees are dropped. Pieces: the runs of consecutive
/// positions (a zigzag block's two chunks), cut at the middle row too (so adjacent chunks, or a
/// contiguous block, are halves as well). More than two runs on either side (striped), or an
/// empty side: the whole block in one call, [0, n_q) × [0, n_kv).
/// Why: the backward kernel keeps the dK, dV accumulators and packed K, V of every kv tile of
/// its call live while it sweeps each q tile, so a call over both chunks of a zigzag block
/// streams twice the kv-side state per q tile of a call over one (past L2: a step with two
/// live key chunks ran slower than one with two live query chunks of the same work), and
/// query rows that see no key of the call cost packing and a zero dQ write (and, on a GPU,
/// keep a step from cuDNN, which takes no row without keys). Pure; exact (only the order of
/// dQ's fp32 sums over the calls changes). The positions are increasing.
std::vector<KernelSpan> backward_spans(const ResolvedMask& mask, const std::int64_t* q_pos, std::int64_t n_q,
                                       const std::int64_t* kv_pos, std::int64_t n_kv);

/// How a forward step is cut for a device that prefers whole-shaped steps
/// (Device::prefers_shaped_steps): one call per piece of the query rows (the pieces of
/// backward_spans), each over the key rows from the first to the last key piece the mask does
/// not leave Empty against it, less its leading and trailing rows that see none of those keys
/// (as in backward_spans); query pieces that see no key are left out (their rows: out 0, lse
/// −inf, written by the caller). The calls' rows are disjoint and in order, so no merge is
/// needed within the step. On a zigzag block every call is then all-keys or causal (a whole
/// zigzag block between ranks is neither); on a contiguous block under a sliding window, a
/// diagonal band with no row left without a key (what cuDNN takes: device/cuda/cudnn_mask.h).
/// Pure; exact (a row's keys are the same; only invisible keys are dropped). More than two
/// runs on either side, or an empty side: the whole block, one call.
std::vector<KernelSpan> forward_spans(const ResolvedMask& mask, const std::int64_t* q_pos, std::int64_t n_q,
                                      const std::int64_t* kv_pos, std::int64_t n_kv);

/// The most pieces shaped_spans cuts one span into; a span that would take more stays one call
/// (on a GPU, the own kernels): a striped all-gather or USP block would otherwise be a call per
/// row, each a launch and, on cuDNN, a graph of its own shape.
inline constexpr std::size_t kMaxShapedPieces = 4;

/// The spans as a device that prefers whole-shaped steps runs them. Under a mask of one linear
/// band (ResolvedMask::linear_band: one slice — all keys, causal, a sliding window, ...) each
/// span's rows are cut, in order, into the longest pieces that are each one of cuDNN's bands over
/// the keys they see, and each piece's keys narrowed to those: within a piece the first key a row
/// sees stays put and then moves by one per row, the last one moves by one per row and then stays
/// put, every row sees a key, and a piece whose first key moves (a band with a left bound) has no
/// more rows than keys (cuDNN takes no left bound with more rows than keys); rows that see no key
/// are in no piece. O(rows + keys) a span. (cuDNN also refuses a band whose S_q + S_kv + L + R
/// passes 2²⁴: such a piece runs on the own kernels.) Under any other mask each span is cut at the
/// breaks in its rows' positions (a zigzag block's two chunks) where the first or last key a row
/// sees moves by more than one across the break (no one band holds both sides), and a piece whose
/// last row does not see its first key cut into pieces of at most as many rows as keys; each
/// trimmed as above. A causal or full zigzag span, which cuDNN takes whole, stays whole. A span
/// either cut would split into more than kMaxShapedPieces pieces is left whole. Pure; exact (rows
/// are independent, and a piece drops only keys none of its rows sees).
std::vector<KernelSpan> shaped_spans(const ResolvedMask& mask, const std::int64_t* q_pos,
                                     const std::int64_t* kv_pos, const std::vector<KernelSpan>& spans);

}  // namespace burst::strategies
