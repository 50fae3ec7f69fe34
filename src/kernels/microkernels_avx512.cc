// AVX-512F microkernels (compiled with -mavx512f -mavx512dq -mavx2 -mfma only, what detect_isa() checks;
// see src/CMakeLists.txt): the AVX-512 vector type (microkernels_avx512_body.h) over the one
// template body (microkernels_impl.h).
// GCC 12 reports its own _mm512_undefined_ps() placeholders inside the reduce/roundscale
// intrinsics as uninitialised (false positive, inlined from avx512fintrin.h).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstdint>

#include "kernels/microkernels.h"

namespace burst::kernels {
namespace {

#include "kernels/microkernels_avx512_body.h"

}  // namespace

const Microkernels& microkernels_avx512() {
  static const Microkernels table = make_table(Isa::Avx512);
  return table;
}

}  // namespace burst::kernels
