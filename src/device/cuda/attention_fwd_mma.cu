// The register-resident forward step kernel (attention_cuda.h, StepKernel::FastMma): the loop of
// attention_fwd.cu (FlashAttention-2, arXiv 2307.08691, Alg. 1) with the scores, P and O kept in
// registers as mma.sync.m16n8k16 fragments, whose layout the PTX ISA fixes (§ "Matrix fragments
// for mma.m16n8k16"): in a warp, lane = 4·g + t holds of a 16×8 fp32 accumulator the elements
// (g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1); of a 16×16 A operand the pairs (g, 2t..2t+1),
// (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..); of a 16×8 B operand (2t..2t+1, g), (2t+8..2t+9, g).
// So the score accumulators of two adjacent 8-key blocks are, converted, the A operand of P·V
// (no trip through memory), and each row's max and sum are reduced over the 4 lanes of a quad.
// Operands come from shared memory through ldmatrix (K as stored for Kᵀ, V transposed). Every
// lane-to-element formula is in mma_layout.h, checked on the CPU by tests/test_cuda_mma_layout.cc.
// One block of 4 warps per (query tile of 64, head, batch); each warp owns 16 query rows.
// Numerics: those of the wmma kernel (fp32 accumulation, P rounded to the operand dtype).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "burst/error.h"
#include "device/cuda/attention_tiles.cuh"
#include "device/cuda/mma_layout.h"

namespace burst::cuda {
namespace {

using namespace tiles;  // NOLINT: the tile constants read better unqualified here
using mma_layout::RowCol;

template <int D>
struct MmaSmem {
  using St = Strides<D>;
  static constexpr std::size_t q = 0;
  static constexpr std::size_t k = q + sizeof(std::uint16_t) * kBq * St::op;
  static constexpr std::size_t v = k + sizeof(std::uint16_t) * kBkv * St::op;
  static constexpr std::size_t pos = v + sizeof(std::uint16_t) * kBkv * St::op;  // q_pos, kv_pos
  static constexpr std::size_t list = pos + sizeof(std::int64_t) * (kBq + kBkv);
  static constexpr std::size_t bytes = list + sizeof(SliceList);
  static_assert(k % 16 == 0 && v % 16 == 0 && pos % 8 == 0 && list % alignof(SliceList) == 0, "alignment");
};

__device__ __forceinline__ unsigned smem_address(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

/// Four 8×8 16-bit matrices from shared memory; lane l gives the address of row l % 8 of matrix
/// l / 8 and receives, of matrix i, the pair (l / 4, 2·(l % 4)..+1) in r[i] (trans: the pair
/// (2·(l % 4)..+1, l / 4), i.e. of the transposed matrix).
template <bool kTrans>
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const void* row_address) {
  if constexpr (kTrans) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_address(row_address)));
  } else {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_address(row_address)));
  }
}

/// c += a·b for one m16n8k16 tile, fp32 accumulation (bf16 or fp16 operands).
template <typename T>
__device__ __forceinline__ void mma(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

/// Two fp32 values rounded to the operand dtype, packed low (first) and high (second).
template <typename T>
__device__ __forceinline__ unsigned pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const unsigned*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const unsigned*>(&v);
  }
}

/// Sum or max over the 4 lanes of a quad (the lanes holding one row).
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

template <typename T, int D>
__global__ void __launch_bounds__(kThreads) mma_forward_kernel(ForwardArgs a, bool vec) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using St = Strides<D>;
  using L = MmaSmem<D>;
  constexpr int kNb = kBkv / 8;  // 8-key blocks of a tile
  constexpr int kDb = D / 8;     // 8-column blocks of O
  extern __shared__ __align__(128) unsigned char smem[];
  T* Qs = reinterpret_cast<T*>(smem + L::q);
  T* Ks = reinterpret_cast<T*>(smem + L::k);
  T* Vs = reinterpret_cast<T*>(smem + L::v);
  std::int64_t* q_pos = reinterpret_cast<std::int64_t*>(smem + L::pos);
  std::int64_t* kv_pos = q_pos + kBq;
  SliceList& list = *reinterpret_cast<SliceList*>(smem + L::list);

  const StepArgs& s = a.s;
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const int t = lane % 4;  // this lane's place in its quad (t == 0 writes the row's lse)
  const std::int64_t q0 = static_cast<std::int64_t>(gridDim.x - 1 - blockIdx.x) * kBq;
  const std::int64_t h = blockIdx.y, b = blockIdx.z, hk = h / (s.H / s.H_kv);
  const int q_valid = static_cast<int>(min64(kBq, s.S_q - q0));

  for (int r = tid; r < kBq; r += kThreads) q_pos[r] = s.q_pos[q0 + (r < q_valid ? r : q_valid - 1)];
  load_tile<T, D>(Qs, St::op, a.q, b, q0, h, kBq, q_valid, vec);
  const std::int64_t q_lo = s.q_pos[q0], q_hi = s.q_pos[q0 + q_valid - 1];
  filter_slices(list, s, true, q_lo, q_hi);  // ends with __syncthreads

  // This warp's 16 rows of Q as A fragments, one per 16 columns of D.
  unsigned qf[D / 16][4];
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    const RowCol at = mma_layout::q_address(warp, kk, lane);
    ldmatrix_x4<false>(qf[kk], Qs + at.row * St::op + at.col);
  }

  float o[kDb][4];
#pragma unroll
  for (int n = 0; n < kDb; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // rows g, g + 8; l: this lane's part
  // Rows of elements 0, 1 and 2, 3 of every accumulator: 16·warp + g, 16·warp + g + 8.
  const int row[2] = {16 * warp + mma_layout::accumulator_element(lane, 0).row,
                      16 * warp + mma_layout::accumulator_element(lane, 2).row};

  for (std::int64_t k0 = 0; k0 < s.S_kv; k0 += kBkv) {
    const int k_valid = static_cast<int>(min64(kBkv, s.S_kv - k0));
    const TileClass cls = classify_tile(list, s, q_lo, q_hi, s.kv_pos[k0], s.kv_pos[k0 + k_valid - 1]);
    if (cls == TileClass::Empty) continue;
    for (int c = tid; c < kBkv; c += kThreads) kv_pos[c] = s.kv_pos[k0 + (c < k_valid ? c : k_valid - 1)];
    load_tile<T, D>(Ks, St::op, a.k, b, k0, hk, kBkv, k_valid, vec);
    load_tile<T, D>(Vs, St::op, a.v, b, k0, hk, kBkv, k_valid, vec);
    __syncthreads();

    // S = Q·Kᵀ: key block j of B is rows 8j..8j+7 of K as stored; x4 loads two key blocks.
    float sc[kNb][4];
#pragma unroll
    for (int j = 0; j < kNb; ++j) sc[j][0] = sc[j][1] = sc[j][2] = sc[j][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
#pragma unroll
      for (int j = 0; j < kNb; j += 2) {
        unsigned kb[4];  // (block j, cols 0–7), (j, 8–15), (j + 1, 0–7), (j + 1, 8–15)
        const RowCol at = mma_layout::k_address(j, kk, lane);
        ldmatrix_x4<false>(kb, Ks + at.row * St::op + at.col);
        mma<T>(sc[j], qf[kk], kb[0], kb[1]);
        mma<T>(sc[j + 1], qf[kk], kb[2], kb[3]);
      }
    }

    // Online softmax on the fragments: element e of block j is row row[e / 2], key 8j + 2t + e % 2.
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < kNb; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int c = 8 * j + mma_layout::accumulator_element(lane, e).col;
        const bool ok =
            c < k_valid && (cls == TileClass::Full || list_visible(list, s, q_pos[row[e / 2]], kv_pos[c]));
        sc[j][e] = ok ? s.scale * sc[j][e] : -INFINITY;
        mx[e / 2] = fmaxf(mx[e / 2], sc[j][e]);
      }
    float alpha[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const float m_new = fmaxf(m[i], quad_max(mx[i]));
      alpha[i] = m_new == -INFINITY ? 1.0f : expf(m[i] - m_new);
      m[i] = m_new;
      l[i] *= alpha[i];
    }
#pragma unroll
    for (int j = 0; j < kNb; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float mi = m[e / 2];
        const float p = mi == -INFINITY ? 0.0f : expf(sc[j][e] - mi);
        sc[j][e] = p;
        l[e / 2] += p;
      }
#pragma unroll
    for (int n = 0; n < kDb; ++n) {
      o[n][0] *= alpha[0];
      o[n][1] *= alpha[0];
      o[n][2] *= alpha[1];
      o[n][3] *= alpha[1];
    }

    // O += P·V: P of key blocks 2kk, 2kk + 1 is the A fragment of keys 16kk..16kk+15; V's B
    // fragments come transposed, two 8-column blocks of D per x4.
#pragma unroll
    for (int kk = 0; kk < kBkv / 16; ++kk) {
      unsigned pa[4];
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const mma_layout::AccumulatorPair src = mma_layout::p_operand_source(r);
        pa[r] = pack2<T>(sc[2 * kk + src.block][src.first], sc[2 * kk + src.block][src.first + 1]);
      }
#pragma unroll
      for (int n = 0; n < kDb; n += 2) {
        unsigned vb[4];  // (keys 0–7, cols n), (keys 8–15, cols n), (0–7, n + 1), (8–15, n + 1)
        const RowCol at = mma_layout::v_address(kk, n, lane);
        ldmatrix_x4<true>(vb, Vs + at.row * St::op + at.col);
        mma<T>(o[n], pa, vb[0], vb[1]);
        mma<T>(o[n + 1], pa, vb[2], vb[3]);
      }
    }
    __syncthreads();  // K, V, kv_pos free for the next tile
  }

  // out = O / l, lse = m + log l (l summed over the quad); rows beyond S_q are not written.
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const float sum = quad_sum(l[i]);
    const std::int64_t qi = q0 + row[i];
    if (row[i] >= q_valid) continue;
    const std::int64_t at = row_offset(a.out, b, qi, h);
#pragma unroll
    for (int n = 0; n < kDb; ++n)
#pragma unroll
      for (int e = 0; e < 2; ++e)
        store_elem(a.out, at + 8 * n + mma_layout::accumulator_element(lane, 2 * i + e).col,
                   normalized_out(o[n][2 * i + e], sum), false);
    if (t == 0) row_at(a.lse, b, h, qi) = row_lse(m[i], sum);
  }
#else
  (void)a;
  (void)vec;
  trap_below_sm80();
#endif
}

}  // namespace

std::size_t mma_forward_smem_bytes(std::int64_t D) { return smem_bytes_for<MmaSmem>(D); }

void launch_mma_forward(const ForwardArgs& a, cudaStream_t stream) {
  if (a.s.B * a.s.H * a.s.S_q == 0) return;
  const bool vec = aligned16(a.q) && aligned16(a.k) && aligned16(a.v);
  const dim3 grid = tile_grid(a.s.S_q, kBq, a.s.H, a.s.B);
  dispatch_tiles(a.q.dtype, a.s.D, [&]<typename T, int D>() {
    launch_tiles(mma_forward_kernel<T, D>, static_cast<int>(MmaSmem<D>::bytes), grid, a, vec, stream,
                 "mma attention forward");
  });
}

}  // namespace burst::cuda
