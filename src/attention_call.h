// src/attention_call.h — the public kernel boundary's validated call (internal): what
// attention.cc's entry points and their device twins (attention_device.h) share.
//
// Owns: Call (a call after validation: shapes, dtype, scale, positions, the resolved masks,
// varlen offsets), validate() and the operand checks, the per-sequence views of varlen calls,
// and for_each_problem (the kernel parameters of each kernel call). Defined in attention.cc, the
// operand checks in attention_checks.cc.
// Does not: touch tensor memory (validation reads shapes, strides and pointers only).
#pragma once

#include <cstdint>
#include <vector>

#include "burst/attention.h"
#include "burst/dispatch.h"
#include "burst/mask.h"
#include "burst/tensor.h"
#include "kernels/kernels.h"

namespace burst::entry {

// Everything attention needs after validation. For varlen, B is the number of sequences and
// S_q / S_kv are the token totals; masks[b] belongs to sequence b (or masks[0] to all).
struct Call {
  bool varlen = false;
  DType dtype = DType::F32;  ///< storage dtype of q, k, v
  std::int64_t B = 0, S_q = 0, S_kv = 0, H = 0, H_kv = 0, D = 0;
  float scale = 1.0f;
  Isa isa = Isa::Portable;
  int threads = 1;
  std::vector<std::int32_t> cu_q, cu_kv;
  std::vector<std::int64_t> q_pos, kv_pos;
  std::vector<ResolvedMask> masks;
};

/// Validates q, k, v and the parameters once (messages name the api and the values).
/// Throws: Error(InvalidArgument / Unsupported) as the public entry points document.
Call validate(const char* api, const TensorView& q, const TensorView& k, const TensorView& v,
              const AttentionParams& p, KernelPass pass);
/// Operand checks (messages name the api, the operand and the values). Throws:
/// Error(InvalidArgument), Error(Unsupported) for an f64 input or a non-f32 row vector.
void check_tensor(const char* api, const char* name, const TensorView& t, int ndim);
DType check_input_dtypes(const char* api, const TensorView& q, const TensorView& k, const TensorView& v);
void check_same_shape(const char* api, const char* name, const TensorView& t, const char* ref_name,
                      const TensorView& ref);
void check_output_dtype(const char* api, const char* name, const TensorView& t, DType input, bool accumulate);
void check_rows(const char* api, const char* name, const TensorView& t, bool varlen, std::int64_t B,
                std::int64_t H, std::int64_t S);
void check_no_alias(const char* api, const char* out_name, const TensorView& out, const char* in_name,
                    const TensorView& in);
/// The forward outputs' checks: out shaped like q in the call's dtype, lse rows [B,H,S_q] (varlen
/// [H,T]), neither aliasing q, k, v or the other. Throws: Error(InvalidArgument), Error(Unsupported)
/// for a non-f32 lse.
void check_forward_outputs(const char* api, const Call& c, const TensorView& q, const TensorView& k,
                           const TensorView& v, const TensorView& out, const TensorView& lse);
/// The backward's gradient checks: dq shaped like q, dk and dv like k, dout and the gradients in
/// the call's dtype (the gradients fp32 when accumulate), no gradient aliasing an input or another
/// gradient. Throws: Error(InvalidArgument).
void check_gradients(const char* api, const Call& c, const TensorView& dout, const TensorView& q,
                     const TensorView& k, const TensorView& v, const TensorView& dq, const TensorView& dk,
                     const TensorView& dv, bool accumulate);
/// Rows [row0, row0 + n) of a varlen tensor as the BSHD view of one sequence: [T,H,D] → [1,n,H,D]
/// (rows [H,T] → [1,H,n]); BSHD tensors pass unchanged.
TensorView sequence(const TensorView& t, bool varlen, std::int64_t row0, std::int64_t n);
TensorView sequence_rows(const TensorView& t, bool varlen, std::int64_t row0, std::int64_t n);

// Rows of one kernel call: q rows [q0, q0 + nq), k/v rows [kv0, kv0 + nkv) (varlen: a sequence).
struct Seq {
  std::int64_t q0 = 0, nq = 0, kv0 = 0, nkv = 0;
};

// Calls fn(step, seq) once (BSHD) or once per sequence (varlen, B = 1 each): the validated call
// as the internal kernel entry's parameters (kernels/step.h).
template <typename Fn>
void for_each_problem(const Call& c, const AttentionParams& p, Fn&& fn) {
  kernels::KernelParams sp;
  sp.scale = c.scale;
  sp.q_pos = c.q_pos.data();
  sp.kv_pos = c.kv_pos.data();
  sp.num_threads = c.threads;
  sp.impl = p.impl;
  sp.isa = c.isa;
  sp.block_q = p.block_q;
  sp.block_kv = p.block_kv;
  sp.progress = p.progress ? &p.progress : nullptr;
  if (!c.varlen) {
    sp.mask = &c.masks[0];
    fn(sp, Seq{0, c.S_q, 0, c.S_kv});
    return;
  }
  for (std::int64_t b = 0; b < c.B; ++b) {
    const auto u = static_cast<std::size_t>(b);
    sp.mask = &c.masks[c.masks.size() == 1 ? 0 : u];
    fn(sp, Seq{c.cu_q[u], c.cu_q[u + 1] - c.cu_q[u], c.cu_kv[u], c.cu_kv[u + 1] - c.cu_kv[u]});
  }
}

}  // namespace burst::entry
