// tests/cuda_attention_harness.h — the GPU step kernels (src/device/cuda/attention_cuda.h) run
// on host test tensors and checked against the fp64 oracle on the same rounded inputs
// (tests/test_cuda_attention.cc; the bounds are tests/test_attention_bf16.cc's, derived there).
//
// A GpuCase names shapes, dtype, mask, explicit global positions and the memory layout of the
// device tensors (BSHD, or SDPA's [B,H,S,D] seen through BSHD strides). run_case uploads q, k, v,
// dout rounded to the dtype, runs forward then backward (from the kernel's own out and lse, with
// delta = rowsum(dout ∘ out) computed on the host as attention_backward does) and downloads the
// results widened to fp32. check_case runs the oracle (KernelImpl::Reference through
// burst::attention_forward / attention_backward_with_delta with the same positions and mask) and
// the naive-fp32 twin that sizes the tolerances, and compares per element:
//   |got − ref| ≤ tol32·(1 + u) + u·|ref| (+ u·(1 + u)·p_term for the fast kernel, whose P and dS
//   are rounded to the operand dtype before their products), lse by the fp32 rule,
// with −inf lse rows required exactly (out and dq exactly 0 there). Output buffers start as NaN
// (every byte 0xFF), so an element a kernel leaves unwritten fails the comparison instead of
// passing as a zero, and every device buffer ends in a guard of 0xFF bytes that a write past the
// tensor (a padded row of the last tile) would change (guard_intact).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "burst/attention.h"
#include "burst/mask.h"
#include "burst/tensor.h"
#include "device/cuda/attention_cuda.h"
#include "device/cuda/attention_cudnn.h"
#include "device/cuda/cuda_memory.h"
#include "lowp_oracle.h"
#include "lowp_test_util.h"
#include "test_util.h"

namespace burst::test {

struct GpuCase {
  std::string name;
  std::int64_t B = 1, S_q = 0, S_kv = 0, H = 2, H_kv = 1, D = 64;
  DType dt = DType::BF16;
  Mask mask;
  std::vector<std::int64_t> q_pos, kv_pos;             ///< empty → 0, 1, ...
  std::int64_t seq_q_global = -1, seq_kv_global = -1;  ///< −1 → last position + 1
  bool sdpa_layout = false;                            ///< device memory [B,H,S,D]
  bool unaligned = false;  ///< 16-bit device tensors start 2 bytes past 16: the scalar tile loads

  std::vector<std::int64_t> qs() const { return {B, S_q, H, D}; }
  std::vector<std::int64_t> ks() const { return {B, S_kv, H_kv, D}; }
  std::vector<std::int64_t> positions(bool q) const {
    const auto& given = q ? q_pos : kv_pos;
    if (!given.empty()) return given;
    std::vector<std::int64_t> p(static_cast<std::size_t>(q ? S_q : S_kv));
    for (std::size_t i = 0; i < p.size(); ++i) p[i] = static_cast<std::int64_t>(i);
    return p;
  }
  std::int64_t global(bool q) const {
    const std::int64_t g = q ? seq_q_global : seq_kv_global;
    if (g >= 0) return g;
    const auto p = positions(q);
    return p.empty() ? 0 : p.back() + 1;
  }
};

inline GpuCase gpu_case(std::string name, std::int64_t H, std::int64_t H_kv, std::int64_t S_q,
                        std::int64_t S_kv, std::int64_t D, Mask mask, DType dt = DType::BF16) {
  GpuCase c;
  c.name = std::move(name);
  c.H = H;
  c.H_kv = H_kv;
  c.S_q = S_q;
  c.S_kv = S_kv;
  c.D = D;
  c.mask = std::move(mask);
  c.dt = dt;
  return c;
}

/// Device memory holding a host BSHD tensor (dtype bytes), in BSHD or SDPA order, and its view:
/// `shift` bytes of 0xFF, the tensor's `bytes`, then kGuardBytes of 0xFF.
struct DevTensor {
  cuda::DeviceBuffer buf;
  TensorView view;
  bool sdpa = false;
  std::size_t bytes = 0, shift = 0;
};
/// The guard after each device tensor: 64 rows of D = 128 bf16 (a whole padded tile's rows of a
/// [.., S, 1, 128] tensor).
inline constexpr std::size_t kGuardBytes = 64 * 128 * 2;

inline std::int64_t bhsd_index(const std::vector<std::int64_t>& s, std::int64_t b, std::int64_t t,
                               std::int64_t h) {
  return ((b * s[2] + h) * s[1] + t) * s[3];  // row (b, t, h) of a [B,S,H,D] tensor stored [B,H,S,D]
}

/// Uploads host bytes (contiguous, shape `shape`, dtype dt); sdpa: 4-d tensors stored [B,H,S,D];
/// the view starts `shift` bytes into the allocation (cudaMalloc's is 256-byte aligned).
inline DevTensor to_device(const void* host, DType dt, const std::vector<std::int64_t>& shape, bool sdpa,
                           std::size_t shift = 0) {
  DevTensor t;
  t.sdpa = sdpa && shape.size() == 4;
  std::int64_t n = 1;
  for (std::int64_t x : shape) n *= x;
  const std::size_t es = dtype_size(dt), bytes = static_cast<std::size_t>(n) * es;
  std::vector<unsigned char> staged(bytes);
  const auto* src = static_cast<const unsigned char*>(host);
  if (t.sdpa) {
    const std::size_t row = static_cast<std::size_t>(shape[3]) * es;
    std::int64_t r = 0;
    for (std::int64_t b = 0; b < shape[0]; ++b)
      for (std::int64_t s = 0; s < shape[1]; ++s)
        for (std::int64_t h = 0; h < shape[2]; ++h, ++r)
          std::memcpy(staged.data() + static_cast<std::size_t>(bhsd_index(shape, b, s, h)) * es,
                      src + static_cast<std::size_t>(r) * row, row);
  } else if (bytes > 0) {
    std::memcpy(staged.data(), src, bytes);
  }
  staged.resize(bytes + kGuardBytes, 0xFF);  // the guard (also: never a zero-byte allocation)
  staged.insert(staged.begin(), shift, 0xFF);
  t.bytes = bytes;
  t.shift = shift;
  t.buf = cuda::DeviceBuffer(0, staged.size());
  t.buf.upload(staged.data(), staged.size());
  t.view =
      make_view(static_cast<const void*>(static_cast<const unsigned char*>(t.buf.data()) + shift), dt, shape);
  if (t.sdpa) {
    t.view.stride[0] = shape[1] * shape[2] * shape[3];
    t.view.stride[1] = shape[3];
    t.view.stride[2] = shape[1] * shape[3];
  }
  t.view.device = Device{DeviceKind::Cuda, 0};
  return t;
}

/// An output tensor on the device: every byte 0xFF (NaN in bf16, fp16 and fp32), so what the
/// kernel does not write stays NaN.
inline DevTensor poisoned(DType dt, const std::vector<std::int64_t>& shape, bool sdpa,
                          std::size_t shift = 0) {
  std::int64_t n = 1;
  for (std::int64_t x : shape) n *= x;
  const std::vector<unsigned char> nan(static_cast<std::size_t>(n) * dtype_size(dt), 0xFF);
  return to_device(nan.data(), dt, shape, sdpa, shift);
}

/// True when the bytes around t (its shift before, the guard after) still hold 0xFF only.
inline ::testing::AssertionResult guard_intact(const DevTensor& t, const char* what) {
  std::vector<unsigned char> all(t.shift + t.bytes + kGuardBytes);
  t.buf.download(all.data(), all.size());
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (i == t.shift) i += t.bytes;
    if (i < all.size() && all[i] != 0xFF)
      return ::testing::AssertionFailure()
             << what << ": byte " << i << " of the allocation, outside the tensor (" << t.shift << " + "
             << t.bytes << " bytes), was written";
  }
  return ::testing::AssertionSuccess();
}

/// Downloads into host bytes (contiguous BSHD).
inline void from_device(const DevTensor& t, void* host) {
  const std::int64_t n = t.view.numel();
  const std::size_t es = dtype_size(t.view.dtype), bytes = static_cast<std::size_t>(n) * es;
  std::vector<unsigned char> all(t.shift + bytes);
  t.buf.download(all.data(), all.size());
  const std::vector<unsigned char> staged(all.begin() + static_cast<std::ptrdiff_t>(t.shift), all.end());
  auto* dst = static_cast<unsigned char*>(host);
  if (!t.sdpa) {
    if (bytes > 0) std::memcpy(dst, staged.data(), bytes);
    return;
  }
  const std::vector<std::int64_t> shape(t.view.shape.begin(), t.view.shape.begin() + 4);
  const std::size_t row = static_cast<std::size_t>(shape[3]) * es;
  std::int64_t r = 0;
  for (std::int64_t b = 0; b < shape[0]; ++b)
    for (std::int64_t s = 0; s < shape[1]; ++s)
      for (std::int64_t h = 0; h < shape[2]; ++h, ++r)
        std::memcpy(dst + static_cast<std::size_t>(r) * row,
                    staged.data() + static_cast<std::size_t>(bhsd_index(shape, b, s, h)) * es, row);
}

/// dq, dk, dv of case c downloaded from fp32 device tensors; accumulate: less `init` (the values
/// the kernel added into), so that both runs of an accumulate test compare what was written.
inline std::vector<Tensor> gradients_written(const GpuCase& c, const DevTensor& dq, const DevTensor& dk,
                                             const DevTensor& dv, const std::vector<Tensor>& init,
                                             bool accumulate) {
  std::vector<Tensor> got{Tensor(c.qs()), Tensor(c.ks()), Tensor(c.ks())};
  from_device(dq, got[0].data());
  from_device(dk, got[1].data());
  from_device(dv, got[2].data());
  if (accumulate)
    for (std::size_t t = 0; t < 3; ++t)
      for (std::int64_t i = 0; i < got[t].numel(); ++i) got[t].data()[i] -= init[t].data()[i];
  return got;
}

/// The rounded inputs of a case (seeded) and what a kernel produced, widened to fp32.
struct GpuInputs {
  Rounded q, k, v, g;
};
inline GpuInputs inputs_of(const GpuCase& c) {
  return {round_to(random_tensor(c.qs(), 21), c.dt), round_to(random_tensor(c.ks(), 22), c.dt),
          round_to(random_tensor(c.ks(), 23), c.dt), round_to(random_tensor(c.qs(), 24), c.dt)};
}
struct GpuResults {
  Rounded out;
  Tensor lse, delta;
  Rounded dq, dk, dv;
};

/// The step kernels' arguments: global positions qp, kp (host memory), the slice table of `mask`
/// and `scale`; they point into qp, kp and mask, which must outlive them.
inline kernels::KernelArgs kernel_args(const std::vector<std::int64_t>& qp,
                                       const std::vector<std::int64_t>& kp, const ResolvedMask& mask,
                                       float scale) {
  kernels::KernelArgs args;
  args.q_pos = qp.data();
  args.kv_pos = kp.data();
  args.scale = scale;
  args.mask_slices = mask.slices().data();
  args.mask_slice_count = static_cast<std::int64_t>(mask.slices().size());
  return args;
}

/// Forward then backward of case c on the GPU with kernel `which` (outputs in c.dt); cudnn: the
/// state StepKernel::Cudnn needs (its backward reads the forward's out).
inline GpuResults run_case(const GpuCase& c, const GpuInputs& in, cuda::StepKernel which,
                           cuda::CudnnState* cudnn = nullptr) {
  const ResolvedMask mask(c.mask, c.global(true), c.global(false));
  const auto qp = c.positions(true), kp = c.positions(false);
  const kernels::KernelArgs args =
      kernel_args(qp, kp, mask, static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.D))));
  const std::vector<std::int64_t> rs{c.B, c.H, c.S_q};
  GpuResults r{empty_rounded(c.qs(), c.dt),
               Tensor(rs),
               Tensor(rs),
               empty_rounded(c.qs(), c.dt),
               empty_rounded(c.ks(), c.dt),
               empty_rounded(c.ks(), c.dt)};
  const bool l = c.sdpa_layout;
  EXPECT_TRUE(!c.unaligned || dtype_size(c.dt) == 2) << "unaligned: 16-bit tensors only";
  const std::size_t sh = c.unaligned ? 2 : 0;  // the 16-bit tensors; lse, delta stay fp32-aligned
  DevTensor q = to_device(in.q.bits.data(), c.dt, c.qs(), l, sh),
            k = to_device(in.k.bits.data(), c.dt, c.ks(), l, sh),
            v = to_device(in.v.bits.data(), c.dt, c.ks(), l, sh),
            g = to_device(in.g.bits.data(), c.dt, c.qs(), l, sh), out = poisoned(c.dt, c.qs(), l, sh),
            lse = poisoned(DType::F32, rs, false);
  cuda::step_forward(q.view, k.view, v.view, out.view, lse.view, args, nullptr, which, cudnn);
  cuda::check(cudaDeviceSynchronize(), "forward");
  from_device(out, r.out.bits.data());
  from_device(lse, r.lse.data());
  EXPECT_TRUE(guard_intact(out, "out"));
  EXPECT_TRUE(guard_intact(lse, "lse"));
  widen_into(r.out);
  attention_delta(in.g.wide.view(), r.out.wide.view(), r.delta.view());
  DevTensor delta = to_device(r.delta.data(), DType::F32, rs, false), dq = poisoned(c.dt, c.qs(), l, sh),
            dk = poisoned(c.dt, c.ks(), l, sh), dv = poisoned(c.dt, c.ks(), l, sh);
  cuda::step_backward(g.view, q.view, k.view, v.view, lse.view, delta.view, dq.view, dk.view, dv.view, args,
                      false, nullptr, which, cudnn, &out.view);
  cuda::check(cudaDeviceSynchronize(), "backward");
  from_device(dq, r.dq.bits.data());
  from_device(dk, r.dk.bits.data());
  from_device(dv, r.dv.bits.data());
  EXPECT_TRUE(guard_intact(dq, "dq"));
  EXPECT_TRUE(guard_intact(dk, "dk"));
  EXPECT_TRUE(guard_intact(dv, "dv"));
  widen_into(r.dq);
  widen_into(r.dk);
  widen_into(r.dv);
  return r;
}

inline AttentionParams oracle_params(const GpuCase& c, const std::vector<std::int64_t>& qp,
                                     const std::vector<std::int64_t>& kp) {
  AttentionParams p;
  p.mask = c.mask;
  p.impl = KernelImpl::Reference;
  p.num_threads = 0;
  p.q_positions = qp.data();
  p.kv_positions = kp.data();
  p.seq_q_global = c.global(true);
  p.seq_kv_global = c.global(false);
  return p;
}

/// Checks one kernel's results against the oracle; fast adds the P / dS rounding terms. Returns
/// the lse tolerance it used (the fp32 rule).
inline double check_case(const GpuCase& c, const GpuInputs& in, const GpuResults& r, bool fast) {
  SCOPED_TRACE(c.name + (fast ? " fast" : " reference") + " " + to_string(c.dt));
  const auto qp = c.positions(true), kp = c.positions(false);
  const AttentionParams p = oracle_params(c, qp, kp);
  const AttentionOutput ref = attention_forward(in.q.wide.view(), in.k.wide.view(), in.v.wide.view(), p);
  AttentionGrads gref{Tensor(c.qs()), Tensor(c.ks()), Tensor(c.ks())};
  attention_backward_with_delta(in.g.wide.view(), in.q.wide.view(), in.k.wide.view(), in.v.wide.view(),
                                r.lse.view(), r.delta.view(), gref.dq.view(), gref.dk.view(), gref.dv.view(),
                                p, false);
  const AttentionOutput nf = naive_fp32_forward(in.q.wide, in.k.wide, in.v.wide, p);
  const AttentionGrads gn =
      naive_fp32_backward(in.g.wide, in.q.wide, in.k.wide, in.v.wide, r.out.wide, r.lse, p);
  const std::optional<RoundingBounds> pb =
      fast ? std::optional<RoundingBounds>(
                 p_rounding_bounds_bshd(in.q.wide, in.k.wide, in.v.wide, in.g.wide, r.out.wide, r.lse, p))
           : std::nullopt;
  EXPECT_TRUE(
      within_lowp("out", r.out.wide, ref.out, max_abs_diff(nf.out, ref.out), c.dt, pb ? &pb->out : nullptr));
  for (std::int64_t i = 0; i < ref.lse.numel(); ++i) {
    const float want = ref.lse.data()[i], got = r.lse.data()[i];
    if (!std::isinf(want) && !std::isinf(got)) continue;
    if (want != got) {
      ADD_FAILURE() << "lse[" << i << "] " << got << ", the oracle's " << want << " (a row without keys)";
      break;
    }
    const std::int64_t b = i / (c.H * c.S_q), h = (i / c.S_q) % c.H, row = i % c.S_q;
    const std::int64_t at = ((b * c.S_q + row) * c.H + h) * c.D;
    for (std::int64_t d = 0; d < c.D; ++d) {
      if (r.out.wide.data()[at + d] != 0.0f || r.dq.wide.data()[at + d] != 0.0f) {
        ADD_FAILURE() << "out or dq of a row without keys is not 0 at (b, h, s, d) " << b << ", " << h << ", "
                      << row << ", " << d;
        break;
      }
    }
  }
  const double lse_tol = tolerance(max_abs_diff(nf.lse, ref.lse), max_abs(ref.lse));
  EXPECT_LE(max_abs_diff(r.lse, ref.lse), lse_tol) << "lse (fp32 rule)";
  EXPECT_TRUE(
      within_lowp("dq", r.dq.wide, gref.dq, max_abs_diff(gn.dq, gref.dq), c.dt, pb ? &pb->dq : nullptr));
  EXPECT_TRUE(
      within_lowp("dk", r.dk.wide, gref.dk, max_abs_diff(gn.dk, gref.dk), c.dt, pb ? &pb->dk : nullptr));
  EXPECT_TRUE(
      within_lowp("dv", r.dv.wide, gref.dv, max_abs_diff(gn.dv, gref.dv), c.dt, pb ? &pb->dv : nullptr));
  return lse_tol;
}

/// Every kernel on case c (the twin, Fast, FastMma: its forward, Fast's backward), each against
/// the oracle, and each fast one against the twin: the same rows without keys, lse within the sum
/// of the two fp32-rule tolerances (triangle inequality).
inline void check_both(const GpuCase& c) {
  const GpuInputs in = inputs_of(c);
  const GpuResults twin = run_case(c, in, cuda::StepKernel::Reference);
  const double tol_twin = check_case(c, in, twin, false);
  for (cuda::StepKernel which : {cuda::StepKernel::Fast, cuda::StepKernel::FastMma}) {
    const char* name = which == cuda::StepKernel::Fast ? "fast (wmma)" : "fast (mma.sync forward)";
    SCOPED_TRACE(name);
    const GpuResults fast = run_case(c, in, which);
    const double tol_fast = check_case(c, in, fast, true);
    SCOPED_TRACE(c.name + " " + name + " vs twin");
    for (std::int64_t i = 0; i < twin.lse.numel(); ++i) {
      const float a = fast.lse.data()[i], b = twin.lse.data()[i];
      if (std::isinf(a) || std::isinf(b)) {
        ASSERT_EQ(a, b) << "lse[" << i << "]";
      } else {
        ASSERT_LE(std::fabs(a - b), tol_twin + tol_fast) << "lse[" << i << "]";
      }
    }
  }
}

}  // namespace burst::test
