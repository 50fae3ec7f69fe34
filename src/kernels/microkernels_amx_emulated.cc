// The AMX kernel with its tile operations emulated in software (Isa::AmxEmulated): the same
// GEMM body as microkernels_amx.cc (amx_gemm_impl.h) over a model of the tile instructions, so
// the AMX path's logic — tile blocking, staging of edge tiles, the VNNI pair layout, the fused
// kernels around it — runs and is tested on any CPU with AVX2+F16C (compiled for baseline
// x86-64, no extra flags). Slow: a test path, never chosen by Auto.
// The model: a tile is rows × colsb bytes of a 16 × 64-byte register (a load zeroes the rest);
// TDPBF16PS forms, for each reduction pair k in order, the sum of the pair's two (exact)
// products rounded to fp32, then adds it to the fp32 accumulator, rounded to nearest even; bf16
// inputs are denormals-as-zero and fp32 results flushed to zero (it ignores MXCSR). The Intel
// SDM's pseudocode adds the two products one after the other; on an Emerald Rapids Xeon (family
// 6, model 207) the hardware matched pair-first on every one of 12,800 single-pair outputs, the
// SDM's order on 97 %. Across pairs the hardware's order and internal precision are not
// documented and match no sequential fp32 model (docs/dispatch.md), so the hardware
// tiles equal this model within fp32 accumulation error, bit for bit only for one pair.
// The fp32 entries are the best SIMD table here (AVX-512 or AVX2); the bf16 conversions are the
// scalar round-to-nearest-even of burst/tensor.h with vcvtneps2bf16's denormal flush.
#include <cassert>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "burst/tensor.h"
#include "kernels/amx_tiles.h"
#include "kernels/exp2_p16.h"
#include "kernels/microkernels.h"

namespace burst::kernels {
namespace {

float bits_to_float(std::uint32_t u) {
  float f = 0.0f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
std::uint32_t float_to_bits(float f) {
  std::uint32_t u = 0;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
// bf16 → fp32 with denormals as zero (sign kept).
float widen_daz(std::uint16_t h) {
  const std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
  return bits_to_float((u & 0x7f800000u) == 0 ? (u & 0x80000000u) : u);
}
// fp32 denormal results flushed to a signed zero.
float ftz(float x) {
  const std::uint32_t u = float_to_bits(x);
  return (u & 0x7f800000u) == 0 ? bits_to_float(u & 0x80000000u) : x;
}

struct TilesT {
  explicit TilesT(const TileConfig& cfg) : cfg_(cfg) {
    assert(cfg.palette_id == 1);
    std::memset(reg_, 0, sizeof reg_);
  }
  template <int T>
  void zero() {
    std::memset(reg_[T], 0, sizeof reg_[T]);
  }
  template <int T>
  void load(const void* p, std::int64_t stride) {
    zero<T>();
    const auto* src = static_cast<const unsigned char*>(p);
    for (int r = 0; r < cfg_.rows[T]; ++r) std::memcpy(reg_[T] + r * 64, src + r * stride, cfg_.colsb[T]);
  }
  template <int T>
  void store(void* p, std::int64_t stride) const {
    auto* dst = static_cast<unsigned char*>(p);
    for (int r = 0; r < cfg_.rows[T]; ++r) std::memcpy(dst + r * stride, reg_[T] + r * 64, cfg_.colsb[T]);
  }
  template <int C, int A, int B>
  void dp() {
    // The shape rules TDPBF16PS raises #UD for.
    assert(cfg_.rows[C] == cfg_.rows[A] && cfg_.colsb[C] == cfg_.colsb[B] &&
           cfg_.rows[B] * 4 == cfg_.colsb[A]);
    const int M = cfg_.rows[C], N = cfg_.colsb[C] / 4, Kp = cfg_.colsb[A] / 4;
    for (int m = 0; m < M; ++m) {
      float acc[16];
      std::memcpy(acc, reg_[C] + m * 64, sizeof acc);
      for (int k = 0; k < Kp; ++k) {
        std::uint16_t a[2], b[32];
        std::memcpy(a, reg_[A] + m * 64 + k * 4, sizeof a);
        std::memcpy(b, reg_[B] + k * 64, sizeof b);
        const float a0 = widen_daz(a[0]), a1 = widen_daz(a[1]);
        for (int n = 0; n < N; ++n) {
          // Each product is exact in fp32 (8-bit significands); their sum is rounded once.
          const float pair = ftz(a0 * widen_daz(b[2 * n]) + a1 * widen_daz(b[2 * n + 1]));
          acc[n] = ftz(acc[n] + pair);
        }
      }
      std::memcpy(reg_[C] + m * 64, acc, sizeof acc);
    }
  }

 private:
  TileConfig cfg_;
  alignas(64) unsigned char reg_[8][16 * 64];
};

#include "kernels/amx_gemm_impl.h"

std::uint16_t narrow(float x) {  // vcvtneps2bf16: denormal inputs flushed, then nearest even
  return bf16_from_float(ftz(x));
}

void narrow_rows_bf16(const float* src, std::int64_t lds, std::uint16_t* dst, std::int64_t ldd, int rows,
                      int cols) {
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) dst[r * ldd + c] = narrow(src[r * lds + c]);
    if (cols & 1) dst[r * ldd + cols] = 0;
  }
}

void pack_pairs_bf16(const float* src, std::int64_t lds, std::uint16_t* dst, std::int64_t ldd, int K, int N) {
  for (int k = 0; k < K + (K & 1); ++k)
    for (int n = 0; n < N; ++n)
      dst[(k / 2) * ldd + 2 * n + (k & 1)] = k < K ? narrow(src[k * lds + n]) : std::uint16_t{0};
}

// The best fp32 table here: the emulated table's fp32 entries and exp2.
const Microkernels& fp32_table() {
  const Isa best = detect_isa();
  return best == Isa::Avx512Bf16 || best == Isa::Avx512 ? microkernels_avx512() : microkernels_avx2();
}

// Microkernels::probs_bf16 in scalar steps: the argument by std::fma (one rounding), exp2 by
// exp2_p16 (kernels/exp2_p16.h: the vector tables' polynomial for P, bit for bit), the scalar
// narrowing; summed in order.
float probs_bf16(const float* s, int n, float c2, float shift, std::uint16_t* p) {
  float sum = 0.0f;
  for (int j = 0; j < n; ++j) {
    const float e = exp2_p16(std::fma(s[j], c2, -shift));
    sum += e;
    p[j] = narrow(e);
  }
  return sum;
}

Microkernels make_table() {
  Microkernels t = fp32_table();
  t.isa = Isa::AmxEmulated;
  t.gemm_bf16 = &amx_gemm_bf16;
  t.probs_bf16 = &probs_bf16;
  t.narrow_rows_bf16 = &narrow_rows_bf16;
  t.pack_pairs_bf16 = &pack_pairs_bf16;
  t.bf16_dot_probe = nullptr;
  return t;
}

}  // namespace

const Microkernels& microkernels_amx_emulated() {
  static const Microkernels table = make_table();
  return table;
}

}  // namespace burst::kernels
