// Backward spans (see backward_spans.h).
#include "strategies/backward_spans.h"

#include <algorithm>
#include <optional>
#include <utility>

namespace burst::strategies {

namespace {

/// Row starts of the runs of consecutive positions in pos[0, n), then n.
std::vector<std::int64_t> position_runs(const std::int64_t* pos, std::int64_t n) {
  std::vector<std::int64_t> starts = {0};
  for (std::int64_t i = 1; i < n; ++i)
    if (pos[i] != pos[i - 1] + 1) starts.push_back(i);
  starts.push_back(n);
  return starts;
}

/// runs (≤ 2, from position_runs) cut at n/2 too: every piece holds at most half the rows, so a
/// rank whose zigzag chunks are adjacent (rank P − 1: chunks P − 1 and P) is cut like the others.
std::vector<std::int64_t> halves(std::vector<std::int64_t> runs, std::int64_t n) {
  const std::int64_t mid = n / 2;
  if (mid > 0 && std::find(runs.begin(), runs.end(), mid) == runs.end()) {
    runs.push_back(mid);
    std::sort(runs.begin(), runs.end());
  }
  return runs;
}

/// Both sides' pieces (row starts, then n): their runs cut at the middle. False when a side is
/// empty or has more than two runs: the caller then makes one call over the whole block.
bool pieces(const std::int64_t* q_pos, std::int64_t n_q, const std::int64_t* kv_pos, std::int64_t n_kv,
            std::vector<std::int64_t>& qr, std::vector<std::int64_t>& kr) {
  if (n_q == 0 || n_kv == 0) return false;
  qr = position_runs(q_pos, n_q);
  kr = position_runs(kv_pos, n_kv);
  if (qr.size() > 3 || kr.size() > 3) return false;  // at most two runs each
  qr = halves(std::move(qr), n_q);
  kr = halves(std::move(kr), n_kv);
  return true;
}

/// Both cuts: for each piece of the outer side (the keys when by_keys, else the queries), one
/// call on the hull of the other side's pieces the mask does not leave Empty against it; an
/// outer piece that sees none is left out.
std::vector<KernelSpan> cut(const ResolvedMask& mask, const std::int64_t* q_pos, std::int64_t n_q,
                            const std::int64_t* kv_pos, std::int64_t n_kv, bool by_keys) {
  std::vector<std::int64_t> qr, kr;
  if (!pieces(q_pos, n_q, kv_pos, n_kv, qr, kr)) return {{0, n_q, 0, n_kv}};
  const std::vector<std::int64_t>& outer = by_keys ? kr : qr;
  const std::vector<std::int64_t>& inner = by_keys ? qr : kr;
  // The span of outer piece [o0, o1) and inner piece [i0, i1).
  const auto span = [by_keys](std::int64_t o0, std::int64_t o1, std::int64_t i0, std::int64_t i1) {
    return by_keys ? KernelSpan{i0, i1, o0, o1} : KernelSpan{o0, o1, i0, i1};
  };
  std::vector<KernelSpan> out;
  for (std::size_t a = 0; a + 1 < outer.size(); ++a) {
    const std::int64_t o0 = outer[a], o1 = outer[a + 1];
    std::int64_t i0 = -1, i1 = -1;
    for (std::size_t b = 0; b + 1 < inner.size(); ++b) {
      const KernelSpan sp = span(o0, o1, inner[b], inner[b + 1]);
      if (mask.classify(q_pos[sp.q0], q_pos[sp.q1 - 1], kv_pos[sp.k0], kv_pos[sp.k1 - 1]) == TileClass::Empty)
        continue;
      if (i0 < 0) i0 = inner[b];
      i1 = inner[b + 1];
    }
    if (i0 >= 0) out.push_back(span(o0, o1, i0, i1));
  }
  return out;
}

/// The first and one past the last index of kv_pos[k0, k1) that the row at position q sees (its
/// visible intervals' hull; {k0, k0} when it sees none).
std::pair<std::int64_t, std::int64_t> row_keys(const ResolvedMask& mask, std::int64_t q,
                                               const std::int64_t* kv_pos, std::int64_t k0, std::int64_t k1) {
  std::int64_t first = k1, last = k0;
  mask.visible_ranges(q, kv_pos[k0], kv_pos[k1 - 1], [&](std::int64_t lo, std::int64_t hi) {
    const std::int64_t a = std::lower_bound(kv_pos + k0, kv_pos + k1, lo) - kv_pos,
                       e = std::upper_bound(kv_pos + k0, kv_pos + k1, hi) - kv_pos;
    if (a < e) {
      first = std::min(first, a);
      last = std::max(last, e);
    }
  });
  return first < last ? std::pair{first, last} : std::pair{k0, k0};
}

/// True when the row at position q sees some key of kv_pos[k0, k1): exact, through the mask's
/// visible intervals, not the position hull's classification.
bool row_sees(const ResolvedMask& mask, std::int64_t q, const std::int64_t* kv_pos, std::int64_t k0,
              std::int64_t k1) {
  const auto [first, last] = row_keys(mask, q, kv_pos, k0, k1);
  return first < last;
}

/// The key positions [lo, hi] the row at position q may see under a mask of one linear band
/// (ResolvedMask::LinearBand; none where lo > hi or the row is outside the band's query range).
/// Both bounds grow by 0 or 1 per position, so the first key ≥ lo and the first key > hi of a
/// sorted key list only move forward with the row.
struct BandRow {
  bool in_range;
  std::int64_t lo, hi;
};
BandRow band_row(const ResolvedMask::LinearBand& band, std::int64_t q) {
  return {q >= band.q_begin && q < band.q_end, std::max(band.k_begin, q + band.lo_off),
          std::min(band.k_end - 1, q + band.hi_off)};
}

/// Under a mask of one linear band: sp's rows trimmed as trim_rows does, by walking the rows'
/// first and last keys from each end (the band's bounds only grow with the row's position), so
/// O(rows walked + keys) and no per-row call.
void trim_band_rows(const ResolvedMask::LinearBand& band, const std::int64_t* q_pos,
                    const std::int64_t* kv_pos, KernelSpan& sp) {
  std::int64_t s = sp.k0, e = sp.k0;  // forward: the first key ≥ lo, the first key > hi
  for (; sp.q0 < sp.q1; ++sp.q0) {
    const BandRow r = band_row(band, q_pos[sp.q0]);
    while (s < sp.k1 && kv_pos[s] < r.lo) ++s;
    while (e < sp.k1 && kv_pos[e] <= r.hi) ++e;
    if (r.in_range && e > s) break;
  }
  s = e = sp.k1;  // backward: the same two indices, walked down as the bounds shrink
  for (; sp.q1 > sp.q0; --sp.q1) {
    const BandRow r = band_row(band, q_pos[sp.q1 - 1]);
    while (s > sp.k0 && kv_pos[s - 1] >= r.lo) --s;
    while (e > sp.k0 && kv_pos[e - 1] > r.hi) --e;
    if (r.in_range && e > s) break;
  }
}

/// The spans with their leading and trailing query rows that see none of the span's keys dropped
/// (a span left without rows is dropped too). What a row outside every span would get is what a
/// call over it would have written: nothing (backward) or out 0, lse −inf (forward's caller).
/// Under a mask of one linear band through trim_band_rows; else row by row through the mask's
/// visible intervals (row_sees, its twin: Spans.TrimmedRowsMatchTheMask).
std::vector<KernelSpan> trim_rows(const ResolvedMask& mask, const std::int64_t* q_pos,
                                  const std::int64_t* kv_pos, std::vector<KernelSpan> spans) {
  const std::optional<ResolvedMask::LinearBand> band = mask.linear_band();
  std::vector<KernelSpan> out;
  for (KernelSpan sp : spans) {
    if (sp.q0 >= sp.q1 || sp.k0 >= sp.k1) {  // an empty side: the call as it was
      out.push_back(sp);
      continue;
    }
    if (band) {
      trim_band_rows(*band, q_pos, kv_pos, sp);
    } else {
      while (sp.q0 < sp.q1 && !row_sees(mask, q_pos[sp.q0], kv_pos, sp.k0, sp.k1)) ++sp.q0;
      while (sp.q1 > sp.q0 && !row_sees(mask, q_pos[sp.q1 - 1], kv_pos, sp.k0, sp.k1)) --sp.q1;
    }
    if (sp.q0 < sp.q1) out.push_back(sp);
  }
  return out;
}

/// shaped_spans under a mask of one linear band: the span's rows cut, in order, into the longest
/// pieces that are each one of cuDNN's bands over the keys they see (device/cuda/cudnn_mask.h),
/// each piece's keys narrowed to the keys its rows see: within a piece the first key a row sees
/// stays put and then moves by one per row, the last one moves by one per row and then stays
/// put, every row sees a key, and a piece whose first key moves has no more rows than keys.
/// Rows that see no key are in no piece. The band's bounds only grow with the row's position, so
/// a row's first and last key are found by walking forward from the previous row's: a span costs
/// O(rows + keys) and no per-row call. Each piece is a band that cuDNN takes where its S_q + S_kv
/// + L + R stays within 2²⁴ (cudnn_mask.h); beyond, that piece runs on the own kernels.
/// False, as soon as it would, when it takes more than max_pieces pieces (out then unspecified).
bool band_pieces(const ResolvedMask::LinearBand& band, const std::int64_t* q_pos, const std::int64_t* kv_pos,
                 const KernelSpan& sp, std::vector<KernelSpan>& out, std::size_t max_pieces) {
  std::int64_t s = sp.k0, e = sp.k0;  // the row's keys [s, e) of kv_pos (e <= s: none)
  std::int64_t a = -1;                // the open piece's first row (-1: none open)
  std::int64_t s_first = 0, s_prev = 0, e_prev = 0;
  bool s_moves = false, e_stays = false;
  for (std::int64_t i = sp.q0; i < sp.q1; ++i) {
    const BandRow r = band_row(band, q_pos[i]);  // only grows with i: s and e only move forward
    while (s < sp.k1 && kv_pos[s] < r.lo) ++s;
    while (e < sp.k1 && kv_pos[e] <= r.hi) ++e;
    if (!r.in_range || e <= s) {  // no key: closes the open piece
      if (a >= 0) out.push_back({a, i, s_first, e_prev});
      if (out.size() > max_pieces) return false;
      a = -1;
      continue;
    }
    if (a >= 0) {
      const std::int64_t ds = s - s_prev, de = e - e_prev;
      const bool moves = s_moves || ds == 1;
      const bool band_kept = (ds == 1 || (ds == 0 && !s_moves)) && (de == 0 || (de == 1 && !e_stays)) &&
                             (!moves || i + 1 - a <= e - s_first);
      if (band_kept) {
        s_moves = moves;
        e_stays = e_stays || de == 0;
      } else {
        out.push_back({a, i, s_first, e_prev});
        if (out.size() > max_pieces) return false;
        a = -1;
      }
    }
    if (a < 0) {
      a = i;
      s_first = s;
      s_moves = e_stays = false;
    }
    s_prev = s;
    e_prev = e;
  }
  if (a >= 0) out.push_back({a, sp.q1, s_first, e_prev});
  return out.size() <= max_pieces;
}

/// shaped_spans under any other mask: sp cut at the breaks in its rows' positions (a zigzag
/// block's two chunks) where the first or last key a row sees moves by more than one across the
/// break (no one band holds both sides), and a piece whose last row does not see its first key
/// into pieces of at most as many rows as keys (cuDNN takes no left bound with more rows than
/// keys); untrimmed. False, as soon as it would, when that takes more than max_pieces pieces.
bool break_pieces(const ResolvedMask& mask, const std::int64_t* q_pos, const std::int64_t* kv_pos,
                  const KernelSpan& sp, std::vector<KernelSpan>& out, std::size_t max_pieces) {
  const std::int64_t n = sp.k1 - sp.k0;
  const auto add = [&](std::int64_t a, std::int64_t e) {
    if (e - a <= n || mask.visible(q_pos[e - 1], kv_pos[sp.k0])) {
      out.push_back({a, e, sp.k0, sp.k1});
      return;
    }
    for (std::int64_t b = a; b < e && out.size() <= max_pieces; b += n)
      out.push_back({b, std::min(e, b + n), sp.k0, sp.k1});
  };
  std::int64_t a = sp.q0;
  for (std::int64_t i = sp.q0 + 1; i < sp.q1; ++i) {
    if (q_pos[i] == q_pos[i - 1] + 1) continue;
    const auto [s0, e0] = row_keys(mask, q_pos[i - 1], kv_pos, sp.k0, sp.k1);
    const auto [s1, e1] = row_keys(mask, q_pos[i], kv_pos, sp.k0, sp.k1);
    if (s1 - s0 > 1 || s1 < s0 || e1 - e0 > 1 || e1 < e0) {
      add(a, i);
      if (out.size() > max_pieces) return false;
      a = i;
    }
  }
  add(a, sp.q1);
  return out.size() <= max_pieces;
}

}  // namespace

std::vector<KernelSpan> backward_spans(const ResolvedMask& mask, const std::int64_t* q_pos, std::int64_t n_q,
                                       const std::int64_t* kv_pos, std::int64_t n_kv) {
  return trim_rows(mask, q_pos, kv_pos, cut(mask, q_pos, n_q, kv_pos, n_kv, true));
}

std::vector<KernelSpan> shaped_spans(const ResolvedMask& mask, const std::int64_t* q_pos,
                                     const std::int64_t* kv_pos, const std::vector<KernelSpan>& spans) {
  const std::optional<ResolvedMask::LinearBand> band = mask.linear_band();
  std::vector<KernelSpan> out, pieces;
  for (const KernelSpan& sp : spans) {
    if (sp.k0 >= sp.k1 || sp.q0 >= sp.q1) {  // an empty side: the call as it was
      out.push_back(sp);
      continue;
    }
    pieces.clear();
    const bool few = band ? band_pieces(*band, q_pos, kv_pos, sp, pieces, kMaxShapedPieces)
                          : break_pieces(mask, q_pos, kv_pos, sp, pieces, kMaxShapedPieces);
    if (!few) {  // too many pieces: the span stays one call
      out.push_back(sp);
      continue;
    }
    if (!band) pieces = trim_rows(mask, q_pos, kv_pos, std::move(pieces));
    out.insert(out.end(), pieces.begin(), pieces.end());
  }
  return out;
}

std::vector<KernelSpan> forward_spans(const ResolvedMask& mask, const std::int64_t* q_pos, std::int64_t n_q,
                                      const std::int64_t* kv_pos, std::int64_t n_kv) {
  return trim_rows(mask, q_pos, kv_pos, cut(mask, q_pos, n_q, kv_pos, n_kv, false));
}

}  // namespace burst::strategies
