// Portable converters (the scalar rules of burst/tensor.h) and the run-time dispatch of
// kernels/convert.h.
#include "kernels/convert.h"

namespace burst::kernels {
namespace {

void widen_bf16(const std::uint16_t* src, float* dst, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) dst[i] = bf16_to_float(src[i]);
}
void widen_f16(const std::uint16_t* src, float* dst, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) dst[i] = f16_to_float(src[i]);
}
void narrow_bf16(const float* src, std::uint16_t* dst, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) dst[i] = bf16_from_float(src[i]);
}
void narrow_f16(const float* src, std::uint16_t* dst, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) dst[i] = f16_from_float(src[i]);
}

}  // namespace

const Converters& converters_portable() {
  static const Converters table{Isa::Portable, widen_bf16, widen_f16, narrow_bf16, narrow_f16};
  return table;
}

const Converters& converters(Isa isa) {
  // detect_isa reports Avx2 / Avx512 / Avx512Bf16 only on CPUs with F16C (attention.cc), and a requested ISA
  // is never above the detected one, so the AVX2+F16C table is safe for both.
  return isa == Isa::Portable ? converters_portable() : converters_avx2();
}

}  // namespace burst::kernels
