// src/kernels/kernels.h — internal kernel interface (not installed).
//
// attention.cc validates user inputs once, resolves the mask, materialises global positions
// and calls one of these with a normalised Problem; varlen calls are split per sequence by
// attention.cc (B = 1 each). Kernels trust the Problem (debug-only asserts).
// Reference twins (attention_reference.cc) and fast paths (attention_tiled.cc) share these
// signatures exactly.
#pragma once

#include <cstdint>
#include <functional>

#include "burst/isa.h"
#include "burst/mask.h"
#include "burst/tensor.h"

namespace burst::kernels {

/// A strided operand [B, S, H, D] with D contiguous (strides in elements) stored as F32, BF16 or
/// F16; kernels read and write it only through load_row / store_row (kernels/convert.h).
struct Operand {
  const void* data = nullptr;
  std::int64_t sb = 0, ss = 0, sh = 0;
  DType dtype = DType::F32;
};
struct MutOperand {
  void* data = nullptr;
  std::int64_t sb = 0, ss = 0, sh = 0;
  DType dtype = DType::F32;
};
/// A row-vector fp32 operand [B, H, S] (lse, delta); element (b, h, s) at data[b*sb + h*sh + s*ss].
struct RowOperand {
  const float* data = nullptr;
  std::int64_t sb = 0, sh = 0, ss = 1;
};
struct MutRowOperand {
  float* data = nullptr;
  std::int64_t sb = 0, sh = 0, ss = 1;
};

/// The plain half of the kernel parameters: what a GPU kernel can take by value (numbers and
/// pointers to plain arrays, no host objects). Positions and the mask table live in the memory
/// of the device the kernel runs on (host memory on the CPU).
struct KernelArgs {
  const std::int64_t* q_pos = nullptr;   ///< [S_q] strictly increasing global positions
  const std::int64_t* kv_pos = nullptr;  ///< [S_kv]
  float scale = 1.0f;                    ///< τ in softmax(τ·QKᵀ), finite and > 0
  int block_q = 0, block_kv = 0;         ///< 0 → kernel default
  /// The resolved mask as a flat table: its slices (ResolvedMask::slices(), over the global
  /// positions) and their count. Set by the strategies' step_params; the CPU kernels read the
  /// resolved mask (CpuKnobs::mask) and its index instead.
  const MaskSlice* mask_slices = nullptr;
  std::int64_t mask_slice_count = 0;
  /// Host copies of q_pos, kv_pos and mask_slices where those point into a GPU's memory (null:
  /// none known — the arrays are host memory, or the caller has no copy). A GPU device's host-side
  /// decisions about a step (which kernel takes it: cuDNN's mask classification) read these, so
  /// that they never copy device tables back (a wait for the stream). Never read by a kernel.
  const std::int64_t* host_q_pos = nullptr;
  const std::int64_t* host_kv_pos = nullptr;
  const MaskSlice* host_mask_slices = nullptr;
};

/// The CPU-only half: host objects and knobs a GPU kernel never sees.
struct CpuKnobs {
  const ResolvedMask* mask = nullptr;               ///< never null; outlives the call
  int num_threads = 1;                              ///< ≥ 1
  KernelImpl impl = KernelImpl::Tiled;              ///< read by step_forward / step_backward
  Isa isa = Isa::Portable;                          ///< resolved (never Auto), supported here
  const std::function<void()>* progress = nullptr;  ///< may be null; called on thread 0 only
  /// Bytes the tiled backward may spend on q-side packs shared by its kv chunks: < 0 → its own
  /// cap; 0 → every item packs its q tiles itself (the shared packs' slow twin, for tests).
  std::int64_t backward_q_pack_cap = -1;
};

/// The kernel parameters, resolved: what AttentionParams (burst/attention.h) becomes after
/// validation, and what every strategy step hands the kernels. One struct from the public call
/// (src/attention.cc) and the strategies (src/strategies/step_params.cc: step_params) through
/// step_forward / step_backward (kernels/step.h) to the kernels, which read it as the base of
/// their Problem. Its two halves: KernelArgs (plain, a GPU kernel's) and CpuKnobs.
struct KernelParams : KernelArgs, CpuKnobs {};

/// One kernel call: the parameters and the shapes and views of q, k, v.
struct Problem : KernelParams {
  std::int64_t B = 0, S_q = 0, S_kv = 0, H = 0, H_kv = 0, D = 0;
  Operand q, k, v;
};

struct ForwardIO {
  MutOperand out;     ///< [B,S_q,H,D], overwritten
  MutRowOperand lse;  ///< [B,H,S_q], overwritten
};

struct BackwardIO {
  Operand dout;             ///< [B,S_q,H,D]
  RowOperand lse;           ///< final lse of the rows
  RowOperand delta;         ///< rowsum(dout ∘ out)
  MutOperand dq;            ///< [B,S_q,H,D]
  MutOperand dk, dv;        ///< [B,S_kv,H_kv,D]
  bool accumulate = false;  ///< add into dq/dk/dv instead of overwriting (F32 outputs only)
};

void forward_reference(const Problem& p, const ForwardIO& io);
void backward_reference(const Problem& p, const BackwardIO& io);
/// Naive-fp32 twins of the reference: the same loops with float accumulation. Not a product
/// path: tests measure its error against the fp64 oracle to size tolerances for fp32 kernels.
void forward_reference_fp32(const Problem& p, const ForwardIO& io);
void backward_reference_fp32(const Problem& p, const BackwardIO& io);
void forward_tiled(const Problem& p, const ForwardIO& io);
void backward_tiled(const Problem& p, const BackwardIO& io);

}  // namespace burst::kernels
