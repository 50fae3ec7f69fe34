// The host-side classifier of cudnn_mask.h: one step's visibility as one of cuDNN's SDPA masks.
#include "device/cuda/cudnn_mask.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "device/cuda/mask_table.h"

namespace burst::cuda {

const char* to_string(CudnnMask m) noexcept {
  switch (m) {
    case CudnnMask::None: return "none";
    case CudnnMask::Full: return "full";
    case CudnnMask::CausalTopLeft: return "causal top-left";
    case CudnnMask::CausalBottomRight: return "causal bottom-right";
  }
  return "?";
}

namespace {

/// The visible keys of the row at position p: one prefix [0, e) of the key indices, or −1 when
/// they are not a prefix (a gap, or a first visible key past index 0).
std::int64_t visible_prefix(std::int64_t p, const std::int64_t* kv_pos, std::int64_t S_kv,
                            const std::vector<SliceBounds>& bounds,
                            std::vector<std::pair<std::int64_t, std::int64_t>>& ranges) {
  ranges.clear();
  const std::int64_t* end = kv_pos + S_kv;
  for (const SliceBounds& b : bounds) {
    if (p < b.q_begin || p >= b.q_end) continue;
    const std::int64_t lo = max64(b.k_begin, p + b.lo), hi = min64(b.k_end - 1, p + b.hi);
    if (lo > hi) continue;
    const std::int64_t first = std::lower_bound(kv_pos, end, lo) - kv_pos,
                       last = std::upper_bound(kv_pos, end, hi) - kv_pos;  // [first, last)
    if (first < last) ranges.emplace_back(first, last);
  }
  if (ranges.empty()) return 0;
  std::sort(ranges.begin(), ranges.end());
  if (ranges.front().first != 0) return -1;
  std::int64_t e = 0;
  for (const auto& [first, last] : ranges) {
    if (first > e) return -1;  // a gap: keys [e, first) invisible between visible ones
    e = std::max(e, last);
  }
  return e;
}

}  // namespace

CudnnMaskVerdict classify_for_cudnn(const std::int64_t* q_pos, std::int64_t S_q, const std::int64_t* kv_pos,
                                    std::int64_t S_kv, const MaskSlice* slices, std::int64_t n) {
  if (S_q <= 0 || S_kv <= 0) return {CudnnMask::None, "an empty step"};
  std::vector<SliceBounds> bounds;
  bounds.reserve(static_cast<std::size_t>(n));
  for (std::int64_t s = 0; s < n; ++s) bounds.push_back(slice_bounds(slices[s]));
  // Which of the three shapes every row so far agrees with.
  bool full = true, top_left = true, bottom_right = true;
  std::vector<std::pair<std::int64_t, std::int64_t>> ranges;
  for (std::int64_t i = 0; i < S_q && (full || top_left || bottom_right); ++i) {
    const std::int64_t e = visible_prefix(q_pos[i], kv_pos, S_kv, bounds, ranges);
    if (e < 0)
      return {CudnnMask::None, "row " + std::to_string(i) + " (position " + std::to_string(q_pos[i]) +
                                   ") sees keys that are not a prefix of the step's"};
    if (e == 0)
      return {CudnnMask::None,
              "row " + std::to_string(i) + " (position " + std::to_string(q_pos[i]) + ") sees no key"};
    full = full && e == S_kv;
    top_left = top_left && e == min64(i + 1, S_kv);
    bottom_right = bottom_right && e == min64(i + 1 + S_kv - S_q, S_kv);
  }
  if (full) return {CudnnMask::Full, ""};
  if (top_left) return {CudnnMask::CausalTopLeft, ""};
  if (bottom_right) return {CudnnMask::CausalBottomRight, ""};
  return {CudnnMask::None, "the visible keys are prefixes, but neither all keys nor a causal diagonal"};
}

CudnnMaskVerdict CudnnMaskCache::classify(const std::int64_t* q_pos, std::int64_t S_q,
                                          const std::int64_t* kv_pos, std::int64_t S_kv,
                                          const MaskSlice* slices, std::int64_t n) {
  const auto same = [](const auto& held, const auto* p, std::int64_t count) {
    return static_cast<std::int64_t>(held.size()) == count && std::equal(held.begin(), held.end(), p);
  };
  CudnnMaskVerdict v;
  bool found = false;
  for (const Entry& e : entries_) {
    if (same(e.q, q_pos, S_q) && same(e.kv, kv_pos, S_kv) && same(e.slices, slices, n)) {
      v = e.verdict;
      found = true;
      break;
    }
  }
  if (!found) {
    ++scans_;
    v = classify_for_cudnn(q_pos, S_q, kv_pos, S_kv, slices, n);
    if (entries_.size() == kMaxEntries) entries_.pop_front();
    entries_.push_back({std::vector<std::int64_t>(q_pos, q_pos + max64(S_q, 0)),
                        std::vector<std::int64_t>(kv_pos, kv_pos + max64(S_kv, 0)),
                        std::vector<MaskSlice>(slices, slices + max64(n, 0)), v});
  }
  if (plant_ && v.mask != CudnnMask::None)
    v.mask = v.mask == CudnnMask::Full ? CudnnMask::CausalTopLeft : CudnnMask::Full;
  return v;
}

}  // namespace burst::cuda
