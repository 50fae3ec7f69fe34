// burst/attention.h — exact local attention on one process: forward and backward, every mask.
//
// Owns: the public kernel API — attention_forward / attention_backward on BSHD [B, S, H, D] or
// varlen THD [T, H, D] + cu_seqlens tensors stored as f32, bf16 or f16 (computed in fp32: 16-bit
// inputs are widened tile by tile, results rounded once at the end), with grouped-query attention, masks on
// global positions (burst/mask.h), and two implementations behind one signature: Reference (the fp64 oracle:
// plain loops, materialised scores) and Tiled (FlashAttention-2 style, the fast path). Inputs are validated
// here once; kernels trust them. Conventions: lse is fp32 natural log, [B, H, S_q] (varlen: [H, T_q]); a row
// with no visible key gives out = 0, lse = −inf, zero gradients. GQA: query head h reads KV head h / (H /
// H_kv); K and V are never copied per query head. Does not: communicate (strategies do), allocate O(S²)
// memory in the Tiled path.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "burst/isa.h"
#include "burst/mask.h"
#include "burst/tensor.h"

namespace burst {

/// FMA peak probe for benchmarks on a shared machine: independent FMA chains of the `isa` path's
/// vector width (Auto → detect_isa()), `iters` steps — 12 ymm chains on AVX2 (16 would spill on
/// 16 registers), 16 on AVX-512 and portable. Returns the flop executed (iters · chains · 2 ·
/// width); timing the call next to a kernel gives the FMA rate a core offers at that moment
/// (docs/machine.md). Not collective.
/// Throws: Error(Unsupported) for an ISA this CPU lacks; Error(InvalidArgument) for iters < 0.
double run_fma_probe(Isa isa, std::int64_t iters);

/// The bf16 twin of run_fma_probe: 16 independent vdpbf16ps chains of 16 fp32 lanes, `iters`
/// steps; returns the flop executed (iters · 16 · 16 · 4: each lane does two multiply-adds per
/// instruction). Timing it gives the bf16 dot-product ceiling of a core (docs/machine.md). Not
/// collective.
/// Throws: Error(Unsupported) on a CPU without AVX512_BF16 (detect_isa() != Avx512Bf16);
///         Error(InvalidArgument) for iters < 0.
double run_bf16_dot_probe(std::int64_t iters);

/// The AMX twin of run_fma_probe: 4 independent tdpbf16ps chains on 16×16 fp32 tiles with
/// 16×32 bf16 operands, `iters` steps; returns the flop executed (iters · 4 · 16·16·32·2).
/// Timing it gives the AMX bf16 ceiling of a core. Not collective.
/// Throws: Error(Unsupported) where AMX is absent or refused (isa_available(Isa::Amx) false);
///         Error(InvalidArgument) for iters < 0.
double run_amx_probe(std::int64_t iters);

/// Memory-read probe for benchmarks of memory-bound kernels (decode) on a shared machine: a
/// vectorised max over n fp32 values at `data` with the `isa` path's loads (Auto → detect_isa()),
/// the streaming pattern of the decode kernels. Returns the bytes read (4·n); timing the call on a
/// buffer far larger than the last-level cache, next to the kernel, gives the DRAM read bandwidth
/// a core offers at that moment. Not collective.
/// Throws: Error(Unsupported) for an ISA this CPU lacks; Error(InvalidArgument) for n < 0 or a
/// null `data` with n > 0.
double run_memory_read_probe(Isa isa, const float* data, std::int64_t n);

struct AttentionParams {
  /// τ in softmax(τ·QKᵀ); unset → 1/sqrt(D). Must be finite and > 0.
  std::optional<float> softmax_scale;
  Mask mask;  ///< on global positions; default full
  /// Global position of local row 0 of q and of k/v (a rank's slice of a longer sequence).
  std::int64_t q_offset = 0, kv_offset = 0;
  /// Optional explicit global positions (strictly increasing, length S_q / S_kv), e.g. for the
  /// striped or zigzag layouts; when set they replace offset + row index.
  const std::int64_t* q_positions = nullptr;
  const std::int64_t* kv_positions = nullptr;
  /// Global lengths the mask resolves against (shorthands are bottom-right aligned to them, slices
  /// must fit in them); −1 → max position + 1 of this call. A rank holding part of a longer
  /// sequence must set both (else e.g. causal would be aligned to its own last row).
  std::int64_t seq_q_global = -1, seq_kv_global = -1;
  /// Varlen (THD): int32 offsets of each sequence, both of size batch+1, cu[0] = 0,
  /// non-decreasing, cu.back() = T_q (resp. T_kv); empty sequences allowed. When set, q/k/v are
  /// [T, H, D] and each sequence is attended independently (flash_attn_varlen semantics):
  /// positions restart at 0 and the mask is resolved per sequence against its own lengths, or
  /// against (seq_q_global, seq_kv_global) for all sequences when both are set. Offsets and
  /// explicit positions must be unset.
  std::vector<std::int32_t> cu_seqlens_q, cu_seqlens_kv;
  /// OpenMP threads; 0 → omp_get_max_threads(). Results are bitwise identical for any count.
  int num_threads = 0;
  KernelImpl impl = KernelImpl::Tiled;
  Isa isa = Isa::Auto;
  int block_q = 0, block_kv = 0;  ///< tile sizes in rows; 0 → implementation default
  /// Called between tiles on the calling thread only (e.g. MPI_Testall so transfers progress).
  std::function<void()> progress;
};

/// Forward: out = softmax(τ·QKᵀ + mask)·V and its lse.
/// Shapes: q [B,S_q,H,D], k, v [B,S_kv,H_kv,D], out [B,S_q,H,D] (any strides, D contiguous);
///         lse [B,H,S_q] fp32 contiguous. Varlen: q [T_q,H,D], k, v [T_kv,H_kv,D], lse [H,T_q].
/// Dtypes: q, k, v one of F32, BF16, F16 (the same for all three); out that dtype or F32; lse
/// F32. Accumulators, the softmax state and lse are fp32 for every dtype; out is rounded once
/// (to nearest even). Any CPU runs 16-bit inputs (AVX2+F16C conversion, else portable).
/// Preconditions: H % H_kv == 0; 1 ≤ D ≤ 256; softmax_scale finite and > 0; positions
/// strictly increasing and ≥ 0; out / lse do not overlap inputs. Not collective.
/// Throws: Error(InvalidArgument) on shape/stride/param mismatch, bad cu_seqlens, bad positions,
///         invalid mask slices, overlapping outputs, mixed dtypes among q, k, v, an out dtype
///         other than q's or f32 (the message names the values);
///         Error(Unsupported) for F64 inputs (convert them: burst::convert) and for an ISA this
///         CPU lacks.
/// Cost: 4·D·H·(visible pairs) flop; Tiled packs K and V once (≈ their size) and needs O(tile)
/// per thread, in a workspace of the calling thread kept for the next call (release_kernel_workspace).
/// Source: FlashAttention-2 (Dao 2023) Alg. 1; BurstAttention LAO (arXiv 2403.09347).
void attention_forward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                       const TensorView& lse, const AttentionParams& params);

/// Backward from the saved forward output: computes delta = rowsum(dout ∘ out) and overwrites
/// dq [like q], dk, dv [like k]. Shapes as attention_forward; dout like out. Dtypes: dout, out,
/// dq, dk, dv each q's dtype or F32; gradients are accumulated in fp32 and rounded once.
/// Throws/Cost: as attention_forward; 2.5× its flop. Source: FlashAttention-2 Alg. 2.
void attention_backward(const TensorView& dout, const TensorView& q, const TensorView& k, const TensorView& v,
                        const TensorView& out, const TensorView& lse, const TensorView& dq,
                        const TensorView& dk, const TensorView& dv, const AttentionParams& params);

/// Backward building block used by the distributed strategies: given delta (D = rowsum(dO∘O),
/// [B,H,S_q] fp32, or [H,T_q] varlen) and the FINAL lse of the rows, computes this block's
/// contributions and ADDS them to dq, dk, dv when accumulate is true (else overwrites).
/// Rows whose lse is −inf contribute nothing. accumulate = true needs F32 dq, dk, dv (adding
/// into 16-bit storage would round every partial sum: InvalidArgument).
/// Throws/Cost: as attention_backward.
void attention_backward_with_delta(const TensorView& dout, const TensorView& q, const TensorView& k,
                                   const TensorView& v, const TensorView& lse, const TensorView& delta,
                                   const TensorView& dq, const TensorView& dk, const TensorView& dv,
                                   const AttentionParams& params, bool accumulate);

/// delta[b,h,s] = Σ_d dout[b,s,h,d]·out[b,s,h,d], fp32 accumulation in increasing d (the value
/// attention_backward passes to the kernels). Shapes: dout, out [B,S,H,D] (any strides, D
/// contiguous); delta [B,H,S] (varlen: [T,H,D] → [H,T]). Not collective. Cost: B·S·H·D FMAs.
/// dout and out may be F32, BF16 or F16 (widened exactly); delta is F32.
/// Throws: Error(InvalidArgument) on shape mismatch, Error(Unsupported) for F64.
void attention_delta(const TensorView& dout, const TensorView& out, const TensorView& delta);

/// Frees the calling thread's kernel workspace. The Tiled kernels keep the largest block any call
/// from this thread needed (packed K/V panels ≈ 1–1.5× the size of k and v, plus O(tile) per
/// OpenMP thread) and reuse it, so that repeated calls do not page-fault fresh memory (which
/// cost up to 30 % of a call and most of the 2-thread speed-up here; docs/design.md).
/// Not collective. Never throws.
void release_kernel_workspace() noexcept;

/// Owning results, for callers that prefer return values.
struct AttentionOutput {
  Tensor out, lse;
};
struct AttentionGrads {
  Tensor dq, dk, dv;
};
/// Allocating forms: out contiguous [B,S_q,H,D] (varlen [T,H,D]), lse [B,H,S_q] ([H,T]);
/// dq like q, dk and dv like k (contiguous). Results are F32 whatever the input dtype (use the
/// view forms for 16-bit outputs). Throws: as the view forms.
AttentionOutput attention_forward(const TensorView& q, const TensorView& k, const TensorView& v,
                                  const AttentionParams& params);
AttentionGrads attention_backward(const TensorView& dout, const TensorView& q, const TensorView& k,
                                  const TensorView& v, const TensorView& out, const TensorView& lse,
                                  const AttentionParams& params);

}  // namespace burst
