// Portable microkernels: plain C++ on scalars (W = 1), compiled with the library's baseline
// flags, so they run on any CPU. Same template body and polynomial as the SIMD tables; also the
// home of microkernels() (the run-time dispatch) and FlushDenormals.
#include <cstdint>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define BURST_HAVE_MXCSR 1
#endif

#include "burst/error.h"
#include "kernels/microkernels.h"

namespace burst::kernels {
namespace {

struct VecT {
  using V = float;
  static constexpr int W = 1;
  static constexpr int kMaxR = 4, kMaxNV = 4;
  static constexpr int kProbeChains = 16;
  static constexpr int kPanelR = 0, kPanelNV = 0;  // no packed-B entries
  static V load(const float* p) { return *p; }
  static void store(float* p, V v) { *p = v; }
  static V set1(float x) { return x; }
  static V zero() { return 0.0f; }
  static V fma(V a, V b, V c) { return a * b + c; }
  static V add(V a, V b) { return a + b; }
  static V sub(V a, V b) { return a - b; }
  static V mul(V a, V b) { return a * b; }
  static V max(V a, V b) { return a > b ? a : b; }
  static float hmax(V v) { return v; }
  static float hsum(V v) { return v; }
  static V exp2(V x);
  static V exp2_nonpos(V x) { return exp2(x); }  // scalar: the clamp and mask are cheap
};

#include "kernels/microkernels_impl.h"

VecT::V VecT::exp2(V x) {
  if (!(x >= -126.0f)) return 0.0f;  // also −inf and NaN
  if (x > 127.0f) x = 127.0f;
  const int n = static_cast<int>(x + 128.5f) - 128;  // round to nearest (x + 128.5 > 0)
  const float p = exp2_poly(x - static_cast<float>(n));
  const std::uint32_t bits = static_cast<std::uint32_t>(n + 127) << 23;
  float pow2n = 0.0f;
  std::memcpy(&pow2n, &bits, sizeof pow2n);
  return p * pow2n;
}

}  // namespace

const Microkernels& microkernels_portable() {
  static const Microkernels table = make_table(Isa::Portable);
  return table;
}

const Microkernels& microkernels(Isa isa) {
  switch (isa) {
    case Isa::Avx512Bf16: return microkernels_avx512bf16();
    case Isa::Avx512: return microkernels_avx512();
    case Isa::Avx2: return microkernels_avx2();
    case Isa::Portable: return microkernels_portable();
    case Isa::Amx: return microkernels_amx();
    case Isa::AmxEmulated: return microkernels_amx_emulated();
    case Isa::Auto: break;
  }
  BURST_FAIL(Internal, "microkernels: ISA must be resolved before dispatch (got Auto)");
}

#if defined(BURST_HAVE_MXCSR)
FlushDenormals::FlushDenormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | 0x8040u); }
FlushDenormals::~FlushDenormals() { _mm_setcsr(saved_); }
#else
FlushDenormals::FlushDenormals() = default;
FlushDenormals::~FlushDenormals() = default;
#endif

}  // namespace burst::kernels
