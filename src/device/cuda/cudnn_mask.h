// src/device/cuda/cudnn_mask.h — which of cuDNN's SDPA masks, if any, is exactly one attention
// step's visibility (internal, library burst_cuda; docs/gpu.md § cuDNN).
//
// cuDNN's fused attention knows no positions and no slice table: it sees local row i of S_q and
// key j of S_kv, and masks them all-visible, causal aligned top-left (j ≤ i) or causal aligned
// bottom-right (j ≤ i + S_kv − S_q). A step goes to cuDNN only when its visibility under burst's
// mask (burst/mask.h: the union of the slices over the global positions) is one of these for
// every (i, j) and no row is left without a key (cuDNN's output for such a row is not burst's
// out = 0, lse = −inf). Everything else — windows, documents, a zigzag or striped block that is
// neither, position masks — stays on burst's own kernels.
// Host code only: the positions and the slice table must be host arrays here.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "burst/mask.h"

namespace burst::cuda {

/// The cuDNN mask that matches a step exactly; None when none does.
enum class CudnnMask : std::uint8_t { None, Full, CausalTopLeft, CausalBottomRight };

const char* to_string(CudnnMask m) noexcept;

struct CudnnMaskVerdict {
  CudnnMask mask = CudnnMask::None;
  std::string why_not;  ///< why None ("" otherwise)
};

/// Classifies the step q_pos [S_q] × kv_pos [S_kv] (host arrays, strictly increasing global
/// positions) under the `n` slices (host array). Per row, the visible keys of each slice are one
/// position interval, hence (positions sorted) one index range found by binary search; the
/// row's ranges merged must be one prefix [0, e_i) of the keys, and e_i must be S_kv for every
/// row (Full), i + 1 (top-left) or i + 1 + S_kv − S_q (bottom-right), never 0. Where S_q = S_kv
/// the two causal alignments agree and top-left is reported. Cost: O(S_q · n · log S_kv).
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
  /// verdict but None comes back wrong — Full as causal top-left, either causal one as Full — so
  /// cuDNN runs such steps under a mask that is not theirs, which the GPU tests must catch.
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
