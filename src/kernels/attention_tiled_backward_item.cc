// The tiled backward's work item (attention_tiled_backward_internal.h): the q-side packs, the
// five products of one (kv tile, q tile) pair on fp32 or bf16 operands, one (b, kv-head, kv
// chunk) item and the chunk-order sum of the partial dQ rows. The algorithm is described at the
// top of attention_tiled_backward.cc.
#include <algorithm>
#include <cstdint>
#include <limits>

#include "burst/softmax_merge.h"
#include "kernels/attention_tiled_backward_internal.h"

namespace burst::kernels::tiled_backward {
namespace {

std::uint16_t* bf16_of(float* p) { return reinterpret_cast<std::uint16_t*>(p); }

// Final fp32 rows → dst (rounded once to dst's dtype). src rows are scratch afterwards.
void write_rows(const Converters& cv, const MutOperand& dst, std::int64_t b, std::int64_t s0, std::int64_t h,
                int rows, int D, float* src, int Dp, float mul, bool accumulate) {
  for (int r = 0; r < rows; ++r) {
    prefetch_rows_ahead(dst, b, s0, h, D, r, rows);
    float* s = src + static_cast<std::int64_t>(r) * Dp;
    store_row(cv, dst, b, s0 + r, h, D, s, mul, accumulate, s);
  }
}

}  // namespace

void pack_q_side(const Context& cx, BackwardScratch& w, const QSide& q, std::int64_t b, std::int64_t h,
                 std::int64_t i0, int nr) {
  const Problem& p = cx.p;
  const int D = static_cast<int>(p.D), bq = cx.g.bq, Dp = cx.g.Dp;
  if (cx.panels) {  // row-major through w.pack, then into panels
    float* tmp = w.pack.data();
    tiled::pack_transposed(cx.cv, p.q, b, h, i0, nr, D, bq, tmp);
    cx.mk.pack_panels(tmp, bq, q.qt, cx.qt_ld, D, bq);
    tiled::pack_transposed(cx.cv, cx.io.dout, b, h, i0, nr, D, bq, tmp);
    cx.mk.pack_panels(tmp, bq, q.dot, cx.qt_ld, D, bq);
    tiled::pack_rows(cx.cv, p.q, b, h, i0, nr, D, Dp, bq, tmp);
    cx.mk.pack_panels(tmp, Dp, q.qp, cx.qp_ld, bq, Dp);
    tiled::pack_rows(cx.cv, cx.io.dout, b, h, i0, nr, D, Dp, bq, tmp);
    cx.mk.pack_panels(tmp, Dp, q.dop, cx.qp_ld, bq, Dp);
  } else {
    tiled::pack_transposed(cx.cv, p.q, b, h, i0, nr, D, bq, q.qt);
    tiled::pack_transposed(cx.cv, cx.io.dout, b, h, i0, nr, D, bq, q.dot);
    tiled::pack_rows(cx.cv, p.q, b, h, i0, nr, D, Dp, bq, q.qp);
    tiled::pack_rows(cx.cv, cx.io.dout, b, h, i0, nr, D, Dp, bq, q.dop);
  }
  if (cx.k16 != nullptr) {  // exact: the fp32 values are widened bf16
    cx.mk.pack_pairs_bf16(q.qt, bq, bf16_of(q.qt2), 2 * bq, D, bq);
    cx.mk.pack_pairs_bf16(q.dot, bq, bf16_of(q.dot2), 2 * bq, D, bq);
    cx.mk.pack_pairs_bf16(q.qp, Dp, bf16_of(q.qp2), 2 * Dp, bq, Dp);
    cx.mk.pack_pairs_bf16(q.dop, Dp, bf16_of(q.dop2), 2 * Dp, bq, Dp);
  }
  for (int c = 0; c < bq; ++c) {
    float shift = std::numeric_limits<float>::infinity(), delta = 0.0f;
    if (c < nr) {
      const std::int64_t s = i0 + c;
      const float lse = cx.io.lse.data[b * cx.io.lse.sb + h * cx.io.lse.sh + s * cx.io.lse.ss];
      if (lse != kNegInf) shift = lse * tiled::kLog2e;
      delta = cx.io.delta.data[b * cx.io.delta.sb + h * cx.io.delta.sh + s * cx.io.delta.ss];
    }
    q.shift[c] = shift;
    q.delta[c] = delta;
  }
}

namespace {

// tile_pair on vdpbf16ps (header comment): the same five products, bf16 operands, fp32 results.
void tile_pair_bf16(const Context& cx, BackwardScratch& w, const QSide& q, std::int64_t panel, TileClass cls,
                    std::int64_t j0, int nc, std::int64_t i0, int nr, float* dk, float* dv) {
  const Problem& p = cx.p;
  const Microkernels& mk = cx.mk;
  const int D = static_cast<int>(p.D), D2 = D + (D & 1), bq = cx.g.bq, bkv = cx.g.bkv, Dp = cx.g.Dp;
  const int nr2 = nr + (nr & 1), nc2 = nc + (nc & 1);  // pair counts: the partner row/column is zero
  const std::uint16_t* K = cx.k16 + panel * cx.kv16_tile;
  const std::uint16_t* V = cx.v16 + panel * cx.kv16_tile;
  const std::uint16_t* KT = cx.kt16 + panel * cx.kt16_tile;
  std::uint16_t* P16 = tiled::as_bf16(w.p16);
  std::uint16_t* dS2 = tiled::as_bf16(w.ds2);
  float* st = w.st.data();

  mk.gemm_bf16(K, D2, bf16_of(q.qt2), 2 * bq, st, bq, nc, bq, D2, false, 1.0f);  // Sᵀ [nc × bq]
  if (cls == TileClass::Partial) {
    for (int c = 0; c < nr; ++c)
      tiled::mask_line(*p.mask, p.q_pos[i0 + c], p.kv_pos + j0, nc, nc, st + c, bq);
  }
  mk.probs_t(st, bq, nc, bq, p.scale * tiled::kLog2e, q.shift);                             // Pᵀ (fp32)
  mk.gemm_bf16(V, D2, bf16_of(q.dot2), 2 * bq, w.dpt.data(), bq, nc, bq, D2, false, 1.0f);  // dPᵀ
  mk.narrow_rows_bf16(st, bq, P16, bq, nc, bq);
  mk.gemm_bf16(P16, bq, bf16_of(q.dop2), 2 * Dp, dv, Dp, nc, Dp, nr2, true, 1.0f);  // dV += Pᵀ·dO
  mk.dscores_t(st, w.dpt.data(), bq, nc, bq, q.delta);                              // dSᵀ (fp32)
  mk.narrow_rows_bf16(st, bq, P16, bq, nc, bq);
  mk.gemm_bf16(P16, bq, bf16_of(q.qp2), 2 * Dp, dk, Dp, nc, Dp, nr2, true, 1.0f);  // dK += dSᵀ·Q
  mk.pack_pairs_bf16(st, bq, dS2, 2 * bq, nc, bq);
  mk.gemm_bf16(KT, bkv, dS2, 2 * bq, w.dqt.data(), bq, D, bq, nc2, true, 1.0f);  // dQᵀ += Kᵀ·dSᵀ
}

// All five products of one (kv tile t, q tile) pair; accumulates into w.dk/w.dv rows of tile t
// and into w.dqt (dQᵀ).
void tile_pair(const Context& cx, BackwardScratch& w, const QSide& q, std::int64_t b, std::int64_t hk,
               std::int64_t kt0, std::int64_t t, TileClass cls, std::int64_t i0, int nr) {
  const Problem& p = cx.p;
  const Microkernels& mk = cx.mk;
  const int D = static_cast<int>(p.D), bq = cx.g.bq, bkv = cx.g.bkv, Dp = cx.g.Dp;
  const std::int64_t j0 = cx.g.kv_begin(t);
  const int nc = cx.g.kv_rows(t);
  const std::int64_t panel = ((b * p.H_kv + hk) * cx.g.n_kt + t) * cx.tile_elems;
  const float* K = cx.kpack + panel;
  const float* V = cx.vpack + panel;
  const float* KT = cx.ktpack + ((b * p.H_kv + hk) * cx.g.n_kt + t) * p.D * bkv;
  float* dk = w.dk.data() + (t - kt0) * bkv * Dp;
  float* dv = w.dv.data() + (t - kt0) * bkv * Dp;
  float* st = w.st.data();
  if (cx.k16 != nullptr) {
    tile_pair_bf16(cx, w, q, (b * p.H_kv + hk) * cx.g.n_kt + t, cls, j0, nc, i0, nr, dk, dv);
    return;
  }

  const tiled::BOperand QT{q.qt, cx.qt_ld, cx.panels}, dOT{q.dot, cx.qt_ld, cx.panels};
  const tiled::BOperand Q{q.qp, cx.qp_ld, cx.panels}, dO{q.dop, cx.qp_ld, cx.panels};
  tiled::gemm(mk, K, Dp, QT, st, bq, nc, bq, D, false);  // Sᵀ [nc × bq]
  if (cls == TileClass::Partial) {
    for (int c = 0; c < nr; ++c)
      tiled::mask_line(*p.mask, p.q_pos[i0 + c], p.kv_pos + j0, nc, nc, st + c, bq);
  }
  mk.probs_t(st, bq, nc, bq, p.scale * tiled::kLog2e, q.shift);     // Pᵀ
  tiled::gemm(mk, V, Dp, dOT, w.dpt.data(), bq, nc, bq, D, false);  // dPᵀ
  tiled::gemm(mk, st, bq, dO, dv, Dp, nc, Dp, nr, true);            // dV += Pᵀ·dO
  mk.dscores_t(st, w.dpt.data(), bq, nc, bq, q.delta);              // dSᵀ
  tiled::gemm(mk, st, bq, Q, dk, Dp, nc, Dp, nr, true);             // dK += dSᵀ·Q
  mk.gemm(KT, bkv, st, bq, w.dqt.data(), bq, D, bq, nc, true);      // dQᵀ += Kᵀ·dSᵀ
}

}  // namespace

void backward_item(const Context& cx, BackwardScratch& w, std::int64_t b, std::int64_t hk, std::int64_t chunk,
                   bool call_progress) {
  const Problem& p = cx.p;
  const Geometry& g = cx.g;
  const int D = static_cast<int>(p.D), Dp = g.Dp;
  const std::int64_t kt0 = chunk * cx.ch.tiles_per_chunk;
  const std::int64_t kt1 = std::min(g.n_kt, kt0 + cx.ch.tiles_per_chunk);
  std::fill(w.dk.begin(), w.dk.end(), 0.0f);
  std::fill(w.dv.begin(), w.dv.end(), 0.0f);

  for (int gi = 0; gi < g.G; ++gi) {
    const std::int64_t h = hk * g.G + gi;
    for (std::int64_t qt = 0; qt < g.n_qt; ++qt) {
      const std::int64_t i0 = g.q_begin(qt);
      const int nr = g.q_rows(qt);
      w.live.clear();
      for (std::int64_t t = kt0; t < kt1; ++t) {
        const std::int64_t j0 = g.kv_begin(t);
        const int nc = g.kv_rows(t);
        const TileClass cls = tiled::classify_tile(p, i0, nr, j0, nc);
        if (cls != TileClass::Empty) w.live.emplace_back(t, cls);
      }
      // NC > 1: this chunk's partial dQ rows, written in place (zero where no tile is live).
      float* partial =
          cx.ch.n_chunks == 1 ? nullptr : cx.partial + (((chunk * p.B + b) * p.H + h) * p.S_q + i0) * Dp;
      if (partial != nullptr && w.live.empty()) {
        std::fill(partial, partial + static_cast<std::int64_t>(nr) * Dp, 0.0f);
        continue;
      }
      std::fill(w.dqt.begin(), w.dqt.end(), 0.0f);
      if (!w.live.empty()) {
        QSide q = w.own();
        if (cx.qshared != nullptr) {
          q = cx.qlayout->at(cx.qshared + ((b * p.H + h) * g.n_qt + qt) * cx.qlayout->floats, q,
                             cx.k16 != nullptr);
        } else {
          pack_q_side(cx, w, q, b, h, i0, nr);
        }
        for (const auto& [t, cls] : w.live) {
          tile_pair(cx, w, q, b, hk, kt0, t, cls, i0, nr);
          if (call_progress) (*p.progress)();
        }
      }
      // dQᵀ [D × bq] → dQ [nr × Dp]
      cx.mk.transpose(w.dqt.data(), g.bq, partial != nullptr ? partial : w.dq.data(), Dp, D, nr);
      if (partial == nullptr)
        write_rows(cx.cv, cx.io.dq, b, i0, h, nr, D, w.dq.data(), Dp, p.scale, cx.io.accumulate);
    }
  }
  for (std::int64_t t = kt0; t < kt1; ++t) {
    const std::int64_t j0 = g.kv_begin(t);
    const int nc = g.kv_rows(t);
    const std::int64_t off = (t - kt0) * g.bkv * Dp;
    write_rows(cx.cv, cx.io.dk, b, j0, hk, nc, D, w.dk.data() + off, Dp, p.scale, cx.io.accumulate);
    write_rows(cx.cv, cx.io.dv, b, j0, hk, nc, D, w.dv.data() + off, Dp, 1.0f, cx.io.accumulate);
  }
}

void reduce_partials(const Context& cx, std::int64_t row) {
  const Problem& p = cx.p;
  const int D = static_cast<int>(p.D), Dp = cx.g.Dp;
  const std::int64_t s = row % p.S_q, bh = row / p.S_q;
  const std::int64_t b = bh / p.H, h = bh % p.H;
  float sum[256];  // D ≤ 256 (attention.h precondition)
  std::fill(sum, sum + D, 0.0f);
  for (std::int64_t c = 0; c < cx.ch.n_chunks; ++c) {
    const float* src = cx.partial + (((c * p.B + b) * p.H + h) * p.S_q + s) * Dp;
    for (int j = 0; j < D; ++j) sum[j] += src[j];
  }
  write_rows(cx.cv, cx.io.dq, b, s, h, 1, D, sum, Dp, p.scale, cx.io.accumulate);
}

}  // namespace burst::kernels::tiled_backward
