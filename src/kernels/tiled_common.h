// src/kernels/tiled_common.h — pieces shared by the tiled forward and backward (internal).
//
// Tile geometry, K/V panel packing per (batch, kv-head) — done once and shared by all query
// heads of a GQA group — and the per-element mask of Partial tiles (ResolvedMask::visible_ranges
// mapped from global positions to column indices). No SIMD here: that is microkernels.h.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "burst/softmax_merge.h"
#include "kernels/convert.h"
#include "kernels/kernels.h"
#include "kernels/microkernels.h"
#include "kernels/tiling.h"

namespace burst::kernels::tiled {

inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;

inline std::int64_t round_up(std::int64_t x, std::int64_t m) { return (x + m - 1) / m * m; }

/// Tile sizes and padded widths of one call. Tiles are multiples of the vector width so every
/// padded row is whole vectors; a tile holds at most bq (bkv) rows, fewer at the end of the rows
/// or of a run of close positions (tile_starts).
struct Geometry {
  int bq = 0, bkv = 0;  ///< q-tile and kv-tile capacity (rows)
  int Dp = 0;           ///< D rounded up to the vector width
  std::int64_t n_qt = 0, n_kt = 0;
  int G = 1;                                    ///< query heads per KV head (GQA group)
  std::vector<std::int64_t> q_start, kv_start;  ///< tile t: rows [start[t], start[t + 1])
  std::int64_t q_begin(std::int64_t t) const { return q_start[static_cast<std::size_t>(t)]; }
  int q_rows(std::int64_t t) const { return static_cast<int>(q_begin(t + 1) - q_begin(t)); }
  std::int64_t kv_begin(std::int64_t t) const { return kv_start[static_cast<std::size_t>(t)]; }
  int kv_rows(std::int64_t t) const { return static_cast<int>(kv_begin(t + 1) - kv_begin(t)); }
};

inline Geometry make_geometry(const Problem& p, const Microkernels& mk, int default_bq, int default_bkv) {
  Geometry g;
  const int w = mk.width;
  g.bq = static_cast<int>(round_up(p.block_q > 0 ? p.block_q : default_bq, w));
  g.bkv = static_cast<int>(round_up(p.block_kv > 0 ? p.block_kv : default_bkv, w));
  g.Dp = static_cast<int>(round_up(p.D, w));
  g.q_start = tile_starts(p.q_pos, p.S_q, g.bq);
  g.kv_start = tile_starts(p.kv_pos, p.S_kv, g.bkv);
  g.n_qt = static_cast<std::int64_t>(g.q_start.size()) - 1;
  g.n_kt = static_cast<std::int64_t>(g.kv_start.size()) - 1;
  g.G = static_cast<int>(p.H / p.H_kv);
  return g;
}

/// True when the GEMMs of a call run on bf16 operands (vdpbf16ps or AMX tiles, docs/design.md §
/// bf16 arithmetic): the table has the bf16 entries and the operands are stored in bf16 (F16 and F32
/// inputs keep fp32 arithmetic: rounding them to bf16 would lose precision they carry).
inline bool use_bf16_dot(const Microkernels& mk, DType dtype) {
  return mk.gemm_bf16 != nullptr && dtype == DType::BF16;
}

/// bf16 elements (as uint16_t) viewed in a float workspace slice (64-byte aligned). Only
/// intrinsics and memcpy touch them (kernels/microkernels_avx512bf16.cc).
inline std::uint16_t* as_bf16(std::span<float> s) { return reinterpret_cast<std::uint16_t*>(s.data()); }
/// Floats that hold n bf16 elements.
inline std::size_t bf16_floats(std::int64_t n) { return static_cast<std::size_t>((n + 1) / 2); }

/// True when the fp32 GEMMs take their B operands packed in column panels (Microkernels::
/// gemm_packed: the AVX2 table); elsewhere B stays row-major and gemm runs on it.
inline bool use_panels(const Microkernels& mk, bool bf16) { return mk.gemm_packed != nullptr && !bf16; }

/// Floats between panels of a B operand of K rows packed by pack_panels, and floats of the whole
/// packed K × N operand.
inline std::int64_t panel_stride(const Microkernels& mk, int K) {
  return static_cast<std::int64_t>(K) * mk.panel;
}
inline std::int64_t panels_floats(const Microkernels& mk, int K, int N) {
  return (N + mk.panel - 1) / mk.panel * panel_stride(mk, K);
}

/// A B operand of the fp32 GEMMs: row-major with leading dimension ld, or (packed) in panels of
/// stride ld (pack_panels).
struct BOperand {
  const float* data = nullptr;
  std::int64_t ld = 0;
  bool packed = false;
};

/// C[M×N] (+)= A[M×K]·B on either layout of B (Microkernels::gemm / gemm_packed).
inline void gemm(const Microkernels& mk, const float* A, std::int64_t lda, const BOperand& B, float* C,
                 std::int64_t ldc, int M, int N, int K, bool accumulate) {
  if (B.packed)
    mk.gemm_packed(A, lda, B.data, B.ld, C, ldc, M, N, K, accumulate);
  else
    mk.gemm(A, lda, B.data, B.ld, C, ldc, M, N, K, accumulate);
}

/// Packs one kv tile of (b, kv-head hk) as fp32 rows [bkv][Dp], zero padded (V for O += P·V; K
/// and V for the backward products), widening 16-bit storage. dst holds bkv·Dp floats.
inline void pack_rows(const Converters& cv, const Operand& x, std::int64_t b, std::int64_t hk,
                      std::int64_t j0, int nc, int D, int Dp, int rows, float* dst) {
  for (int r = 0; r < rows; ++r) {
    float* d = dst + static_cast<std::int64_t>(r) * Dp;
    prefetch_rows_ahead(x, b, j0, hk, D, r, nc);
    if (r < nc) {
      load_row(cv, x, b, j0 + r, hk, D, d);
      std::fill(d + D, d + Dp, 0.0f);
    } else {
      std::fill(d, d + Dp, 0.0f);
    }
  }
}

/// Packs rows [nr][D] of x transposed into fp32 dst [D][cols] (zero columns beyond nr).
inline void pack_transposed(const Converters& cv, const Operand& x, std::int64_t b, std::int64_t h,
                            std::int64_t i0, int nr, int D, int cols, float* dst) {
  std::fill(dst, dst + static_cast<std::int64_t>(D) * cols, 0.0f);
  float row[256];  // D ≤ 256 (attention.h precondition)
  for (int r = 0; r < nr; ++r) {
    prefetch_rows_ahead(x, b, i0, h, D, r, nr);
    load_row(cv, x, b, i0 + r, h, D, row);
    for (int d = 0; d < D; ++d) dst[static_cast<std::int64_t>(d) * cols + r] = row[d];
  }
}

/// The bf16 forward's pair-packed Kᵀ tile straight from bf16 storage (bit patterns copied, no
/// widening): rows [j0, j0 + nc) of x (b, kv-head h) into dst [D2/2][cols][2], dst[kk][r] = the
/// pair (x[r][2kk], x[r][2kk + 1]) — adjacent in x's row, so one 32-bit word —, zero pairs for
/// r ≥ nc and a zero partner for an odd D. Bitwise pack_transposed then pack_pairs_bf16 (the
/// twin, tests/test_attention_bf16.cc). x.dtype must be BF16.
inline void pack_kt_pairs_bf16(const Operand& x, std::int64_t b, std::int64_t h, std::int64_t j0, int nc,
                               int D, int cols, std::uint16_t* dst) {
  const int D2 = D + (D & 1);
  std::fill(dst, dst + static_cast<std::int64_t>(D2) * cols, std::uint16_t{0});
  for (int r = 0; r < nc; ++r) {
    prefetch_rows_ahead(x, b, j0, h, D, r, nc);
    const auto* src = static_cast<const std::uint16_t*>(x.data) + element_offset(x, b, j0 + r, h);
    for (int kk = 0; 2 * kk + 1 < D; ++kk) {
      std::uint32_t pair = 0;
      std::memcpy(&pair, src + 2 * kk, sizeof pair);
      std::memcpy(dst + (static_cast<std::int64_t>(kk) * cols + r) * 2, &pair, sizeof pair);
    }
    if (D & 1) dst[(static_cast<std::int64_t>(D / 2) * cols + r) * 2] = src[D - 1];
  }
}

/// The bf16 forward's pair-packed V tile straight from bf16 storage: rows [j0, j0 + nc) of x into
/// dst [rows/2][Dp][2], dst[kk][n] = (x[2kk][n], x[2kk + 1][n]), zeros beyond nc and D (rows
/// even). Bitwise pack_rows then pack_pairs_bf16. x.dtype must be BF16.
inline void pack_v_pairs_bf16(const Operand& x, std::int64_t b, std::int64_t h, std::int64_t j0, int nc,
                              int D, int Dp, int rows, std::uint16_t* dst) {
  std::fill(dst, dst + static_cast<std::int64_t>(rows) * Dp, std::uint16_t{0});
  const auto* base = static_cast<const std::uint16_t*>(x.data);
  for (int r = 0; r < nc; r += 2) {
    prefetch_rows_ahead(x, b, j0, h, D, r, nc, 2);
    const std::uint16_t* r0 = base + element_offset(x, b, j0 + r, h);
    const std::uint16_t* r1 = r + 1 < nc ? base + element_offset(x, b, j0 + r + 1, h) : nullptr;
    std::uint16_t* d = dst + static_cast<std::int64_t>(r / 2) * 2 * Dp;
    for (int n = 0; n < D; ++n) {
      d[2 * n] = r0[n];
      d[2 * n + 1] = r1 != nullptr ? r1[n] : std::uint16_t{0};
    }
  }
}

/// Calls fn(a, e) for each maximal run [a, e) of kv indices in [0, nc) visible from query
/// position qp, where kpos[0..nc) are the tile's increasing global key positions.
template <typename Fn>
void visible_columns(const ResolvedMask& mask, std::int64_t qp, const std::int64_t* kpos, int nc, Fn&& fn) {
  // The callback captures one pointer, so the std::function that visible_ranges takes stores it
  // inline: this runs once per row of every Partial tile and must not allocate.
  struct Args {
    const std::int64_t* kpos;
    int nc;
    Fn* fn;
  } args{kpos, nc, &fn};
  mask.visible_ranges(qp, kpos[0], kpos[nc - 1], [a = &args](std::int64_t lo, std::int64_t hi) {
    const auto first = std::lower_bound(a->kpos, a->kpos + a->nc, lo) - a->kpos;
    const auto end = std::upper_bound(a->kpos, a->kpos + a->nc, hi) - a->kpos;
    if (first < end) (*a->fn)(static_cast<int>(first), static_cast<int>(end));
  });
}

/// Sets x[j·stride] = −inf for every kv index j ∈ [0, n_pad) not visible from qp (indices ≥ nc
/// are padding and always masked).
inline void mask_line(const ResolvedMask& mask, std::int64_t qp, const std::int64_t* kpos, int nc, int n_pad,
                      float* x, std::int64_t stride) {
  int next = 0;
  visible_columns(mask, qp, kpos, nc, [&](int a, int e) {
    for (int j = next; j < a; ++j) x[j * stride] = kNegInf;
    next = e;
  });
  for (int j = next; j < n_pad; ++j) x[j * stride] = kNegInf;
}

/// Visible-pair class of the (q rows [i0, i0+nr)) × (kv rows [j0, j0+nc)) tile from the hulls of
/// its global positions.
inline TileClass classify_tile(const Problem& p, std::int64_t i0, int nr, std::int64_t j0, int nc) {
  return p.mask->classify(p.q_pos[i0], p.q_pos[i0 + nr - 1], p.kv_pos[j0], p.kv_pos[j0 + nc - 1]);
}

}  // namespace burst::kernels::tiled
