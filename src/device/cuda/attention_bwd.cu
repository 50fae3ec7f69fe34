// The fast backward step kernel (attention_cuda.h): FlashAttention-2's backward (Dao, arXiv
// 2307.08691, Algorithm 2) on the tensor cores through nvcuda::wmma, given lse and delta. One
// block of 4 warps per (key tile of 64, KV head, batch); it loads K, V once and walks the query
// heads of its GQA group and every query tile that the mask does not leave empty:
//   S = Q·Kᵀ, dP = dO·Vᵀ (wmma, fp32) → shared memory;
//   P = exp(τ·S − lse) (0 where masked or lse = −inf), dS = P ∘ (dP − delta), both rounded to
//   the operand dtype;
//   dV += Pᵀ·dO, dK += dSᵀ·Q (wmma accumulators in registers: warp w owns key rows 16w..16w+15,
//   every column of D; never rescaled, so the opaque fragment layout does not matter);
//   dQ_tile = dS·K → shared memory → added to the fp32 dq target with atomics (τ applied there).
// At the end dK·τ and dV are written (or added, accumulate) once per element.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <cmath>
#include <cstdint>

#include "burst/error.h"
#include "device/cuda/attention_tiles.cuh"

namespace burst::cuda {
namespace {

using namespace tiles;  // NOLINT: the tile constants read better unqualified here

template <int D>
struct BackwardSmem {
  using St = Strides<D>;
  static constexpr std::size_t op_tile = sizeof(std::uint16_t) * kBq * St::op;  // kBq == kBkv
  static constexpr std::size_t k = 0;
  static constexpr std::size_t v = k + op_tile;
  static constexpr std::size_t q = v + op_tile;
  static constexpr std::size_t dout = q + op_tile;
  static constexpr std::size_t s = dout + op_tile;
  static constexpr std::size_t dp = s + sizeof(float) * kBq * St::score;
  static constexpr std::size_t p = dp + sizeof(float) * kBq * St::score;
  static constexpr std::size_t ds = p + sizeof(std::uint16_t) * kBq * St::prob;
  static constexpr std::size_t acc = ds + sizeof(std::uint16_t) * kBq * St::prob;
  // Small arrays after the tiles (no static shared memory: every offset is from the 128-byte
  // aligned start of the dynamic block).
  static constexpr std::size_t pos = acc + sizeof(float) * kBq * St::acc;         // q_pos[kBq], kv_pos[kBkv]
  static constexpr std::size_t rows = pos + sizeof(std::int64_t) * (kBq + kBkv);  // lse_row, delta_row
  static constexpr std::size_t list = rows + sizeof(float) * 2 * kBq;
  static constexpr std::size_t bytes = list + sizeof(SliceList);
  static_assert(pos % 8 == 0 && list % alignof(SliceList) == 0, "array alignment");
  static_assert(op_tile % 32 == 0 && s % 32 == 0 && dp % 32 == 0 && p % 32 == 0 && ds % 32 == 0 &&
                    acc % 32 == 0,
                "wmma alignment");
};

template <typename T, int D>
__global__ void __launch_bounds__(kThreads) fast_backward_kernel(BackwardArgs a, bool vec) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  namespace wmma = nvcuda::wmma;
  using St = Strides<D>;
  using L = BackwardSmem<D>;
  using Acc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;
  extern __shared__ __align__(128) unsigned char smem[];
  T* Ks = reinterpret_cast<T*>(smem + L::k);
  T* Vs = reinterpret_cast<T*>(smem + L::v);
  T* Qs = reinterpret_cast<T*>(smem + L::q);
  T* dOs = reinterpret_cast<T*>(smem + L::dout);
  float* Ss = reinterpret_cast<float*>(smem + L::s);
  float* dPs = reinterpret_cast<float*>(smem + L::dp);
  T* Ps = reinterpret_cast<T*>(smem + L::p);
  T* dSs = reinterpret_cast<T*>(smem + L::ds);
  float* As = reinterpret_cast<float*>(smem + L::acc);  // dQ tile; dK, dV staging at the end
  std::int64_t* q_pos = reinterpret_cast<std::int64_t*>(smem + L::pos);
  std::int64_t* kv_pos = q_pos + kBq;
  float* lse_row = reinterpret_cast<float*>(smem + L::rows);
  float* delta_row = lse_row + kBq;
  SliceList& list = *reinterpret_cast<SliceList*>(smem + L::list);

  const StepArgs& s = a.s;
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const std::int64_t k0 = static_cast<std::int64_t>(blockIdx.x) * kBkv;
  const std::int64_t hk = blockIdx.y, b = blockIdx.z, group = s.H / s.H_kv;
  const int k_valid = static_cast<int>(min64(kBkv, s.S_kv - k0));

  for (int c = tid; c < kBkv; c += kThreads) kv_pos[c] = s.kv_pos[k0 + (c < k_valid ? c : k_valid - 1)];
  load_tile<T, D>(Ks, St::op, a.k, b, k0, hk, kBkv, k_valid, vec);
  load_tile<T, D>(Vs, St::op, a.v, b, k0, hk, kBkv, k_valid, vec);
  const std::int64_t k_lo = s.kv_pos[k0], k_hi = s.kv_pos[k0 + k_valid - 1];
  filter_slices(list, s, false, k_lo, k_hi);  // ends with __syncthreads

  Acc dk[D / 16], dv[D / 16];
#pragma unroll
  for (int n = 0; n < D / 16; ++n) {
    wmma::fill_fragment(dk[n], 0.0f);
    wmma::fill_fragment(dv[n], 0.0f);
  }
  const int r = 16 * warp + lane / 2;  // this lane's query row in the tile (two lanes a row)
  const int half = lane & 1;           // its key columns: half, half + 2, ...

  for (std::int64_t h = hk * group; h < (hk + 1) * group; ++h) {
    for (std::int64_t q0 = 0; q0 < s.S_q; q0 += kBq) {
      const int q_valid = static_cast<int>(min64(kBq, s.S_q - q0));
      const TileClass cls = classify_tile(list, s, s.q_pos[q0], s.q_pos[q0 + q_valid - 1], k_lo, k_hi);
      if (cls == TileClass::Empty) continue;
      for (int i = tid; i < kBq; i += kThreads) {
        const bool valid = i < q_valid;
        q_pos[i] = s.q_pos[q0 + (valid ? i : q_valid - 1)];
        lse_row[i] = valid ? row_at(a.lse, b, h, q0 + i) : -INFINITY;  // padded rows: P = 0
        delta_row[i] = valid ? row_at(a.delta, b, h, q0 + i) : 0.0f;
      }
      load_tile<T, D>(Qs, St::op, a.q, b, q0, h, kBq, q_valid, vec);
      load_tile<T, D>(dOs, St::op, a.dout, b, q0, h, kBq, q_valid, vec);
      __syncthreads();

      // S = Q·Kᵀ and dP = dO·Vᵀ for this warp's 16 query rows.
      for (int n = 0; n < kBkv / 16; ++n) {
        Acc sc, dp;
        wmma::fill_fragment(sc, 0.0f);
        wmma::fill_fragment(dp, 0.0f);
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
          wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
          wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb;
          wmma::load_matrix_sync(fa, Qs + 16 * warp * St::op + 16 * kk, St::op);
          wmma::load_matrix_sync(fb, Ks + 16 * n * St::op + 16 * kk, St::op);
          wmma::mma_sync(sc, fa, fb, sc);
          wmma::load_matrix_sync(fa, dOs + 16 * warp * St::op + 16 * kk, St::op);
          wmma::load_matrix_sync(fb, Vs + 16 * n * St::op + 16 * kk, St::op);
          wmma::mma_sync(dp, fa, fb, dp);
        }
        wmma::store_matrix_sync(Ss + 16 * warp * St::score + 16 * n, sc, St::score, wmma::mem_row_major);
        wmma::store_matrix_sync(dPs + 16 * warp * St::score + 16 * n, dp, St::score, wmma::mem_row_major);
      }
      __syncwarp();

      // P and dS of row r (fp32, then rounded once to the operand dtype).
      const float lse = lse_row[r], delta = delta_row[r];
      for (int t = 0; t < kBkv / 2; ++t) {
        const int c = half + 2 * t;
        const bool ok = c < k_valid && lse != -INFINITY &&
                        (cls == TileClass::Full || list_visible(list, s, q_pos[r], kv_pos[c]));
        const float p = ok ? expf(s.scale * Ss[r * St::score + c] - lse) : 0.0f;
        Ps[r * St::prob + c] = to_op<T>(p);
        dSs[r * St::prob + c] = to_op<T>(p * (dPs[r * St::score + c] - delta));
      }
      __syncthreads();  // every warp reads every query row of P and dS below

      // dV += Pᵀ·dO and dK += dSᵀ·Q for this warp's 16 key rows (Pᵀ is P read column-major).
#pragma unroll
      for (int n = 0; n < D / 16; ++n) {
#pragma unroll
        for (int kk = 0; kk < kBq / 16; ++kk) {
          wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::col_major> fa;
          wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb;
          wmma::load_matrix_sync(fa, Ps + 16 * kk * St::prob + 16 * warp, St::prob);
          wmma::load_matrix_sync(fb, dOs + 16 * kk * St::op + 16 * n, St::op);
          wmma::mma_sync(dv[n], fa, fb, dv[n]);
          wmma::load_matrix_sync(fa, dSs + 16 * kk * St::prob + 16 * warp, St::prob);
          wmma::load_matrix_sync(fb, Qs + 16 * kk * St::op + 16 * n, St::op);
          wmma::mma_sync(dk[n], fa, fb, dk[n]);
        }
      }

      // dQ (this warp's 16 query rows × D) = dS·K, then τ·dQ added to the fp32 target.
      for (int n = 0; n < D / 16; ++n) {
        Acc dq;
        wmma::fill_fragment(dq, 0.0f);
#pragma unroll
        for (int kk = 0; kk < kBkv / 16; ++kk) {
          wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
          wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb;
          wmma::load_matrix_sync(fa, dSs + 16 * warp * St::prob + 16 * kk, St::prob);
          wmma::load_matrix_sync(fb, Ks + 16 * kk * St::op + 16 * n, St::op);
          wmma::mma_sync(dq, fa, fb, dq);
        }
        wmma::store_matrix_sync(As + 16 * warp * St::acc + 16 * n, dq, St::acc, wmma::mem_row_major);
      }
      __syncwarp();
      for (int e = lane; e < 16 * D; e += 32) {
        const int row = 16 * warp + e / D, d = e % D;
        if (row < q_valid)
          atomicAdd(static_cast<float*>(a.dq.data) + row_offset(a.dq, b, q0 + row, h) + d,
                    s.scale * As[row * St::acc + d]);
      }
      __syncthreads();  // Q, dO, P, dS, the dQ tile free for the next query tile
    }
  }

  // dK·τ, then dV, through shared memory (coalesced along D), written once per element.
  const auto write_out = [&](Acc(&frags)[D / 16], const BshdArg& out, float f) {
#pragma unroll
    for (int n = 0; n < D / 16; ++n)
      wmma::store_matrix_sync(As + 16 * warp * St::acc + 16 * n, frags[n], St::acc, wmma::mem_row_major);
    __syncthreads();
    for (int e = tid; e < k_valid * D; e += kThreads) {
      const int row = e / D, d = e % D;
      store_elem(out, row_offset(out, b, k0 + row, hk) + d, f * As[row * St::acc + d], a.accumulate);
    }
    __syncthreads();
  };
  write_out(dk, a.dk, s.scale);
  write_out(dv, a.dv, 1.0f);
#else
  (void)a;
  (void)vec;
  trap_below_sm80();
#endif
}

}  // namespace

std::size_t fast_backward_smem_bytes(std::int64_t D) { return smem_bytes_for<BackwardSmem>(D); }

void launch_fast_backward(const BackwardArgs& a, cudaStream_t stream) {
  if (a.s.B * a.s.H_kv * a.s.S_kv == 0) return;
  const bool vec = aligned16(a.q) && aligned16(a.k) && aligned16(a.v) && aligned16(a.dout);
  const dim3 grid = tile_grid(a.s.S_kv, kBkv, a.s.H_kv, a.s.B);
  dispatch_tiles(a.q.dtype, a.s.D, [&]<typename T, int D>() {
    launch_tiles(fast_backward_kernel<T, D>, static_cast<int>(BackwardSmem<D>::bytes), grid, a, vec, stream,
                 "fast attention backward");
  });
}

}  // namespace burst::cuda
