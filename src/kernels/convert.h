// src/kernels/convert.h — bf16/fp16 ⇄ fp32 conversion of kernel rows (internal).
//
// Owns: a table of converters per instruction set (AVX2 + F16C, portable C++) and the row
// load/store helpers through which every kernel reads q, k, v, dout, out and writes out, dq, dk,
// dv. Inputs of any storage dtype are widened to fp32 as a tile is packed (exact), all
// arithmetic and accumulators stay fp32, and a result is rounded to the output dtype once, when
// its final fp32 value is written (round to nearest even, burst/tensor.h).
// Dispatch: the converters follow Problem::isa — Portable uses the scalar rules of
// burst/tensor.h (the slow twin), every SIMD ISA uses the AVX2+F16C table (detect_isa only
// reports one on CPUs with F16C), so a bf16/fp16 call never executes an instruction the CPU
// lacks. Native bf16 arithmetic (Isa::Avx512Bf16) narrows the widened packs again into bf16
// GEMM operands inside the tiled kernels; docs/design.md § bf16 arithmetic.
// Does not: allocate, throw, or accumulate anything in a 16-bit type.
#pragma once

#include <algorithm>
#include <cstdint>

#include "burst/isa.h"
#include "burst/tensor.h"
#include "kernels/kernels.h"

namespace burst::kernels {

struct Converters {
  Isa isa = Isa::Portable;
  /// dst[i] = widen(src[i]) for n values (exact).
  void (*widen_bf16)(const std::uint16_t* src, float* dst, std::int64_t n) = nullptr;
  void (*widen_f16)(const std::uint16_t* src, float* dst, std::int64_t n) = nullptr;
  /// dst[i] = round_to_nearest_even(src[i]) for n values; bitwise equal across tables.
  void (*narrow_bf16)(const float* src, std::uint16_t* dst, std::int64_t n) = nullptr;
  void (*narrow_f16)(const float* src, std::uint16_t* dst, std::int64_t n) = nullptr;
};

/// The table for a resolved ISA (every SIMD ISA shares the AVX2+F16C table). Immutable.
const Converters& converters(Isa isa);
const Converters& converters_portable();
const Converters& converters_avx2();  ///< precondition: the CPU has AVX2 and F16C

inline std::int64_t element_offset(const Operand& o, std::int64_t b, std::int64_t s, std::int64_t h) {
  return b * o.sb + s * o.ss + h * o.sh;
}
inline std::int64_t element_offset(const MutOperand& o, std::int64_t b, std::int64_t s, std::int64_t h) {
  return b * o.sb + s * o.ss + h * o.sh;
}

/// Rows a row loop asks the cache for ahead of the one it works on (prefetch_row).
inline constexpr int kRowsAhead = 12;

/// Asks the cache for row (b, s, h) of a kernel operand (D elements of its storage dtype; F32 or
/// a 16-bit type) before a row loop reaches it. Rows of a BSHD tensor lie H·D elements apart —
/// at H 8, D 64 fp32 two to a 4 KiB page, where the hardware's stream prefetchers stop — so
/// without it every row a pack reads or a result row adds into waits on memory (docs/design.md
/// § Rows ahead of the row loops). A hint only: no fault, no effect on results.
inline void prefetch_row(const void* data, std::int64_t offset, DType dtype, int D, bool for_write) {
  const std::int64_t esize = dtype == DType::F32 ? 4 : 2;
  const char* p = static_cast<const char*>(data) + offset * esize;
  for (std::int64_t i = 0; i < D * esize; i += 64) {
    if (for_write)
      __builtin_prefetch(p + i, 1, 3);
    else
      __builtin_prefetch(p + i, 0, 3);
  }
}
inline void prefetch_row(const Operand& x, std::int64_t b, std::int64_t s, std::int64_t h, int D) {
  prefetch_row(x.data, element_offset(x, b, s, h), x.dtype, D, false);
}
inline void prefetch_row(const MutOperand& x, std::int64_t b, std::int64_t s, std::int64_t h, int D) {
  prefetch_row(x.data, element_offset(x, b, s, h), x.dtype, D, true);
}

/// What a loop over rows s0 + [0, n) of x asks for before it works on row r, advancing `step`
/// rows at a time: the rows r + kRowsAhead .. r + kRowsAhead + step − 1 that lie below n.
template <typename X>
inline void prefetch_rows_ahead(const X& x, std::int64_t b, std::int64_t s0, std::int64_t h, int D, int r,
                                int n, int step = 1) {
  for (int a = r + kRowsAhead; a < std::min(n, r + kRowsAhead + step); ++a) prefetch_row(x, b, s0 + a, h, D);
}

/// dst[0..D) = row (b, s, h) of x widened to fp32.
inline void load_row(const Converters& cv, const Operand& x, std::int64_t b, std::int64_t s, std::int64_t h,
                     int D, float* dst) {
  const std::int64_t off = element_offset(x, b, s, h);
  switch (x.dtype) {
    case DType::BF16: cv.widen_bf16(static_cast<const std::uint16_t*>(x.data) + off, dst, D); return;
    case DType::F16: cv.widen_f16(static_cast<const std::uint16_t*>(x.data) + off, dst, D); return;
    default: {
      const float* src = static_cast<const float*>(x.data) + off;
      std::copy(src, src + D, dst);
    }
  }
}

/// Row (b, s, h) of dst (+)= mul·src[0..D), rounded once to dst's dtype. accumulate is only
/// valid for F32 destinations (the boundary rejects accumulating into 16-bit storage).
/// tmp holds D floats (used for 16-bit destinations).
inline void store_row(const Converters& cv, const MutOperand& dst, std::int64_t b, std::int64_t s,
                      std::int64_t h, int D, const float* src, float mul, bool accumulate, float* tmp) {
  const std::int64_t off = element_offset(dst, b, s, h);
  if (dst.dtype == DType::F32) {
    float* d = static_cast<float*>(dst.data) + off;
    if (accumulate) {
      for (int j = 0; j < D; ++j) d[j] += mul * src[j];
    } else {
      for (int j = 0; j < D; ++j) d[j] = mul * src[j];
    }
    return;
  }
  for (int j = 0; j < D; ++j) tmp[j] = mul * src[j];
  auto* d = static_cast<std::uint16_t*>(dst.data) + off;
  if (dst.dtype == DType::BF16)
    cv.narrow_bf16(tmp, d, D);
  else
    cv.narrow_f16(tmp, d, D);
}

}  // namespace burst::kernels
