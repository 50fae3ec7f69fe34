// src/device/cuda/cudnn_mask.h — which of cuDNN's SDPA masks, if any, is exactly one attention
// step's visibility (internal, library burst_cuda; docs/gpu.md § cuDNN).
//
// cuDNN's fused attention knows no positions and no slice table: it sees local row i of S_q and
// key j of S_kv, and masks them by a diagonal band: with off = 0 (diagonal aligned top-left) or
// off = S_kv − S_q (bottom-right), a right bound R keeps keys j ≤ i + off + R and a left bound L
// keeps keys j ≥ i + off − L + 1 (the cuDNN frontend's reference: its masks are triu(1 + R + off)
// and tril(off − L) of the score matrix); neither bound set is all keys, R = 0 alone is causal.
// A step goes to cuDNN only when its visibility under burst's mask (burst/mask.h: the union of
// the slices over the global positions) is one such band for every (i, j) and no row is left
// without a key (cuDNN's output for such a row is not burst's out = 0, lse = −inf): all keys,
// causal, sliding windows (flash_attn's window_size (w_l, w_r) is L = w_l + 1, R = w_r) and the
// blocks of them a ring step sees. Everything else — documents, a zigzag or striped block that is
// no band, position masks — stays on burst's own kernels.
// Host code only: the positions and the slice table must be host arrays here.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "burst/mask.h"

namespace burst::cuda {

/// The cuDNN mask that matches a step exactly; None when none does. Full, CausalTopLeft and
/// CausalBottomRight are the bands without a left bound and with no right bound or R = 0; every
/// other band is BandTopLeft or BandBottomRight with its bounds in the verdict.
enum class CudnnMask : std::uint8_t {
  None,
  Full,
  CausalTopLeft,
  CausalBottomRight,
  BandTopLeft,
  BandBottomRight
};

const char* to_string(CudnnMask m) noexcept;

/// A step's cuDNN mask: the kind, and for the two band kinds the bounds (cuDNN's SDPA attributes
/// diagonal_band_left_bound / _right_bound, relative to the kind's alignment). Implicit from a
/// kind for the unbounded ones.
struct CudnnMaskVerdict {
  CudnnMaskVerdict() = default;
  CudnnMaskVerdict(CudnnMask m, std::string why = "", std::int64_t l = 0, std::int64_t r = -1)
      : mask(m), why_not(std::move(why)), left(l), right(r) {}
  CudnnMask mask = CudnnMask::None;
  std::string why_not;      ///< why None ("" otherwise)
  std::int64_t left = 0;    ///< bands: L ≥ 1, keys j ≥ i + off − L + 1; 0: no left bound
  std::int64_t right = -1;  ///< bands: R ≥ 0, keys j ≤ i + off + R; −1: no right bound
  bool band() const noexcept { return mask == CudnnMask::BandTopLeft || mask == CudnnMask::BandBottomRight; }
  /// Aligned bottom-right (off = S_kv − S_q): CausalBottomRight or BandBottomRight.
  bool bottom_right() const noexcept {
    return mask == CudnnMask::CausalBottomRight || mask == CudnnMask::BandBottomRight;
  }
  /// "full", "causal top-left", "band top-left left 31 right 0", ...
  std::string describe() const;
};

/// Classifies the step q_pos [S_q] × kv_pos [S_kv] (host arrays, strictly increasing global
/// positions) under the `n` slices (host array). Per row, the visible keys of each slice are one
/// position interval, hence (positions sorted) one index range found by binary search; the
/// row's ranges merged must be one non-empty range [s_i, e_i) of the keys, with e_i = S_kv for
/// every row or min(i + c_e, S_kv) for one constant c_e, and s_i = 0 for every row or
/// max(i + c_s, 0) for one constant c_s; then the band is read off (top-left where its bounds
/// allow, else bottom-right), Full, CausalTopLeft and CausalBottomRight first where they fit.
/// A left bound with S_q > S_kv is refused (cuDNN does not take it), as is a band whose
/// S_q + S_kv + L + R exceeds 2²⁴ (the frontend's band arithmetic is fp32). Where S_q = S_kv the two
/// alignments agree and top-left is reported. Cost: O(S_q · n · log S_kv).
CudnnMaskVerdict classify_for_cudnn(const std::int64_t* q_pos, std::int64_t S_q, const std::int64_t* kv_pos,
                                    std::int64_t S_kv, const MaskSlice* slices, std::int64_t n);

/// classify_for_cudnn with a memory, so that a ring's steps, which repeat the same few position
/// blocks pass after pass, scan each once: a step whose positions and slice table equal, element
/// for element, those of a step classified before gets that verdict back after a comparison
/// (O(S_q + S_kv + n)) instead of the scan (O(S_q · n · log S_kv)). Keyed by contents, never by
/// address: an array freed and refilled at the same address is a new key. Keeps the last
/// kMaxEntries steps. Host arrays. Not thread-safe (one per CudnnState).
class CudnnMaskCache {
 public:
  static constexpr std::size_t kMaxEntries = 64;
  CudnnMaskVerdict classify(const std::int64_t* q_pos, std::int64_t S_q, const std::int64_t* kv_pos,
                            std::int64_t S_kv, const MaskSlice* slices, std::int64_t n);
  /// Scans run (cache misses) since construction.
  std::int64_t scans() const noexcept { return scans_; }
  /// A planted error for the tests only (CudaDevice::Options::plant_wrong_cudnn_mask): every
  /// verdict but None comes back wrong — Full as causal top-left, either causal one as Full, a
  /// band with its left bound one key wider (or, without one, its right bound) — so cuDNN runs
  /// such steps under a mask that is not theirs, which the GPU tests must catch.
  void plant_wrong_verdicts(bool on) noexcept { plant_ = on; }

 private:
  struct Entry {
    std::vector<std::int64_t> q, kv;
    std::vector<MaskSlice> slices;
    CudnnMaskVerdict verdict;
  };
  std::deque<Entry> entries_;  // oldest first
  std::int64_t scans_ = 0;
  bool plant_ = false;
};

}  // namespace burst::cuda
