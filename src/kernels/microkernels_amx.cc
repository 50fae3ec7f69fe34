// AMX microkernels: the AVX512-BF16 table with gemm_bf16 on AMX tiles (tdpbf16ps) and an AMX
// ceiling probe. Compiled with -mamx-tile -mamx-bf16 plus the AVX512-BF16 flags (src/CMakeLists.txt);
// called only where isa_available(Isa::Amx): CPUID AMX-TILE + AMX-BF16, XCR0 tile state, and
// the arch_prctl permission (src/dispatch.cc) — without the permission the first tile
// instruction would raise SIGILL.
// The tile layer here is the instructions one for one; its software model with the same
// interface is microkernels_amx_emulated.cc, and the GEMM over it is amx_gemm_impl.h.
#include <immintrin.h>

#include <cstdint>

#include "kernels/amx_tiles.h"
#include "kernels/microkernels.h"

namespace burst::kernels {
namespace {

// The tile intrinsics are macros that paste their tile numbers into the instruction text, so
// each tile number is spelt out once (if constexpr picks it at compile time).
#define BURST_TILE_EACH(T, OP)   \
  if constexpr (T == 0) {        \
    OP(0);                       \
  } else if constexpr (T == 1) { \
    OP(1);                       \
  } else if constexpr (T == 2) { \
    OP(2);                       \
  } else if constexpr (T == 3) { \
    OP(3);                       \
  } else if constexpr (T == 4) { \
    OP(4);                       \
  } else if constexpr (T == 5) { \
    OP(5);                       \
  } else if constexpr (T == 6) { \
    OP(6);                       \
  } else {                       \
    static_assert(T == 7);       \
    OP(7);                       \
  }

struct TilesT {
  explicit TilesT(const TileConfig& cfg) { _tile_loadconfig(&cfg); }
  ~TilesT() { _tile_release(); }
  TilesT(const TilesT&) = delete;
  TilesT& operator=(const TilesT&) = delete;
  template <int T>
  void zero() {
#define BURST_OP(t) _tile_zero(t)
    BURST_TILE_EACH(T, BURST_OP)
#undef BURST_OP
  }
  template <int T>
  void load(const void* p, std::int64_t stride) {
#define BURST_OP(t) _tile_loadd(t, p, stride)
    BURST_TILE_EACH(T, BURST_OP)
#undef BURST_OP
  }
  template <int T>
  void store(void* p, std::int64_t stride) {
#define BURST_OP(t) _tile_stored(t, p, stride)
    BURST_TILE_EACH(T, BURST_OP)
#undef BURST_OP
  }
  // The four products of the 2 × 2 block (amx_gemm_impl.h): C 0–3 from A 4–5 and B 6–7.
  template <int C, int A, int B>
  void dp() {
    if constexpr (C == 0 && A == 4 && B == 6) {
      _tile_dpbf16ps(0, 4, 6);
    } else if constexpr (C == 1 && A == 4 && B == 7) {
      _tile_dpbf16ps(1, 4, 7);
    } else if constexpr (C == 2 && A == 5 && B == 6) {
      _tile_dpbf16ps(2, 5, 6);
    } else {
      static_assert(C == 3 && A == 5 && B == 7);
      _tile_dpbf16ps(3, 5, 7);
    }
  }
};
#undef BURST_TILE_EACH

#include "kernels/amx_gemm_impl.h"

// 4 independent tdpbf16ps chains (tiles 0–3 from A tiles 4, 5 and B tiles 6, 7): iters·4 tile
// products of 16·16·32 multiply-adds. Operands 2^-10 (exact in bf16): far from overflow.
float amx_probe(std::int64_t iters) {
  TileConfig cfg{};
  cfg.palette_id = 1;
  for (int i = 0; i < 8; ++i) {
    cfg.rows[i] = 16;
    cfg.colsb[i] = 64;
  }
  alignas(64) std::uint16_t ops[16 * 32];
  for (std::uint16_t& x : ops) x = 0x3a80;
  alignas(64) float out[16 * 16];
  TilesT t(cfg);
  t.zero<0>();
  t.zero<1>();
  t.zero<2>();
  t.zero<3>();
  t.load<4>(ops, 64);
  t.load<5>(ops, 64);
  t.load<6>(ops, 64);
  t.load<7>(ops, 64);
  for (std::int64_t i = 0; i < iters; ++i) {
    t.dp<0, 4, 6>();
    t.dp<1, 4, 7>();
    t.dp<2, 5, 6>();
    t.dp<3, 5, 7>();
  }
  float sum = 0.0f;
  t.store<0>(out, 64);
  sum += out[0];
  t.store<3>(out, 64);
  return sum + out[255];
}

Microkernels make_table() {
  Microkernels t = microkernels_avx512bf16();  // fp32 entries and bf16 conversions
  t.isa = Isa::Amx;
  t.gemm_bf16 = &amx_gemm_bf16;
  t.bf16_dot_probe = &amx_probe;
  return t;
}

}  // namespace

const Microkernels& microkernels_amx() {
  static const Microkernels table = make_table();
  return table;
}

}  // namespace burst::kernels
