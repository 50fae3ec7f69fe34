// Tiled (FlashAttention-2 style) attention forward — the fast twin of forward_reference.
//
// Forward, per work item (b, h, q-tile of bq rows), one thread, one pass over the kv tiles:
//   S = (c₂·Q)·Kᵀ in base 2 (c₂ = scale·log₂e folded into the packed Q tile)   [gemm]
//   Partial tiles only: per-element mask (visible_ranges);  Empty tiles: skipped by the classifier
//   per row: m_tile = max S (row_max); online_softmax_rescale (burst/softmax_merge.h, natural log);
//            P = exp2(S − m·log₂e) and its sum (exp2_shift_sum); O ← α·O; l ← α·l + Σ P
//   O += P·V                                                                   [gemm]
// then out = O·(1/l), lse = m + log l (online_softmax_inv_sum / online_softmax_lse).
// bf16 arithmetic (tiled::use_bf16_dot: Isa::Avx512Bf16, Amx or AmxEmulated, whose gemm_bf16
// runs on vdpbf16ps or on AMX tiles, and bf16 q, k, v): K and V are packed straight from their
// bf16 storage into bf16 pairs (Kᵀ [D/2][bkv][2], V [bkv/2][Dp][2]; no fp32 panels), the Q tile is kept in
// bf16 unscaled (so Q is not rounded twice), S = Q·Kᵀ and O += P·V run on vdpbf16ps or tiles with fp32
// accumulators. S stays unscaled (the GEMM's alpha is 1, so AMX stores its tiles straight to
// S): c₂ multiplies the row max (max(c₂·s) = c₂·max s for c₂ > 0) and enters exp2's argument
// by one FMA in probs_bf16, which writes P in bf16 in the same pass and returns the row sum l
// of the fp32 P before that rounding, as FlashAttention-2 does (no fp32 P pass).
// K is packed transposed [D][bkv] and V padded [bkv][Dp] (tables with gemm_packed, AVX2: then
// into column panels, contiguous per 16 columns) once per (b, kv-head, kv-tile) in a
// first parallel loop and shared by the G = H/H_kv query heads of the group (never copied per
// query head). Items are independent, so out/lse are bitwise identical for any thread count.
// Memory: packed K and V (≈ size of k and v) + per thread Q, S, O tiles and m, l rows, all in
// the calling thread's workspace (kernels/workspace.h), reused by the next call.
// Source: FlashAttention-2 (Dao 2023) Alg. 1; BurstAttention LAO (arXiv 2403.09347 §3.3).
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "burst/softmax_merge.h"
#include "kernels/kernels.h"
#include "kernels/microkernels.h"
#include "kernels/tiled_common.h"
#include "kernels/workspace.h"

namespace burst::kernels {
namespace {

using tiled::Geometry;

// Default tile sizes (rows). bq = 96 is a multiple of the 6-row GEMM block (no remainder
// block) and of 16; bkv = 128 halves the per-row softmax bookkeeping relative to 64 at equal GEMM
// efficiency. Tiles stay L2-resident (D = 128: S 48 KiB, Kᵀ and V panels 64 KiB each).
constexpr int kForwardBq = 96;
constexpr int kForwardBkv = 128;

struct ForwardPacks {
  std::span<float> kt;  // [B][H_kv][n_kt][D][bkv] (panels: Kᵀ of each tile in column panels)
  std::span<float> v;   // [B][H_kv][n_kt][bkv][Dp] (panels: V of each tile in column panels)
  std::int64_t kt_tile = 0, v_tile = 0;
  bool panels = false;               // tiled::use_panels: B operands packed for gemm_packed
  std::int64_t kt_ld = 0, v_ld = 0;  // row stride, or panel stride when panels
  // bf16 path only: pair-packed copies (bf16 elements per tile: D2·bkv and bkv·Dp).
  std::uint16_t* kt16 = nullptr;
  std::uint16_t* v16 = nullptr;
  std::int64_t kt16_tile = 0, v16_tile = 0;
  const float* kt_panel(const Geometry& g, std::int64_t b, std::int64_t hk, std::int64_t H_kv,
                        std::int64_t t) const {
    return kt.data() + ((b * H_kv + hk) * g.n_kt + t) * kt_tile;
  }
  const float* v_panel(const Geometry& g, std::int64_t b, std::int64_t hk, std::int64_t H_kv,
                       std::int64_t t) const {
    return v.data() + ((b * H_kv + hk) * g.n_kt + t) * v_tile;
  }
};

// Per-thread scratch: O(tile), slices of the calling thread's workspace.
struct ForwardScratch {
  std::span<float> q, s, o, m, l;
  std::span<float> q16, p16;  // bf16 path: Q tile [bq][D2] and P tile [bq][bkv] in bf16
  std::span<float> pack;      // panels: one row-major Kᵀ or V tile on its way to the panels
  struct Slots {
    WorkspaceSlot q, s, o, m, l, q16, p16, pack;
  };
  static Slots plan(WorkspacePlan& plan, const Geometry& g, int D, bool bf16, bool panels) {
    const auto bq = static_cast<std::size_t>(g.bq);
    const std::int64_t D2 = D + (D & 1);
    return {
        plan.add(bq * static_cast<std::size_t>(D)),
        plan.add(bq * static_cast<std::size_t>(g.bkv)),
        plan.add(bq * static_cast<std::size_t>(g.Dp)),
        plan.add(bq),
        plan.add(bq),
        plan.add(bf16 ? tiled::bf16_floats(g.bq * D2) : 0),
        plan.add(bf16 ? tiled::bf16_floats(g.bq * g.bkv) : 0),
        plan.add(panels ? static_cast<std::size_t>(g.bkv) * static_cast<std::size_t>(std::max(D, g.Dp)) : 0)};
  }
  ForwardScratch(float* base, const Slots& s_)
      : q(slice(base, s_.q)),
        s(slice(base, s_.s)),
        o(slice(base, s_.o)),
        m(slice(base, s_.m)),
        l(slice(base, s_.l)),
        q16(slice(base, s_.q16)),
        p16(slice(base, s_.p16)),
        pack(slice(base, s_.pack)) {}
};

void pack_forward_tile(const Problem& p, const Geometry& g, ForwardPacks& packs, std::int64_t idx,
                       float* tmp) {
  const std::int64_t t = idx % g.n_kt, bh = idx / g.n_kt;
  const std::int64_t b = bh / p.H_kv, hk = bh % p.H_kv;
  const std::int64_t j0 = g.kv_begin(t);
  const int nc = g.kv_rows(t);
  const int D = static_cast<int>(p.D);
  // Kᵀ panel: the transposed pack of rows j0..j0+nc (one row of Kᵀ = one of the D features).
  float* kt = packs.kt.data() + idx * packs.kt_tile;
  const Converters& cv = converters(p.isa);
  float* v = packs.v.data() + idx * packs.v_tile;
  if (packs.kt16 != nullptr) {  // bf16 arithmetic (bf16 storage): straight into the pairs, no fp32 pack
    tiled::pack_kt_pairs_bf16(p.k, b, hk, j0, nc, D, g.bkv, packs.kt16 + idx * packs.kt16_tile);
    tiled::pack_v_pairs_bf16(p.v, b, hk, j0, nc, D, g.Dp, g.bkv, packs.v16 + idx * packs.v16_tile);
    return;
  }
  if (packs.panels) {  // row-major through tmp, then into panels
    const Microkernels& mk = microkernels(p.isa);
    tiled::pack_transposed(cv, p.k, b, hk, j0, nc, D, g.bkv, tmp);
    mk.pack_panels(tmp, g.bkv, kt, packs.kt_ld, D, g.bkv);
    tiled::pack_rows(cv, p.v, b, hk, j0, nc, D, g.Dp, g.bkv, tmp);
    mk.pack_panels(tmp, g.Dp, v, packs.v_ld, g.bkv, g.Dp);
    return;
  }
  tiled::pack_transposed(cv, p.k, b, hk, j0, nc, D, g.bkv, kt);
  tiled::pack_rows(cv, p.v, b, hk, j0, nc, D, g.Dp, g.bkv, v);
}

void forward_item(const Problem& p, const ForwardIO& io, const Microkernels& mk, const Geometry& g,
                  const ForwardPacks& packs, ForwardScratch& w, std::int64_t b, std::int64_t h,
                  std::int64_t qt, bool call_progress) {
  const int D = static_cast<int>(p.D), Dp = g.Dp, bkv = g.bkv;
  const std::int64_t hk = h / g.G;
  const std::int64_t i0 = g.q_begin(qt);
  const int nr = g.q_rows(qt);
  const float c2 = p.scale * tiled::kLog2e;
  const Converters& cv = converters(p.isa);
  const bool bf16 = packs.kt16 != nullptr;
  const int D2 = D + (D & 1);
  const std::int64_t pack_base = (b * p.H_kv + hk) * g.n_kt;

  for (int r = 0; r < nr; ++r) {
    prefetch_rows_ahead(p.q, b, i0, h, D, r, nr);
    float* dst = w.q.data() + static_cast<std::int64_t>(r) * D;
    load_row(cv, p.q, b, i0 + r, h, D, dst);
    if (!bf16)
      for (int d = 0; d < D; ++d) dst[d] *= c2;
  }
  if (bf16) mk.narrow_rows_bf16(w.q.data(), D, tiled::as_bf16(w.q16), D2, nr, D);  // exact
  std::fill(w.o.begin(), w.o.end(), 0.0f);
  std::fill(w.m.begin(), w.m.end(), kNegInf);
  std::fill(w.l.begin(), w.l.end(), 0.0f);

  for (std::int64_t t = 0; t < g.n_kt; ++t) {
    const std::int64_t j0 = g.kv_begin(t);
    const int nc = g.kv_rows(t);
    const TileClass cls = tiled::classify_tile(p, i0, nr, j0, nc);
    if (cls == TileClass::Empty) continue;

    float* S = w.s.data();
    if (bf16)  // raw scores (alpha 1: the AMX tiles store straight to S); c₂ goes into exp2's FMA
      mk.gemm_bf16(tiled::as_bf16(w.q16), D2, packs.kt16 + (pack_base + t) * packs.kt16_tile, 2 * bkv, S, bkv,
                   nr, bkv, D2, false, 1.0f);
    else
      tiled::gemm(mk, w.q.data(), D, {packs.kt_panel(g, b, hk, p.H_kv, t), packs.kt_ld, packs.panels}, S, bkv,
                  nr, bkv, D, false);
    if (cls == TileClass::Partial) {
      for (int r = 0; r < nr; ++r)
        tiled::mask_line(*p.mask, p.q_pos[i0 + r], p.kv_pos + j0, nc, bkv,
                         S + static_cast<std::int64_t>(r) * bkv, 1);
    } else if (nc < bkv) {
      for (int r = 0; r < nr; ++r)
        std::fill(S + static_cast<std::int64_t>(r) * bkv + nc, S + static_cast<std::int64_t>(r + 1) * bkv,
                  kNegInf);
    }
    std::uint16_t* P16 = bf16 ? tiled::as_bf16(w.p16) : nullptr;
    for (int r = 0; r < nr; ++r) {
      float* srow = S + static_cast<std::int64_t>(r) * bkv;
      const float m_row = mk.row_max(srow, bkv);
      // bf16: the scores are unscaled, and max(c₂·s) = c₂·max(s) exactly (c₂ > 0, rounding is monotone).
      const float m_tile = bf16 ? m_row * c2 : m_row;
      const float m_tile_nat = m_tile == kNegInf ? kNegInf : m_tile * tiled::kLn2;
      // The running max usually stops growing after a few tiles: then α = 1 and the state is
      // unchanged, so the scalar exp of the rescale is skipped.
      const float alpha = m_tile_nat > w.m[r] ? online_softmax_rescale(w.m[r], m_tile_nat) : 1.0f;
      if (w.m[r] == kNegInf) {  // nothing visible yet: P = 0, O and l stay 0
        if (bf16)
          std::fill(P16 + static_cast<std::int64_t>(r) * bkv, P16 + static_cast<std::int64_t>(r + 1) * bkv,
                    std::uint16_t{0});
        else
          std::fill(srow, srow + bkv, 0.0f);
        continue;
      }
      const float shift = w.m[r] * tiled::kLog2e;
      // bf16: P straight to bf16 in one pass, its sum from the fp32 values before rounding.
      const float sum = bf16 ? mk.probs_bf16(srow, bkv, c2, shift, P16 + static_cast<std::int64_t>(r) * bkv)
                             : mk.exp2_shift_sum(srow, bkv, shift);
      w.l[r] = w.l[r] * alpha + sum;
      if (alpha != 1.0f) mk.scale(w.o.data() + static_cast<std::int64_t>(r) * Dp, Dp, alpha);
    }
    if (bf16) {  // V rows ≥ nc are zero pairs
      mk.gemm_bf16(P16, bkv, packs.v16 + (pack_base + t) * packs.v16_tile, 2 * Dp, w.o.data(), Dp, nr, Dp,
                   nc + (nc & 1), true, 1.0f);
    } else {
      tiled::gemm(mk, S, bkv, {packs.v_panel(g, b, hk, p.H_kv, t), packs.v_ld, packs.panels}, w.o.data(), Dp,
                  nr, Dp, nc, true);
    }
    if (call_progress) (*p.progress)();
  }

  for (int r = 0; r < nr; ++r) {
    prefetch_rows_ahead(io.out, b, i0, h, D, r, nr);
    const float inv = online_softmax_inv_sum(w.l[r]);
    float* o = w.o.data() + static_cast<std::int64_t>(r) * Dp;
    store_row(cv, io.out, b, i0 + r, h, D, o, inv, false, o);  // o is its own scratch
    io.lse.data[b * io.lse.sb + h * io.lse.sh + (i0 + r) * io.lse.ss] = online_softmax_lse(w.m[r], w.l[r]);
  }
}

}  // namespace

void forward_tiled(const Problem& p, const ForwardIO& io) {
  if (p.B == 0 || p.H == 0 || p.S_q == 0) return;
  const Microkernels& mk = microkernels(p.isa);
  const Geometry g = tiled::make_geometry(p, mk, kForwardBq, kForwardBkv);
  if (p.S_kv == 0) {  // no keys: every row is fully masked
    std::vector<float> zeros(static_cast<std::size_t>(p.D), 0.0f);
    for (std::int64_t b = 0; b < p.B; ++b)
      for (std::int64_t s = 0; s < p.S_q; ++s)
        for (std::int64_t h = 0; h < p.H; ++h) {
          store_row(converters(p.isa), io.out, b, s, h, static_cast<int>(p.D), zeros.data(), 1.0f, false,
                    zeros.data());
          io.lse.data[b * io.lse.sb + h * io.lse.sh + s * io.lse.ss] = kNegInf;
        }
    return;
  }
  const bool bf16 = tiled::use_bf16_dot(mk, p.q.dtype);
  const int D = static_cast<int>(p.D);
  ForwardPacks packs;
  packs.panels = tiled::use_panels(mk, bf16);
  // fp32 packs for the fp32 GEMMs only (the bf16 path packs bf16 pairs straight from storage)
  packs.kt_tile = bf16 ? 0 : packs.panels ? tiled::panels_floats(mk, D, g.bkv) : p.D * g.bkv;
  packs.v_tile = bf16           ? 0
                 : packs.panels ? tiled::panels_floats(mk, g.bkv, g.Dp)
                                : static_cast<std::int64_t>(g.bkv) * g.Dp;
  packs.kt_ld = packs.panels ? tiled::panel_stride(mk, D) : g.bkv;
  packs.v_ld = packs.panels ? tiled::panel_stride(mk, g.bkv) : g.Dp;
  const std::int64_t n_pack = p.B * p.H_kv * g.n_kt;
  const std::int64_t n_items = p.B * p.H * g.n_qt;
  // One workspace block of the calling thread, reused across calls (kernels/workspace.h), taken
  // before the parallel region so an allocation failure throws in the caller's thread.
  packs.kt16_tile = bf16 ? (p.D + (p.D & 1)) * g.bkv : 0;
  packs.v16_tile = bf16 ? static_cast<std::int64_t>(g.bkv) * g.Dp : 0;
  WorkspacePlan plan;
  const WorkspaceSlot kt_slot = plan.add(static_cast<std::size_t>(n_pack * packs.kt_tile));
  const WorkspaceSlot v_slot = plan.add(static_cast<std::size_t>(n_pack * packs.v_tile));
  const WorkspaceSlot kt16_slot = plan.add(tiled::bf16_floats(n_pack * packs.kt16_tile));
  const WorkspaceSlot v16_slot = plan.add(tiled::bf16_floats(n_pack * packs.v16_tile));
  std::vector<ForwardScratch::Slots> slots;
  for (int t = 0; t < p.num_threads; ++t)
    slots.push_back(ForwardScratch::plan(plan, g, D, bf16, packs.panels));
  float* base = thread_workspace(plan.floats());
  packs.kt = slice(base, kt_slot);
  packs.v = slice(base, v_slot);
  if (bf16) {
    packs.kt16 = tiled::as_bf16(slice(base, kt16_slot));
    packs.v16 = tiled::as_bf16(slice(base, v16_slot));
  }
  std::vector<ForwardScratch> scratch;
  scratch.reserve(static_cast<std::size_t>(p.num_threads));
  for (const ForwardScratch::Slots& s : slots) scratch.emplace_back(base, s);

#pragma omp parallel num_threads(p.num_threads)
  {
    FlushDenormals ftz;
    ForwardScratch& w = scratch[static_cast<std::size_t>(omp_get_thread_num())];
#pragma omp for schedule(static)
    for (std::int64_t idx = 0; idx < n_pack; ++idx) pack_forward_tile(p, g, packs, idx, w.pack.data());

    const bool progress = p.progress != nullptr && *p.progress && omp_get_thread_num() == 0;
    if (progress) (*p.progress)();  // at least once per call, even if thread 0 gets no item
      // Dynamic: causal-like masks make late q-tiles heavier; items run last tile first so the
      // longest work starts early. The schedule never changes results (items are independent).
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t idx = 0; idx < n_items; ++idx) {
      const std::int64_t qt = g.n_qt - 1 - idx % g.n_qt, bh = idx / g.n_qt;
      forward_item(p, io, mk, g, packs, w, bh / p.H, bh % p.H, qt, progress);
    }
  }
}

}  // namespace burst::kernels
