// The reference twin of the GPU step kernels (attention_cuda.h): attention by definition, in
// fp32, one thread per row, the mask asked per element of the slice table (mask_table.h). The
// same loops as the CPU oracle (src/kernels/attention_reference.cc) with float for double:
// Forward, per row i of head h (KV head h / (H/H_kv)):
//   s_j = τ·q_i·k_j for visible j;  m = max_j s_j;  l = Σ_j exp(s_j − m);
//   out_i = Σ_j exp(s_j − m)·v_j / l;  lse_i = m + log l;  no visible j → out_i = 0, lse_i = −inf.
// Backward (docs/algorithm.md §3), with lse and delta given:
//   P_ij = exp(s_ij − lse_i);  dS_ij = P_ij·(dout_i·v_j − delta_i);
//   dQ_i = τ·Σ_j dS_ij·k_j  (one thread per query row);
//   dK_j = τ·Σ_{h in group, i} dS_ij·q_i,  dV_j = Σ_{h in group, i} P_ij·dout_i  (one thread per key row).
// No atomics: every output element is written by one thread, in a fixed order.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "burst/error.h"
#include "device/cuda/attention_device.cuh"

namespace burst::cuda {
namespace {

constexpr int kMaxD = 256;
constexpr int kThreads = 128;

__device__ bool visible(const StepArgs& s, std::int64_t i, std::int64_t j) {
  return table_visible(s.slices, s.slice_count, s.q_pos[i], s.kv_pos[j]);
}

// The row this thread owns: one thread a row of the flattened grid.
__device__ std::int64_t thread_row() {
  return static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}

// Query row `row` of the flattened [B, H, S_q] grid: its position i, head h, batch b, and the
// K/V head hk its GQA group reads.
struct QueryRow {
  std::int64_t i, h, b, hk;
};
__device__ QueryRow query_row(const StepArgs& s, std::int64_t row) {
  const std::int64_t h = (row / s.S_q) % s.H;
  return {row % s.S_q, h, row / (s.S_q * s.H), h / (s.H / s.H_kv)};
}

__device__ float dot_rows(const BshdArg& a, std::int64_t oa, const BshdArg& b, std::int64_t ob, int D) {
  float acc = 0.0f;
  for (int d = 0; d < D; ++d) acc = fmaf(load_elem(a, oa + d), load_elem(b, ob + d), acc);
  return acc;
}

__global__ void reference_forward_kernel(ForwardArgs a) {
  const StepArgs& s = a.s;
  const std::int64_t row = thread_row();
  if (row >= s.B * s.H * s.S_q) return;
  const auto [i, h, b, hk] = query_row(s, row);
  const int D = static_cast<int>(s.D);
  const std::int64_t oq = row_offset(a.q, b, i, h);
  float m = -INFINITY;
  for (std::int64_t j = 0; j < s.S_kv; ++j) {
    if (!visible(s, i, j)) continue;
    m = fmaxf(m, s.scale * dot_rows(a.q, oq, a.k, row_offset(a.k, b, j, hk), D));
  }
  float acc[kMaxD];
  for (int d = 0; d < D; ++d) acc[d] = 0.0f;
  float l = 0.0f;
  if (m != -INFINITY) {
    for (std::int64_t j = 0; j < s.S_kv; ++j) {
      if (!visible(s, i, j)) continue;
      const float e = expf(s.scale * dot_rows(a.q, oq, a.k, row_offset(a.k, b, j, hk), D) - m);
      l += e;
      const std::int64_t ov = row_offset(a.v, b, j, hk);
      for (int d = 0; d < D; ++d) acc[d] = fmaf(e, load_elem(a.v, ov + d), acc[d]);
    }
  }
  const std::int64_t oo = row_offset(a.out, b, i, h);
  if (l == 0.0f) {  // no visible key: the flash_attn convention, never NaN
    for (int d = 0; d < D; ++d) store_elem(a.out, oo + d, 0.0f, false);
    row_at(a.lse, b, h, i) = -INFINITY;
    return;
  }
  for (int d = 0; d < D; ++d) store_elem(a.out, oo + d, acc[d] / l, false);
  row_at(a.lse, b, h, i) = m + logf(l);
}

// dS_ij and P_ij of one visible pair; false when the row contributes nothing there.
__device__ bool pair_grads(const BackwardArgs& a, std::int64_t b, std::int64_t h, std::int64_t i,
                           std::int64_t hk, std::int64_t j, float& P, float& dS) {
  const StepArgs& s = a.s;
  const float lse = row_at(a.lse, b, h, i);
  if (lse == -INFINITY || !visible(s, i, j)) return false;
  const int D = static_cast<int>(s.D);
  const float score = s.scale * dot_rows(a.q, row_offset(a.q, b, i, h), a.k, row_offset(a.k, b, j, hk), D);
  P = expf(score - lse);
  const float dP = dot_rows(a.dout, row_offset(a.dout, b, i, h), a.v, row_offset(a.v, b, j, hk), D);
  dS = P * (dP - row_at(a.delta, b, h, i));
  return true;
}

__global__ void reference_backward_dq_kernel(BackwardArgs a) {
  const StepArgs& s = a.s;
  const std::int64_t row = thread_row();
  if (row >= s.B * s.H * s.S_q) return;
  const auto [i, h, b, hk] = query_row(s, row);
  const int D = static_cast<int>(s.D);
  float acc[kMaxD];
  for (int d = 0; d < D; ++d) acc[d] = 0.0f;
  for (std::int64_t j = 0; j < s.S_kv; ++j) {
    float P = 0.0f, dS = 0.0f;
    if (!pair_grads(a, b, h, i, hk, j, P, dS)) continue;
    const std::int64_t ok = row_offset(a.k, b, j, hk);
    for (int d = 0; d < D; ++d) acc[d] = fmaf(s.scale * dS, load_elem(a.k, ok + d), acc[d]);
  }
  const std::int64_t oq = row_offset(a.dq, b, i, h);
  for (int d = 0; d < D; ++d) store_elem(a.dq, oq + d, acc[d], a.accumulate);
}

__global__ void reference_backward_dkv_kernel(BackwardArgs a) {
  const StepArgs& s = a.s;
  const std::int64_t row = thread_row();
  if (row >= s.B * s.H_kv * s.S_kv) return;
  const std::int64_t j = row % s.S_kv, hk = (row / s.S_kv) % s.H_kv, b = row / (s.S_kv * s.H_kv);
  const std::int64_t group = s.H / s.H_kv;
  const int D = static_cast<int>(s.D);
  float dk[kMaxD], dv[kMaxD];
  for (int d = 0; d < D; ++d) dk[d] = dv[d] = 0.0f;
  for (std::int64_t h = hk * group; h < (hk + 1) * group; ++h) {
    for (std::int64_t i = 0; i < s.S_q; ++i) {
      float P = 0.0f, dS = 0.0f;
      if (!pair_grads(a, b, h, i, hk, j, P, dS)) continue;
      const std::int64_t oq = row_offset(a.q, b, i, h), og = row_offset(a.dout, b, i, h);
      for (int d = 0; d < D; ++d) {
        dk[d] = fmaf(s.scale * dS, load_elem(a.q, oq + d), dk[d]);
        dv[d] = fmaf(P, load_elem(a.dout, og + d), dv[d]);
      }
    }
  }
  const std::int64_t ok = row_offset(a.dk, b, j, hk), ov = row_offset(a.dv, b, j, hk);
  for (int d = 0; d < D; ++d) {
    store_elem(a.dk, ok + d, dk[d], a.accumulate);
    store_elem(a.dv, ov + d, dv[d], a.accumulate);
  }
}

unsigned blocks_for(std::int64_t rows) { return static_cast<unsigned>((rows + kThreads - 1) / kThreads); }

}  // namespace

void launch_reference_forward(const ForwardArgs& a, cudaStream_t stream) {
  BURST_CHECK(a.s.D <= kMaxD, Unsupported, "the CUDA reference attention takes D <= ", kMaxD, ", not ",
              a.s.D);
  const std::int64_t rows = a.s.B * a.s.H * a.s.S_q;
  if (rows == 0) return;
  reference_forward_kernel<<<blocks_for(rows), kThreads, 0, stream>>>(a);
  check_launch("reference attention forward");
}

void launch_reference_backward(const BackwardArgs& a, cudaStream_t stream) {
  BURST_CHECK(a.s.D <= kMaxD, Unsupported, "the CUDA reference attention takes D <= ", kMaxD, ", not ",
              a.s.D);
  const std::int64_t q_rows = a.s.B * a.s.H * a.s.S_q, kv_rows = a.s.B * a.s.H_kv * a.s.S_kv;
  if (q_rows > 0) {
    reference_backward_dq_kernel<<<blocks_for(q_rows), kThreads, 0, stream>>>(a);
    check_launch("reference attention backward (dq)");
  }
  if (kv_rows > 0) {
    reference_backward_dkv_kernel<<<blocks_for(kv_rows), kThreads, 0, stream>>>(a);
    check_launch("reference attention backward (dk, dv)");
  }
}

}  // namespace burst::cuda
