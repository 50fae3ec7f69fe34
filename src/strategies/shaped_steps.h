// src/strategies/shaped_steps.h — one attention step's kernel calls as the device prefers them
// (internal): one call, or, on a device that prefers whole-shaped steps (a GPU: cuDNN takes
// only its diagonal bands), the calls of strategies/backward_spans.h's cuts. Used by the ring
// family (burst, ring, usp's group ring) and the all-gather strategy.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "burst/mask.h"
#include "device/device.h"
#include "kernels/kernels.h"
#include "strategies/backward_spans.h"

namespace burst::strategies {

/// The kernel parameters of a call on the query rows from index q0 and the key rows from k0 of
/// a step (positions q_pos + q0, kv_pos + k0; their device twins where the caller has them).
using SpanParams = std::function<kernels::KernelParams(std::int64_t q0, std::int64_t k0)>;

/// Query rows [a, b) of out [B,S,H,D] and lse [B,H,S] as rows that see no key: out 0, lse −inf
/// (what a kernel call over them writes). Nothing for a ≥ b.
void fill_unseen(const device::Device& dev, const TensorView& out, const TensorView& lse, std::int64_t a,
                 std::int64_t b);

/// The forward of one step, q [B,S_q,H,D] at q_pos against k, v [B,S_kv,H_kv,D] at kv_pos (host
/// arrays, increasing), into out [B,S_q,H,D] and lse [B,H,S_q]: one call when !shaped, else one
/// call per span of shaped_spans(forward_spans(...)) on those rows and keys (the spans' rows are
/// disjoint and in order: nothing is merged), the rows no span covers written as rows that see
/// no key. Exact: a row's visible keys are the same (only the fp32 order of sums over key tiles
/// may change).
void shaped_forward(const device::Device& dev, const ResolvedMask& mask, bool shaped,
                    const std::int64_t* q_pos, const std::int64_t* kv_pos, const TensorView& q,
                    const TensorView& k, const TensorView& v, const TensorView& out, const TensorView& lse,
                    const SpanParams& params);

/// The calls of one backward step over n_q × n_kv rows, each accumulating into dQ, dK, dV: the
/// whole step, or backward_spans' cut when split; either cut further by shaped_spans when shaped.
/// Every visible pair lies in exactly one span.
std::vector<KernelSpan> backward_calls(const ResolvedMask& mask, bool split, bool shaped,
                                       const std::int64_t* q_pos, std::int64_t n_q,
                                       const std::int64_t* kv_pos, std::int64_t n_kv);

}  // namespace burst::strategies
