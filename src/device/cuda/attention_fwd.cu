// The fast forward step kernel (attention_cuda.h): FlashAttention-2's loop (Dao, arXiv
// 2307.08691, Algorithm 1) on the tensor cores through nvcuda::wmma. One block of 4 warps per
// (query tile of 64 rows, head, batch); each warp owns 16 query rows. Per key tile of 64:
//   S = Q·Kᵀ (wmma, fp32 accumulation) → shared memory;
//   per row (two lanes a row): mask (skipped in Full tiles), m' = max(m, max_j τ·S_j),
//   P_j = exp(τ·S_j − m'), l = l·exp(m − m') + Σ_j P_j, O ← O·exp(m − m'); P rounded to the
//   operand dtype, written over the warp's own scores;  O += P·V (wmma, O kept in fp32 shared
//   memory: wmma's accumulator layout is opaque, so the per-row rescale goes through memory).
// At the end out = O / l, lse = m + log l; a row that saw no key gets out = 0, lse = −inf.
// Tiles the mask leaves empty are skipped before their keys are loaded.
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
struct ForwardSmem {
  using St = Strides<D>;
  static constexpr std::size_t q = 0;
  static constexpr std::size_t k = q + sizeof(std::uint16_t) * kBq * St::op;
  static constexpr std::size_t v = k + sizeof(std::uint16_t) * kBkv * St::op;
  static constexpr std::size_t s = v + sizeof(std::uint16_t) * kBkv * St::op;
  static constexpr std::size_t o = s + sizeof(float) * kBq * St::score;
  // Small arrays after the tiles (no static shared memory: every offset is from the 128-byte
  // aligned start of the dynamic block).
  static constexpr std::size_t pos = o + sizeof(float) * kBq * St::acc;           // q_pos[kBq], kv_pos[kBkv]
  static constexpr std::size_t rows = pos + sizeof(std::int64_t) * (kBq + kBkv);  // m_row, l_row
  static constexpr std::size_t list = rows + sizeof(float) * 2 * kBq;
  static constexpr std::size_t bytes = list + sizeof(SliceList);
  static_assert(k % 32 == 0 && v % 32 == 0 && s % 32 == 0 && o % 32 == 0, "wmma alignment");
  // A warp's P (16 rows × kBkv, 16-bit) overwrites the start of its own S strip once its lanes
  // have read their scores: 9 KiB less a block, two blocks an SM at D = 128.
  static_assert(sizeof(std::uint16_t) * 16 * St::prob <= sizeof(float) * 16 * St::score, "P fits in S");
  static_assert(pos % 8 == 0 && list % alignof(SliceList) == 0, "array alignment");
};

template <typename T, int D>
__global__ void __launch_bounds__(kThreads) fast_forward_kernel(ForwardArgs a, bool vec) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  namespace wmma = nvcuda::wmma;
  using St = Strides<D>;
  using L = ForwardSmem<D>;
  extern __shared__ __align__(128) unsigned char smem[];
  T* Qs = reinterpret_cast<T*>(smem + L::q);
  T* Ks = reinterpret_cast<T*>(smem + L::k);
  T* Vs = reinterpret_cast<T*>(smem + L::v);
  float* Ss = reinterpret_cast<float*>(smem + L::s);
  float* Os = reinterpret_cast<float*>(smem + L::o);
  std::int64_t* q_pos = reinterpret_cast<std::int64_t*>(smem + L::pos);
  std::int64_t* kv_pos = q_pos + kBq;
  float* m_row = reinterpret_cast<float*>(smem + L::rows);
  float* l_row = m_row + kBq;
  SliceList& list = *reinterpret_cast<SliceList*>(smem + L::list);

  const StepArgs& s = a.s;
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
  // Heavier (later) query tiles of a causal mask first: they finish last otherwise.
  const std::int64_t q0 = static_cast<std::int64_t>(gridDim.x - 1 - blockIdx.x) * kBq;
  const std::int64_t h = blockIdx.y, b = blockIdx.z, hk = h / (s.H / s.H_kv);
  const int q_valid = static_cast<int>(min64(kBq, s.S_q - q0));

  for (int r = tid; r < kBq; r += kThreads) {
    q_pos[r] = s.q_pos[q0 + (r < q_valid ? r : q_valid - 1)];  // padded rows repeat the last one
    m_row[r] = -INFINITY;
    l_row[r] = 0.0f;
  }
  for (int e = tid; e < kBq * St::acc; e += kThreads) Os[e] = 0.0f;
  load_tile<T, D>(Qs, St::op, a.q, b, q0, h, kBq, q_valid, vec);
  const std::int64_t q_lo = s.q_pos[q0], q_hi = s.q_pos[q0 + q_valid - 1];
  filter_slices(list, s, true, q_lo, q_hi);  // ends with __syncthreads: Q, Os, rows ready

  const int r = 16 * warp + lane / 2;                        // this lane's row (two lanes a row)
  const int half = lane & 1;                                 // its columns: half, half + 2, ...
  T* Pw = reinterpret_cast<T*>(Ss + 16 * warp * St::score);  // this warp's P: 16 rows, stride St::prob
  for (std::int64_t k0 = 0; k0 < s.S_kv; k0 += kBkv) {
    const int k_valid = static_cast<int>(min64(kBkv, s.S_kv - k0));
    const TileClass cls = classify_tile(list, s, q_lo, q_hi, s.kv_pos[k0], s.kv_pos[k0 + k_valid - 1]);
    if (cls == TileClass::Empty) continue;
    for (int c = tid; c < kBkv; c += kThreads) kv_pos[c] = s.kv_pos[k0 + (c < k_valid ? c : k_valid - 1)];
    load_tile<T, D>(Ks, St::op, a.k, b, k0, hk, kBkv, k_valid, vec);
    load_tile<T, D>(Vs, St::op, a.v, b, k0, hk, kBkv, k_valid, vec);
    __syncthreads();

    // S (this warp's 16 rows × 64 keys) = Q·Kᵀ; Kᵀ is K read column-major.
    for (int n = 0; n < kBkv / 16; ++n) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 0.0f);
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb;
        wmma::load_matrix_sync(fa, Qs + 16 * warp * St::op + 16 * kk, St::op);
        wmma::load_matrix_sync(fb, Ks + 16 * n * St::op + 16 * kk, St::op);
        wmma::mma_sync(acc, fa, fb, acc);
      }
      wmma::store_matrix_sync(Ss + 16 * warp * St::score + 16 * n, acc, St::score, wmma::mem_row_major);
    }
    __syncwarp();

    // Online softmax of row r over this tile (the lane pair's 32 columns each).
    float x[kBkv / 2];
    float mx = -INFINITY;
#pragma unroll
    for (int t = 0; t < kBkv / 2; ++t) {
      const int c = half + 2 * t;
      const bool ok = c < k_valid && (cls == TileClass::Full || list_visible(list, s, q_pos[r], kv_pos[c]));
      x[t] = ok ? s.scale * Ss[r * St::score + c] : -INFINITY;
      mx = fmaxf(mx, x[t]);
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));  // also: every lane has read its scores
    __syncwarp();                                         // before P overwrites them
    const float m_old = m_row[r], m_new = fmaxf(m_old, mx);
    const bool none = m_new == -INFINITY;  // no visible key for this row yet
    const float alpha = none ? 1.0f : expf(m_old - m_new);
    float sum = 0.0f;
#pragma unroll
    for (int t = 0; t < kBkv / 2; ++t) {
      const float p = none ? 0.0f : expf(x[t] - m_new);
      sum += p;
      Pw[(lane / 2) * St::prob + half + 2 * t] = to_op<T>(p);
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    __syncwarp();  // both lanes read m_row[r] before it changes
    if (half == 0) {
      m_row[r] = m_new;
      l_row[r] = l_row[r] * alpha + sum;
    }
    if (alpha != 1.0f)
      for (int d = half; d < D; d += 2) Os[r * St::acc + d] *= alpha;
    __syncwarp();

    // O (16 rows × D) += P·V.
    for (int n = 0; n < D / 16; ++n) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      float* o = Os + 16 * warp * St::acc + 16 * n;
      wmma::load_matrix_sync(acc, o, St::acc, wmma::mem_row_major);
#pragma unroll
      for (int kk = 0; kk < kBkv / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb;
        wmma::load_matrix_sync(fa, Pw + 16 * kk, St::prob);
        wmma::load_matrix_sync(fb, Vs + 16 * kk * St::op + 16 * n, St::op);
        wmma::mma_sync(acc, fa, fb, acc);
      }
      wmma::store_matrix_sync(o, acc, St::acc, wmma::mem_row_major);
    }
    __syncthreads();  // K, V, kv_pos free for the next tile
  }

  // out = O / l (coalesced along D), lse = m + log l.
  for (int e = tid; e < q_valid * D; e += kThreads) {
    const int row = e / D, d = e % D;
    const float l = l_row[row];
    store_elem(a.out, row_offset(a.out, b, q0 + row, h) + d, normalized_out(Os[row * St::acc + d], l), false);
  }
  for (int row = tid; row < q_valid; row += kThreads) {
    const float l = l_row[row];
    row_at(a.lse, b, h, q0 + row) = row_lse(m_row[row], l);
  }
#else
  (void)a;
  (void)vec;
  trap_below_sm80();
#endif
}

}  // namespace

std::size_t fast_forward_smem_bytes(std::int64_t D) { return smem_bytes_for<ForwardSmem>(D); }

void launch_fast_forward(const ForwardArgs& a, cudaStream_t stream) {
  if (a.s.B * a.s.H * a.s.S_q == 0) return;
  const bool vec = aligned16(a.q) && aligned16(a.k) && aligned16(a.v);
  const dim3 grid = tile_grid(a.s.S_q, kBq, a.s.H, a.s.B);
  dispatch_tiles(a.q.dtype, a.s.D, [&]<typename T, int D>() {
    launch_tiles(fast_forward_kernel<T, D>, static_cast<int>(ForwardSmem<D>::bytes), grid, a, vec, stream,
                 "fast attention forward");
  });
}

}  // namespace burst::cuda
