// Mask IR: validation, shorthand expansion, the q-bucket index and the tile classifier.
// The 14 benchmark builders live in mask_benchmark.cc.
#include "burst/mask.h"

#include <algorithm>
#include <array>
#include <sstream>

#include "burst/error.h"

namespace burst {
namespace {

// Sentinels for "no diagonal bound"; q ± kUnbounded never overflows for valid positions.
constexpr std::int64_t kUnbounded = std::int64_t{1} << 60;

std::string slice_text(const MaskSlice& s) {
  std::ostringstream os;
  os << '[' << s.q_begin << ',' << s.q_end << ")x[" << s.k_begin << ',' << s.k_end << ") "
     << to_string(s.kind);
  if (s.window_left != -1 || s.window_right != -1)
    os << " window=(" << s.window_left << ',' << s.window_right << ')';
  return os.str();
}

// Merged, increasing key intervals of one query row. Rows rarely meet more than a handful of
// slices, so the first kInline intervals live on the stack.
class RowIntervals {
 public:
  void add(std::int64_t lo, std::int64_t hi) {
    if (lo > hi) return;
    if (!spilled_ && n_ < kInline) {
      inline_[n_++] = {lo, hi};
      return;
    }
    if (!spilled_) spill_.assign(inline_.begin(), inline_.end());
    spilled_ = true;
    spill_.push_back({lo, hi});
    ++n_;
  }
  // Sorts by lower end and merges overlapping or touching intervals; returns the count.
  std::size_t merge() {
    Interval* v = spilled_ ? spill_.data() : inline_.data();
    std::sort(v, v + n_, [](const Interval& x, const Interval& y) { return x.lo < y.lo; });
    std::size_t m = 0;
    for (std::size_t i = 0; i < n_; ++i) {
      if (m > 0 && v[i].lo <= v[m - 1].hi + 1) {
        v[m - 1].hi = std::max(v[m - 1].hi, v[i].hi);
      } else {
        v[m++] = v[i];
      }
    }
    n_ = m;
    return m;
  }
  std::int64_t lo(std::size_t i) const { return data()[i].lo; }
  std::int64_t hi(std::size_t i) const { return data()[i].hi; }

 private:
  struct Interval {
    std::int64_t lo, hi;
  };
  static constexpr std::size_t kInline = 16;
  const Interval* data() const { return spilled_ ? spill_.data() : inline_.data(); }
  std::array<Interval, kInline> inline_{};
  std::vector<Interval> spill_;
  std::size_t n_ = 0;
  bool spilled_ = false;
};

}  // namespace

// ---------------------------------------------------------------- Mask ---------------------

const char* to_string(SliceKind kind) noexcept {
  switch (kind) {
    case SliceKind::Full: return "full";
    case SliceKind::Causal: return "causal";
    case SliceKind::InvCausal: return "inv_causal";
    case SliceKind::BiCausal: return "bi_causal";
  }
  return "?";
}

SliceKind slice_kind_from_string(const std::string& name) {
  for (SliceKind k : {SliceKind::Full, SliceKind::Causal, SliceKind::InvCausal, SliceKind::BiCausal})
    if (name == to_string(k)) return k;
  BURST_FAIL(InvalidArgument, "slice kind '", name, "' is not one of full, causal, inv_causal, bi_causal");
}

Mask Mask::sliding_window(std::int64_t left, std::int64_t right, bool causal) {
  BURST_CHECK(left >= -1 && right >= -1, InvalidArgument, "window_size=(", left, ", ", right,
              ") must have entries >= -1 (-1 = unbounded)");
  Mask m;
  m.causal = causal;
  m.window_left = left;
  m.window_right = causal ? 0 : right;  // flash_attn: causal forces window_size[1] = 0
  return m;
}

Mask Mask::from_slices(std::vector<MaskSlice> slices) {
  Mask m;
  m.slices = std::move(slices);
  return m;
}

Mask Mask::document(const std::vector<std::int32_t>& cu_seqlens, bool causal) {
  BURST_CHECK(!cu_seqlens.empty() && cu_seqlens[0] == 0, InvalidArgument,
              "document cu_seqlens must start with 0 (size ", cu_seqlens.size(), ", first ",
              cu_seqlens.empty() ? -1 : cu_seqlens[0], ")");
  Mask m;
  for (std::size_t i = 0; i + 1 < cu_seqlens.size(); ++i) {
    const std::int64_t b = cu_seqlens[i], e = cu_seqlens[i + 1];
    BURST_CHECK(e >= b, InvalidArgument, "document cu_seqlens must be non-decreasing: cu[", i, "]=", b,
                " > cu[", i + 1, "]=", e);
    if (e > b) m.slices.push_back({b, e, b, e, causal ? SliceKind::Causal : SliceKind::Full, -1, -1});
  }
  return m;
}

std::uint64_t Mask::fingerprint() const {
  // FNV-1a over the values (not the memory layout), so equal masks hash equally everywhere.
  std::uint64_t h = 1469598103934665603ull;
  auto mix = [&h](std::int64_t x) {
    auto u = static_cast<std::uint64_t>(x);
    for (int i = 0; i < 8; ++i) {
      h ^= (u >> (8 * i)) & 0xffu;
      h *= 1099511628211ull;
    }
  };
  mix(causal ? 1 : 0);
  mix(window_left);
  mix(window_right);
  mix(static_cast<std::int64_t>(slices.size()));
  for (const MaskSlice& s : slices) {
    mix(s.q_begin);
    mix(s.q_end);
    mix(s.k_begin);
    mix(s.k_end);
    mix(static_cast<std::int64_t>(s.kind));
    mix(s.window_left);
    mix(s.window_right);
  }
  return h;
}

std::string Mask::describe() const {
  std::ostringstream os;
  if (is_shorthand()) {
    const bool windowed = window_left != -1 || (!causal && window_right != -1);
    if (!causal && !windowed) return "full";
    if (causal) os << "causal";
    if (windowed) os << (causal ? " " : "") << "window=(" << window_left << ',' << window_right << ')';
    return os.str();
  }
  os << slices.size() << " slice" << (slices.size() == 1 ? "" : "s") << ": ";
  constexpr std::size_t kShown = 3;
  for (std::size_t i = 0; i < slices.size() && i < kShown; ++i)
    os << (i ? ", " : "") << slice_text(slices[i]);
  if (slices.size() > kShown) os << ", ...";
  return os.str();
}

// ---------------------------------------------------------------- ResolvedMask -------------

void ResolvedMask::validate(const Mask& mask, std::int64_t S_q, std::int64_t S_kv) {
  BURST_CHECK(S_q >= 0 && S_kv >= 0, InvalidArgument,
              "mask global lengths must be >= 0, got S_q_global=", S_q, " S_kv_global=", S_kv);
  BURST_CHECK(mask.window_left >= -1 && mask.window_right >= -1, InvalidArgument, "window_size=(",
              mask.window_left, ", ", mask.window_right, ") must have entries >= -1");
  if (mask.is_shorthand()) return;
  BURST_CHECK(!mask.causal && mask.window_left == -1 && mask.window_right == -1, InvalidArgument,
              "mask mixes shorthands (causal=", mask.causal, ", window=(", mask.window_left, ", ",
              mask.window_right, ")) with ", mask.slices.size(), " explicit slices");
  for (std::size_t i = 0; i < mask.slices.size(); ++i) {
    const MaskSlice& s = mask.slices[i];
    BURST_CHECK(0 <= s.q_begin && s.q_begin <= s.q_end && s.q_end <= S_q && 0 <= s.k_begin &&
                    s.k_begin <= s.k_end && s.k_end <= S_kv,
                InvalidArgument, "mask slice ", i, " ", slice_text(s),
                " must satisfy 0 <= begin <= end <= global length (S_q_global=", S_q, ", S_kv_global=", S_kv,
                ")");
    BURST_CHECK(s.window_left >= -1 && s.window_right >= -1, InvalidArgument, "mask slice ", i, " ",
                slice_text(s), " has a window entry < -1");
  }
}

ResolvedMask::ResolvedMask(const Mask& mask, std::int64_t S_q_global, std::int64_t S_kv_global)
    : S_q_(S_q_global), S_kv_(S_kv_global), description_(mask.describe()) {
  validate(mask, S_q_global, S_kv_global);
  if (mask.is_shorthand()) {
    // flash_attn semantics: one slice over the whole square, diagonal aligned bottom-right, so
    // with S_q != S_kv causal means k <= q + S_kv - S_q.
    if (S_q_ > 0 && S_kv_ > 0)
      slices_.push_back({0, S_q_, 0, S_kv_, mask.causal ? SliceKind::Causal : SliceKind::Full,
                         mask.window_left, mask.causal ? -1 : mask.window_right});
  } else {
    for (const MaskSlice& s : mask.slices)
      if (s.q_begin < s.q_end && s.k_begin < s.k_end) slices_.push_back(s);
  }

  bounds_.reserve(slices_.size());
  for (const MaskSlice& s : slices_) {
    const std::int64_t diag = s.k_end - s.q_end;          // diag(q) = q + diag
    const std::int64_t inv_diag = s.k_begin - s.q_begin;  // top-left diagonal of InvCausal
    std::int64_t lo = -kUnbounded, hi = kUnbounded;
    if (s.kind == SliceKind::Causal || s.kind == SliceKind::BiCausal) hi = diag;
    if (s.kind == SliceKind::InvCausal || s.kind == SliceKind::BiCausal) lo = inv_diag;
    // A window of 2⁶⁰ or more reaches past every position: as wide as kUnbounded (no overflow).
    if (s.window_right >= 0) hi = std::min(hi, diag + std::min(s.window_right, kUnbounded));
    if (s.window_left >= 0) lo = std::max(lo, diag - std::min(s.window_left, kUnbounded));
    bounds_.push_back({s.q_begin, s.q_end, s.k_begin, s.k_end, lo, hi});
  }

  // Bucket width: a power of two, at least 64 rows (a typical q tile, so a tile query meets one
  // or two buckets) and at most 8192 buckets; widened while long slices would make the lists
  // much larger than slices + buckets.
  const auto n = static_cast<std::int64_t>(bounds_.size());
  bucket_shift_ = 6;
  while ((S_q_ >> bucket_shift_) > 8192) ++bucket_shift_;
  auto entries = [&](int shift) {
    std::int64_t e = 0;
    for (const Bounds& b : bounds_) e += ((b.q_end - 1) >> shift) - (b.q_begin >> shift) + 1;
    return e;
  };
  while (bucket_shift_ < 62 && (S_q_ >> bucket_shift_) > 0 &&
         entries(bucket_shift_) > 8 * (n + (S_q_ >> bucket_shift_) + 1))
    ++bucket_shift_;
  const std::int64_t num_buckets = (S_q_ >> bucket_shift_) + 1;
  std::vector<std::int32_t> count(static_cast<std::size_t>(num_buckets) + 1, 0);
  for (const Bounds& b : bounds_)
    for (std::int64_t j = b.q_begin >> bucket_shift_; j <= (b.q_end - 1) >> bucket_shift_; ++j)
      ++count[static_cast<std::size_t>(j) + 1];
  for (std::size_t j = 1; j < count.size(); ++j) count[j] += count[j - 1];
  bucket_start_ = count;
  bucket_items_.assign(static_cast<std::size_t>(count.back()), 0);
  for (std::size_t i = 0; i < bounds_.size(); ++i) {
    const Bounds& b = bounds_[i];
    for (std::int64_t j = b.q_begin >> bucket_shift_; j <= (b.q_end - 1) >> bucket_shift_; ++j)
      bucket_items_[static_cast<std::size_t>(count[static_cast<std::size_t>(j)]++)] =
          static_cast<std::int32_t>(i);
  }
  // Within a bucket: items sorted by k_begin, with the running max of k_end, so a key window
  // [k_lo, k_hi] visits only items with k_begin <= k_hi (binary search) and stops going down
  // once no earlier item reaches k_lo. Block-sparse masks (many slices per q block) need this.
  item_k_begin_.resize(bucket_items_.size());
  item_k_end_max_.resize(bucket_items_.size());
  for (std::size_t j = 0; j + 1 < bucket_start_.size(); ++j) {
    const auto first = bucket_items_.begin() + bucket_start_[j],
               last = bucket_items_.begin() + bucket_start_[j + 1];
    std::sort(first, last, [&](std::int32_t x, std::int32_t y) {
      return bounds_[static_cast<std::size_t>(x)].k_begin < bounds_[static_cast<std::size_t>(y)].k_begin;
    });
    std::int64_t k_end_max = 0;
    for (auto t = static_cast<std::size_t>(bucket_start_[j]);
         t < static_cast<std::size_t>(bucket_start_[j + 1]); ++t) {
      const Bounds& b = bounds_[static_cast<std::size_t>(bucket_items_[t])];
      item_k_begin_[t] = b.k_begin;
      item_k_end_max_[t] = k_end_max = std::max(k_end_max, b.k_end);
    }
  }
}

// Calls fn(bounds) once for every slice whose q range meets [q_lo, q_hi] and whose k range
// meets [k_lo, k_hi] (in no particular order).
template <typename Fn>
void ResolvedMask::for_each_candidate(std::int64_t q_lo, std::int64_t q_hi, std::int64_t k_lo,
                                      std::int64_t k_hi, Fn&& fn) const {
  q_lo = std::max<std::int64_t>(q_lo, 0);
  q_hi = std::min(q_hi, S_q_ - 1);
  if (q_lo > q_hi || k_lo > k_hi || bounds_.empty()) return;
  const std::int64_t j_lo = q_lo >> bucket_shift_, j_hi = q_hi >> bucket_shift_;
  for (std::int64_t j = j_lo; j <= j_hi; ++j) {
    const auto ju = static_cast<std::size_t>(j);
    const auto first = item_k_begin_.begin() + bucket_start_[ju];
    const auto end = std::upper_bound(first, item_k_begin_.begin() + bucket_start_[ju + 1], k_hi);
    for (auto t = static_cast<std::size_t>(end - item_k_begin_.begin());
         t-- > static_cast<std::size_t>(bucket_start_[ju]);) {
      if (item_k_end_max_[t] <= k_lo) break;  // no item at or before t reaches k_lo
      const Bounds& b = bounds_[static_cast<std::size_t>(bucket_items_[t])];
      if (b.q_end <= q_lo || b.q_begin > q_hi || b.k_end <= k_lo) continue;
      if ((std::max(b.q_begin, q_lo) >> bucket_shift_) != j) continue;  // met in an earlier bucket
      fn(b);
    }
  }
}

bool ResolvedMask::visible(std::int64_t q, std::int64_t k) const {
  bool seen = false;
  for_each_candidate(q, q, k, k, [&](const Bounds& b) {
    seen = seen || (k >= std::max(b.k_begin, q + b.lo_off) && k <= std::min(b.k_end - 1, q + b.hi_off));
  });
  return seen;
}

TileClass ResolvedMask::classify(std::int64_t q_lo, std::int64_t q_hi, std::int64_t k_lo,
                                 std::int64_t k_hi) const {
  if (q_lo > q_hi || k_lo > k_hi) return TileClass::Empty;
  bool full = false, any = false;
  for_each_candidate(q_lo, q_hi, k_lo, k_hi, [&](const Bounds& b) {
    if (full) return;
    // Full: the slice alone admits every pair of the tile.
    if (q_lo >= b.q_begin && q_hi < b.q_end && k_lo >= b.k_begin && k_hi < b.k_end &&
        k_hi <= q_lo + b.hi_off && k_lo >= q_hi + b.lo_off) {
      full = true;
      return;
    }
    // Non-empty: some q in the tile has max(C, q+lo) <= min(Dk, q+hi) (derivation: docs/api.md).
    const std::int64_t c = std::max(k_lo, b.k_begin), d = std::min(k_hi, b.k_end - 1);
    if (c > d || b.lo_off > b.hi_off) return;
    const std::int64_t qa = std::max({q_lo, b.q_begin, c - b.hi_off});
    const std::int64_t qb = std::min({q_hi, b.q_end - 1, d - b.lo_off});
    any = any || qa <= qb;
  });
  if (full) return TileClass::Full;
  return any ? TileClass::Partial : TileClass::Empty;
}

std::optional<ResolvedMask::LinearBand> ResolvedMask::linear_band() const noexcept {
  if (bounds_.size() != 1) return std::nullopt;
  const Bounds& b = bounds_.front();
  return LinearBand{b.q_begin, b.q_end, b.k_begin, b.k_end, b.lo_off, b.hi_off};
}

void ResolvedMask::visible_ranges(std::int64_t q, std::int64_t k_lo, std::int64_t k_hi,
                                  const std::function<void(std::int64_t, std::int64_t)>& fn) const {
  RowIntervals row;
  for_each_candidate(q, q, k_lo, k_hi, [&](const Bounds& b) {
    row.add(std::max({k_lo, b.k_begin, q + b.lo_off}), std::min({k_hi, b.k_end - 1, q + b.hi_off}));
  });
  const std::size_t m = row.merge();
  for (std::size_t i = 0; i < m; ++i) fn(row.lo(i), row.hi(i));
}

std::int64_t ResolvedMask::visible_pairs(const std::vector<std::int64_t>& q_pos,
                                         const std::vector<std::int64_t>& k_pos) const {
  if (q_pos.empty() || k_pos.empty()) return 0;
  std::int64_t total = 0;
  for (std::int64_t q : q_pos) {
    visible_ranges(q, k_pos.front(), k_pos.back(), [&](std::int64_t lo, std::int64_t hi) {
      total +=
          std::upper_bound(k_pos.begin(), k_pos.end(), hi) - std::lower_bound(k_pos.begin(), k_pos.end(), lo);
    });
  }
  return total;
}

std::int64_t ResolvedMask::visible_pairs() const {
  std::int64_t total = 0;
  for (std::int64_t q = 0; q < S_q_; ++q)
    visible_ranges(q, 0, S_kv_ - 1, [&](std::int64_t lo, std::int64_t hi) { total += hi - lo + 1; });
  return total;
}

}  // namespace burst
