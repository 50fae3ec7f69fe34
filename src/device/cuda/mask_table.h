// src/device/cuda/mask_table.h — the resolved mask as the GPU step kernels read it: the flat
// MaskSlice table of KernelArgs (burst/mask.h semantics), queried per element and per tile
// (internal, library burst_cuda; docs/gpu.md).
//
// Owns: the per-slice linear bounds (row q of slice s sees k ∈ [max(k_begin, q + lo),
// min(k_end − 1, q + hi)] for q ∈ [q_begin, q_end) — the same reduction ResolvedMask builds in
// src/mask.cc), visibility of one (q, k) pair, and the classification of a tile's position hulls
// [q_lo, q_hi] × [k_lo, k_hi]: Empty and Full are exact claims about every pair of the hulls,
// Partial means "evaluate per element". Host and device code (BURST_HOST_DEVICE), so the CPU
// tests check these very functions against ResolvedMask::visible and ::classify.
// Does not: index the table (a kernel scans it, after filtering it once per tile row or column).
#pragma once

#include <cstdint>

#include "burst/mask.h"
#include "burst/tensor.h"

namespace burst::cuda {

/// Sentinel for "no diagonal bound" (src/mask.cc's): q ± kUnbounded never overflows.
inline constexpr std::int64_t kUnbounded = std::int64_t{1} << 60;

/// One slice reduced to linear bounds (see the header comment). Plain data (no initialisers:
/// the kernels keep arrays of it in shared memory).
struct SliceBounds {
  std::int64_t q_begin, q_end, k_begin, k_end, lo, hi;
};

BURST_HOST_DEVICE inline std::int64_t min64(std::int64_t a, std::int64_t b) { return a < b ? a : b; }
BURST_HOST_DEVICE inline std::int64_t max64(std::int64_t a, std::int64_t b) { return a > b ? a : b; }

/// The bounds of slice s: diag(q) = q − q_end + k_end; causal caps k at diag(q), inverse-causal
/// floors it at q − q_begin + k_begin, a window at diag(q) − left and diag(q) + right.
BURST_HOST_DEVICE inline SliceBounds slice_bounds(const MaskSlice& s) {
  SliceBounds b{s.q_begin, s.q_end, s.k_begin, s.k_end, -kUnbounded, kUnbounded};
  const std::int64_t diag = s.k_end - s.q_end, inv_diag = s.k_begin - s.q_begin;
  if (s.kind == SliceKind::Causal || s.kind == SliceKind::BiCausal) b.hi = diag;
  if (s.kind == SliceKind::InvCausal || s.kind == SliceKind::BiCausal) b.lo = inv_diag;
  // A window of 2⁶⁰ or more reaches past every position: as wide as kUnbounded (no overflow).
  if (s.window_right >= 0) b.hi = min64(b.hi, diag + min64(s.window_right, kUnbounded));
  if (s.window_left >= 0) b.lo = max64(b.lo, diag - min64(s.window_left, kUnbounded));
#if defined(__CUDA_ARCH__) && defined(BURST_CUDA_PLANT_ERROR)
  // The planted error (docs/gpu.md): on the GPU every upper diagonal bound admits one key more
  // (a causal row sees its next token). The attention tests must fail.
  if (b.hi < kUnbounded) b.hi += 1;
#endif
  return b;
}

/// True when slice b admits the pair (q, k).
BURST_HOST_DEVICE inline bool slice_visible(const SliceBounds& b, std::int64_t q, std::int64_t k) {
  return q >= b.q_begin && q < b.q_end && k >= max64(b.k_begin, q + b.lo) &&
         k <= min64(b.k_end - 1, q + b.hi);
}

/// The slice's verdict on the hulls [q_lo, q_hi] × [k_lo, k_hi] (inclusive, q_lo ≤ q_hi,
/// k_lo ≤ k_hi): Full when it alone admits every pair, Empty when it admits none, else Partial.
/// The non-empty test is ResolvedMask::classify's: some q of the hull has max(c, q + lo) ≤
/// min(d, q + hi) with c, d the key hull cut to the slice.
BURST_HOST_DEVICE inline TileClass slice_classify(const SliceBounds& b, std::int64_t q_lo, std::int64_t q_hi,
                                                  std::int64_t k_lo, std::int64_t k_hi) {
  if (b.q_end <= q_lo || b.q_begin > q_hi || b.k_end <= k_lo || b.k_begin > k_hi) return TileClass::Empty;
  if (q_lo >= b.q_begin && q_hi < b.q_end && k_lo >= b.k_begin && k_hi < b.k_end && k_hi <= q_lo + b.hi &&
      k_lo >= q_hi + b.lo)
    return TileClass::Full;
  const std::int64_t c = max64(k_lo, b.k_begin), d = min64(k_hi, b.k_end - 1);
  if (c > d || b.lo > b.hi) return TileClass::Empty;
  const std::int64_t qa = max64(max64(q_lo, b.q_begin), c - b.hi);
  const std::int64_t qb = min64(min64(q_hi, b.q_end - 1), d - b.lo);
  return qa <= qb ? TileClass::Partial : TileClass::Empty;
}

/// True when slice b may admit a pair with q in [q_lo, q_hi] (its q range meets the hull).
BURST_HOST_DEVICE inline bool slice_meets_rows(const SliceBounds& b, std::int64_t q_lo, std::int64_t q_hi) {
  return b.q_begin <= q_hi && b.q_end > q_lo;
}
/// True when slice b may admit a pair with k in [k_lo, k_hi].
BURST_HOST_DEVICE inline bool slice_meets_cols(const SliceBounds& b, std::int64_t k_lo, std::int64_t k_hi) {
  return b.k_begin <= k_hi && b.k_end > k_lo;
}

/// Combines per-slice verdicts into the union's: Full if any slice is Full, else Partial if any
/// is Partial, else Empty.
BURST_HOST_DEVICE inline TileClass combine(TileClass a, TileClass b) {
  if (a == TileClass::Full || b == TileClass::Full) return TileClass::Full;
  if (a == TileClass::Partial || b == TileClass::Partial) return TileClass::Partial;
  return TileClass::Empty;
}

/// Visibility of (q, k) under the union of `n` slices: the host / reference form.
BURST_HOST_DEVICE inline bool table_visible(const MaskSlice* slices, std::int64_t n, std::int64_t q,
                                            std::int64_t k) {
  for (std::int64_t s = 0; s < n; ++s)
    if (slice_visible(slice_bounds(slices[s]), q, k)) return true;
  return false;
}

/// The union's verdict on a tile's hulls: the host / reference form of what the fast kernels
/// compute cooperatively.
BURST_HOST_DEVICE inline TileClass table_classify(const MaskSlice* slices, std::int64_t n, std::int64_t q_lo,
                                                  std::int64_t q_hi, std::int64_t k_lo, std::int64_t k_hi) {
  TileClass c = TileClass::Empty;
  for (std::int64_t s = 0; s < n && c != TileClass::Full; ++s)
    c = combine(c, slice_classify(slice_bounds(slices[s]), q_lo, q_hi, k_lo, k_hi));
  return c;
}

}  // namespace burst::cuda
