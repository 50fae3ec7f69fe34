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
    case CudnnMask::BandTopLeft: return "band top-left";
    case CudnnMask::BandBottomRight: return "band bottom-right";
  }
  return "?";
}

std::string CudnnMaskVerdict::describe() const {
  std::string d = to_string(mask);
  if (band()) {
    if (left > 0) d += " left " + std::to_string(left);
    if (right >= 0) d += " right " + std::to_string(right);
  }
  return d;
}

namespace {

/// The visible keys of the row at position p: one range [s, e) of the key indices (e = 0 when
/// it sees none), or e = −1 when they are not one range (a gap between visible keys).
std::pair<std::int64_t, std::int64_t> visible_range(
    std::int64_t p, const std::int64_t* kv_pos, std::int64_t S_kv, const std::vector<SliceBounds>& bounds,
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
  if (ranges.empty()) return {0, 0};
  std::sort(ranges.begin(), ranges.end());
  const std::int64_t s = ranges.front().first;
  std::int64_t e = s;
  for (const auto& [first, last] : ranges) {
    if (first > e) return {s, -1};  // a gap: keys [e, first) invisible between visible ones
    e = std::max(e, last);
  }
  return {s, e};
}

/// One edge of the rows' key ranges, their starts or their ends, seen row by row: at `none`
/// (0 for the starts, S_kv for the ends) in every row, or i + c clipped to [0, S_kv] for one
/// constant c, which the first row off the clip fixes (the rows before it must be clipped).
class Edge {
 public:
  Edge(bool starts, std::int64_t S_kv) : starts_(starts), S_kv_(S_kv) {}
  /// Row i's start or end; false once the rows cannot follow one such edge.
  bool see(std::int64_t i, std::int64_t at) {
    const std::int64_t none = starts_ ? 0 : S_kv_;
    if (unbounded_ && at == none) return true;
    if (unbounded_) {  // the first row off the clip
      unbounded_ = false;
      c_ = at - i;
      // The rows before it sat on the clip: so must i − 1 + c (rows are checked in order).
      return i == 0 || clip(i - 1) == none;
    }
    return clip(i) == at;
  }
  bool unbounded() const noexcept { return unbounded_; }
  std::int64_t c() const noexcept { return c_; }

 private:
  std::int64_t clip(std::int64_t i) const { return starts_ ? max64(i + c_, 0) : min64(i + c_, S_kv_); }
  bool starts_;
  std::int64_t S_kv_;
  bool unbounded_ = true;
  std::int64_t c_ = 0;
};

}  // namespace

CudnnMaskVerdict classify_for_cudnn(const std::int64_t* q_pos, std::int64_t S_q, const std::int64_t* kv_pos,
                                    std::int64_t S_kv, const MaskSlice* slices, std::int64_t n) {
  if (S_q <= 0 || S_kv <= 0) return {CudnnMask::None, "an empty step"};
  std::vector<SliceBounds> bounds;
  bounds.reserve(static_cast<std::size_t>(n));
  for (std::int64_t s = 0; s < n; ++s) bounds.push_back(slice_bounds(slices[s]));
  Edge starts(true, S_kv), ends(false, S_kv);
  std::vector<std::pair<std::int64_t, std::int64_t>> ranges;
  for (std::int64_t i = 0; i < S_q; ++i) {
    const auto [s, e] = visible_range(q_pos[i], kv_pos, S_kv, bounds, ranges);
    if (e <= 0 || !starts.see(i, s) || !ends.see(i, e)) {
      const std::string row = "row " + std::to_string(i) + " (position " + std::to_string(q_pos[i]) + ")";
      if (e < 0) return {CudnnMask::None, row + " sees keys that are not one range of the step's"};
      if (e == 0) return {CudnnMask::None, row + " sees no key"};
      return {CudnnMask::None, row + " leaves the diagonal band of the rows before it"};
    }
  }
  // Top-left (off = 0) or bottom-right (off = S_kv − S_q): L = off + 1 − c_s ≥ 1 and
  // R = c_e − 1 − off ≥ 0 where the edge is bounded. The unbounded and causal shapes keep their
  // kinds (and the graphs' keys) from before bands; a band is top-left where both alignments fit.
  const std::int64_t off = S_kv - S_q;
  if (starts.unbounded() && ends.unbounded()) return {CudnnMask::Full, ""};
  if (starts.unbounded() && ends.c() == 1) return {CudnnMask::CausalTopLeft, ""};
  if (starts.unbounded() && off >= 0 && ends.c() == 1 + off) return {CudnnMask::CausalBottomRight, ""};
  const auto fits = [&](std::int64_t o) {
    return (starts.unbounded() || o + 1 - starts.c() >= 1) && (ends.unbounded() || ends.c() - 1 - o >= 0);
  };
  const bool top_left = fits(0);
  if (!top_left && !(off >= 0 && fits(off)))
    return {CudnnMask::None, "a diagonal band that neither of cuDNN's alignments expresses"};
  const std::int64_t o = top_left ? 0 : off;
  const std::int64_t left = starts.unbounded() ? 0 : o + 1 - starts.c();
  const std::int64_t right = ends.unbounded() ? -1 : ends.c() - 1 - o;
  if (left > 0 && S_q > S_kv)
    return {CudnnMask::None, "a left band bound with more rows than keys (cuDNN refuses it)"};
  // The frontend hands a left bound to cuDNN as fp32 and adds it to key indices in fp32: exact
  // only while every such sum stays within 2^24.
  constexpr std::int64_t kExactInFp32 = std::int64_t{1} << 24;
  if (S_q + S_kv + left + max64(right, 0) > kExactInFp32)
    return {CudnnMask::None,
            "a band over more than 2^24 rows, keys and bounds (cuDNN's fp32 band arithmetic)"};
  return {top_left ? CudnnMask::BandTopLeft : CudnnMask::BandBottomRight, "", left, right};
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
  if (plant_ && v.band()) {
    if (v.left > 0) {
      ++v.left;
    } else {
      ++v.right;
    }
  } else if (plant_ && v.mask != CudnnMask::None) {
    v.mask = v.mask == CudnnMask::Full ? CudnnMask::CausalTopLeft : CudnnMask::Full;
  }
  return v;
}

}  // namespace burst::cuda
