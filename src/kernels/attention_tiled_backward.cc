// Tiled (FlashAttention-2 style) attention backward — the fast twin of backward_reference.
//
// Work item = (b, kv-head hk, kv-chunk c): a fixed range of kv tiles whose dK/dV rows the item
// owns outright (no atomics). Inside, for every query head of the GQA group and every q tile
// with a non-Empty tile in the chunk, in the transposed orientation (kv rows × q columns, so
// per-query constants lse and delta are vectors across columns):
//   Sᵀ = K·Qᵀ; Partial tiles masked per element;  Pᵀ = exp2(c₂·Sᵀ − lse·log₂e)  [probs_t]
//   dPᵀ = V·dOᵀ;  dV += Pᵀ·dO;  dSᵀ = Pᵀ∘(dPᵀ − delta)  [dscores_t];  dK += dSᵀ·Q
//   dQᵀ_tile += Kᵀ·dSᵀ  (Kᵀ panels packed like the forward's, so dSᵀ is never transposed;
//   the dQᵀ tile is transposed once per q tile when written)
// (5 GEMMs per tile pair, P recomputed from the FINAL lse, so rows with lse = −inf give P = 0).
// Tables with gemm_packed (AVX2): the q-side B operands Qᵀ, dOᵀ, Q, dO are packed in column
// panels once per q tile and four of the five products run on them (dSᵀ, made per pair, stays
// row-major for dQᵀ += Kᵀ·dSᵀ).
// bf16 arithmetic (tiled::use_bf16_dot with q, k, v and dout all bf16): the five GEMMs run on
// vdpbf16ps with fp32 accumulators. K, V rows and Kᵀ are kept in bf16, the q-side operands
// pair-packed (Qᵀ, dOᵀ over D; Q, dO over q rows). Pᵀ and dSᵀ are computed in fp32 (dSᵀ from the
// fp32 Pᵀ) and rounded to bf16 only as GEMM operands, as FlashAttention-2 does; dK, dV and dQᵀ
// accumulate in fp32 and are rounded once when written.
// dQ: with NC = 1 chunk an item owns the dq rows of its heads and writes them directly. With
// NC > 1 each chunk writes its partial dQ to its own slot and a second pass sums the slots in
// chunk order. NC depends only on the shape (B·H_kv, n_kt, a memory cap), never on the thread
// count, so dq/dk/dv are bitwise identical for any number of threads.
// Why this split: per-(b, kv-head) ownership needs no recomputation (the two-pass dK/dV-then-dQ
// scheme recomputes S, P, dP: 7 GEMMs instead of 5). Chunking the kv range of long calls gives
// 32 items (two per thread on 16 cores; B = 1, H_kv = 8, S 4096 → NC = 4: 8 items left 16
// threads half idle, a 4.3× backward on a 16-core Xeon; see choose_chunks' constants) and bounds
// an item's live dK, dV, K, V, Kᵀ rows to a core's L2,
// at the price of NC partial dQ buffers (written in place by the dQᵀ transpose) and, had every
// chunk packed its q tiles, NC packings of each: 4-8 % of one thread's rate at S 4096. So with
// NC > 1 each (b, h, q tile)'s q-side operands (those tile_pair reads, and shift, delta) are
// packed once per call, in a parallel pass before the items, into a block every chunk's item
// reads (kQPackBytesCap; above it, and with NC = 1, an item packs into its thread's scratch).
// Measured on a loaded 2-core Xeon VM, one thread, B 1, H 8, D 64, S 4096 (NC = 4), shared
// packs against per-item packs alternated in one process, 7 pairs, thread CPU time: fp32 full
// 1.059× [0.98-1.15], causal 1.039× [0.92-1.28]; bf16 storage (fp32 arithmetic) full 1.074×
// [1.01-1.15], causal 1.064× [0.98-1.10]. Items are dealt chunk-major: under a causal mask the
// first kv chunks are the large ones, so the last small ones fill the threads' tails.
// Memory: packed K, Kᵀ, V (≈ 1.5× the size of k and v); per thread the q-tile packs, the score tiles and the
// dK/dV accumulators of one chunk (chunk rows × D × 2); NC > 1: NC·B·H·S_q·D floats of partials and
// the shared q-side packs (≈ 4·B·H·S_q·D floats; bf16 path ≈ 2·B·H·S_q·D: 32 MiB / 16 MiB at
// B 1, H 8, S 4096, D 64) — all in the calling thread's workspace (kernels/workspace.h), reused by
// the next call.
// Source: FlashAttention-2 (Dao 2023) Alg. 2; docs/algorithm.md §3, §5.
#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <span>
#include <utility>
#include <vector>

#include "burst/softmax_merge.h"
#include "kernels/kernels.h"
#include "kernels/microkernels.h"
#include "kernels/tiled_common.h"
#include "kernels/workspace.h"

namespace burst::kernels {
namespace {

using tiled::Geometry;

// bkv rows are the M of four of the five GEMMs: 96 = 16 blocks of 6 rows. bq = 64 columns is
// one 4-zmm chunk (the N of Sᵀ and dPᵀ) and a multiple of every vector width.
constexpr int kBackwardBq = 64;
constexpr int kBackwardBkv = 96;
// Panels path (AVX2, 6 × 2-ymm blocks): bq = 128 gives the dV and dK products K = 128 and Sᵀ,
// dPᵀ N = 128, halving the accumulator loads/stores per FMA; measured 1.2× bq = 64 on Zen 3
// (B 1, H 8, S 4096, D 64, full: medians of 3 interleaved runs 64.9 vs 53.7 GFLOP/s).
constexpr int kBackwardBqPanels = 128;
// Items for parallelism, fixed, never the thread count (results do not depend on it): at least
// kMinItems (a (b, kv-head) with few KV heads is cut into kv chunks of any length, as MQA needs),
// and kWantedItems — enough for 16 threads with two items each, dynamic scheduling evening out
// the causal chunks' unequal work — where that leaves chunks of kMinChunkRows or more: every
// chunk packs each q tile's operands again and writes a partial dQ, which a short chunk does not
// amortise (measured at one thread, S 1024, B·H_kv = 8, chunks of 288 rows: 10-14 % of the
// rate). So the ring's backward calls at S/(2P) kv rows (1024 at S 32768, P 16) stay uncut.
constexpr std::int64_t kMinItems = 8, kWantedItems = 32, kMinChunkRows = 1024;
// Most kv rows per chunk: an item keeps its chunk's dK, dV accumulators and packed K, V, Kᵀ live
// while it sweeps every q tile (5 · rows · D · 4 bytes: 1.3 MB at 1024 rows, D 64), which must
// stay in a core's L2 or the sweep streams them from L3 once per q tile.
constexpr std::int64_t kMaxChunkRows = 1024;
// Cap on the partial-dQ buffers of the chunked path (bytes).
constexpr std::int64_t kPartialBytesCap = std::int64_t{512} << 20;
// Cap on the q-side packs the chunks of a chunked call share (bytes; about 16·B·H·S_q·D fp32,
// 8·B·H·S_q·D bf16): above it every item packs its q tiles itself.
constexpr std::int64_t kQPackBytesCap = std::int64_t{512} << 20;

struct Chunking {
  std::int64_t n_chunks = 1, tiles_per_chunk = 1;
};

Chunking choose_chunks(const Problem& p, const Geometry& g) {
  Chunking c;
  const std::int64_t base = p.B * p.H_kv;
  const std::int64_t rows = p.S_kv;
  const auto per_base = [base](std::int64_t items) { return (items + base - 1) / base; };
  const std::int64_t long_chunks = std::max<std::int64_t>(1, rows / kMinChunkRows);
  std::int64_t nc = std::max({per_base(kMinItems), std::min(per_base(kWantedItems), long_chunks),
                              (rows + kMaxChunkRows - 1) / kMaxChunkRows});
  nc = std::min(nc, g.n_kt);
  const std::int64_t partial_bytes = p.B * p.H * p.S_q * g.Dp * 4;
  while (nc > 1 && nc * partial_bytes > kPartialBytesCap) --nc;
  nc = std::max<std::int64_t>(nc, 1);
  c.tiles_per_chunk = (g.n_kt + nc - 1) / nc;
  c.n_chunks = (g.n_kt + c.tiles_per_chunk - 1) / c.tiles_per_chunk;
  return c;
}

// The q-side operands of one (b, h, q tile), read by every tile pair of the q tile: fp32 Qᵀ,
// dOᵀ over D and Q, dO over q rows (in column panels on the panels path), their bf16 pair packs
// on the bf16 path (bf16 elements), and per column the shift lse·log₂e and delta.
struct QSide {
  float *qt = nullptr, *dot = nullptr, *qp = nullptr, *dop = nullptr, *shift = nullptr, *delta = nullptr;
  float *qt2 = nullptr, *dot2 = nullptr, *qp2 = nullptr, *dop2 = nullptr;
};

// Floats of each q-side array (bf16 arrays: n/2 floats; zero where the path does not use it).
struct QSizes {
  std::size_t qt = 0, qp = 0, qt2 = 0, qp2 = 0, bq = 0;
  QSizes(const Microkernels& mk, const Geometry& g, int D, bool bf16, bool panels) {
    const auto bqn = static_cast<std::size_t>(g.bq), Dp = static_cast<std::size_t>(g.Dp);
    const auto Dn = static_cast<std::size_t>(D);
    qt = panels ? static_cast<std::size_t>(tiled::panels_floats(mk, D, g.bq)) : Dn * bqn;
    qp = panels ? static_cast<std::size_t>(tiled::panels_floats(mk, g.bq, g.Dp)) : bqn * Dp;
    qt2 = bf16 ? (Dn + (Dn & 1)) * bqn / 2 : 0;
    qp2 = bf16 ? bqn * Dp / 2 : 0;
    bq = bqn;
  }
};

// One (b, h, q tile)'s block of the shared q-side packs: the operands tile_pair reads (the bf16
// pair packs on the bf16 path, else the fp32 ones), shift and delta.
struct SharedQLayout {
  std::array<WorkspaceSlot, 6> slots;  // qt, dot, qp, dop (or their bf16 packs), shift, delta
  std::size_t floats = 0;
  SharedQLayout(const QSizes& n, bool bf16) {
    WorkspacePlan plan;
    std::size_t i = 0;
    for (std::size_t len :
         {bf16 ? n.qt2 : n.qt, bf16 ? n.qt2 : n.qt, bf16 ? n.qp2 : n.qp, bf16 ? n.qp2 : n.qp, n.bq, n.bq})
      slots[i++] = plan.add(len);
    floats = plan.floats();
  }
  // The block at `base`; on the bf16 path the fp32 packs the bf16 ones are made from stay in `w`.
  QSide at(float* base, const QSide& w, bool bf16) const {
    QSide q = w;
    float** fields[4] = {&q.qt, &q.dot, &q.qp, &q.dop};
    float** fields2[4] = {&q.qt2, &q.dot2, &q.qp2, &q.dop2};
    for (std::size_t i = 0; i < 4; ++i) *(bf16 ? fields2 : fields)[i] = base + slots[i].offset;
    q.shift = base + slots[4].offset;
    q.delta = base + slots[5].offset;
    return q;
  }
};

// Per-thread scratch: slices of the calling thread's workspace (kernels/workspace.h).
struct BackwardScratch {
  std::span<float> qt, qp, dot, dop, shift, delta, dqt, dq, st, dpt, dk, dv;
  // bf16 path (bf16 elements): Qᵀ, dOᵀ pair-packed over D [D2/2][bq][2]; Q, dO pair-packed over
  // q rows [bq/2][Dp][2]; Pᵀ then dSᵀ rows [bkv][bq]; dSᵀ pair-packed over kv rows [bkv/2][bq][2].
  std::span<float> qt2, dot2, qp2, dop2, p16, ds2;
  // Panels (tiled::use_panels): qt, dot, qp, dop hold their operands in column panels, packed
  // through this row-major tile.
  std::span<float> pack;
  std::vector<std::pair<std::int64_t, TileClass>> live;
  static constexpr std::size_t kArrays = 19;
  using Slots = std::array<WorkspaceSlot, kArrays>;
  static Slots plan(WorkspacePlan& plan, const QSizes& q, const Geometry& g, int D, std::int64_t chunk_rows,
                    bool panels) {
    const auto bq = static_cast<std::size_t>(g.bq), bkv = static_cast<std::size_t>(g.bkv);
    const auto Dp = static_cast<std::size_t>(g.Dp), Dn = static_cast<std::size_t>(D);
    const auto rows = static_cast<std::size_t>(chunk_rows);
    const std::size_t h = q.qt2 > 0 ? 1 : 0;  // bf16 path
    const std::size_t n[kArrays] = {
        q.qt,                 // qt
        q.qp,                 // qp
        q.qt,                 // dot
        q.qp,                 // dop
        bq,                   // shift
        bq,                   // delta
        Dn * bq,              // dqt
        bq * Dp,              // dq
        bkv * bq,             // st
        bkv * bq,             // dpt
        rows * Dp,            // dk
        rows * Dp,            // dv
        q.qt2,                // qt2
        q.qt2,                // dot2
        q.qp2,                // qp2
        q.qp2,                // dop2
        h * bkv * bq / 2,     // p16
        h * bkv * bq / 2,     // ds2
        panels ? bq * Dp : 0  // pack
    };
    Slots slots;
    for (std::size_t i = 0; i < kArrays; ++i) slots[i] = plan.add(n[i]);
    return slots;
  }
  BackwardScratch(float* base, const Slots& slots) {
    std::span<float>* arrays[kArrays] = {&qt, &qp, &dot, &dop,  &shift, &delta, &dqt, &dq,  &st,  &dpt,
                                         &dk, &dv, &qt2, &dot2, &qp2,   &dop2,  &p16, &ds2, &pack};
    for (std::size_t i = 0; i < kArrays; ++i) *arrays[i] = slice(base, slots[i]);
  }
  // The q-side arrays of this thread (an item packs into them when the packs are not shared).
  QSide own() {
    return {qt.data(),    dot.data(), qp.data(),   dop.data(), shift.data(),
            delta.data(), qt2.data(), dot2.data(), qp2.data(), dop2.data()};
  }
};

struct Context {
  const Problem& p;
  const BackwardIO& io;
  const Microkernels& mk;
  const Converters& cv;
  const Geometry& g;  // backward_tiled's, which outlives the context (not copied: it holds the tile starts)
  Chunking ch;
  const float* kpack;  // [B][H_kv][n_kt][bkv][Dp]
  const float* vpack;
  const float* ktpack;  // [B][H_kv][n_kt][D][bkv]
  float* partial;       // [n_chunks][B][H][S_q][Dp] when n_chunks > 1
  std::int64_t tile_elems;
  // bf16 path only (else null): K, V rows [bkv][D2] and Kᵀ rows [D][bkv] per tile, in bf16.
  const std::uint16_t* k16 = nullptr;
  const std::uint16_t* v16 = nullptr;
  const std::uint16_t* kt16 = nullptr;
  std::int64_t kv16_tile = 0, kt16_tile = 0;
  // Panels (tiled::use_panels): the q-side B operands' panel strides (Qᵀ, dOᵀ: D rows; Q, dO: bq
  // rows); else their row strides.
  bool panels = false;
  std::int64_t qt_ld = 0, qp_ld = 0;
  // Shared q-side packs (chunked calls under kQPackBytesCap), else null: [B][H][n_qt] blocks.
  float* qshared = nullptr;
  const SharedQLayout* qlayout = nullptr;
};

std::uint16_t* bf16_of(float* p) { return reinterpret_cast<std::uint16_t*>(p); }

// Final fp32 rows → dst (rounded once to dst's dtype). src rows are scratch afterwards.
void write_rows(const Converters& cv, const MutOperand& dst, std::int64_t b, std::int64_t s0, std::int64_t h,
                int rows, int D, float* src, int Dp, float mul, bool accumulate) {
  for (int r = 0; r < rows; ++r) {
    float* s = src + static_cast<std::int64_t>(r) * Dp;
    store_row(cv, dst, b, s0 + r, h, D, s, mul, accumulate, s);
  }
}

// Packs the q-side operands of (b, h, q tile at i0 with nr rows) into q (w.pack: the panels' row-major tile).
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

// dq[b, s, h] (+)= scale · Σ_c partial[c, b, h, s] in chunk order.
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

}  // namespace

void backward_tiled(const Problem& p, const BackwardIO& io) {
  if (p.B == 0 || p.H == 0) return;
  const Microkernels& mk = microkernels(p.isa);
  const bool bf16 = tiled::use_bf16_dot(mk, p.q.dtype) && io.dout.dtype == DType::BF16;
  const bool panels = tiled::use_panels(mk, bf16);
  const Geometry g = tiled::make_geometry(p, mk, panels ? kBackwardBqPanels : kBackwardBq, kBackwardBkv);
  if (p.S_kv == 0) {  // no keys: dq gets nothing; dk, dv are empty
    std::vector<float> zeros(static_cast<std::size_t>(p.D), 0.0f);
    if (!io.accumulate)
      for (std::int64_t b = 0; b < p.B; ++b)
        for (std::int64_t s = 0; s < p.S_q; ++s)
          for (std::int64_t h = 0; h < p.H; ++h)
            store_row(converters(p.isa), io.dq, b, s, h, static_cast<int>(p.D), zeros.data(), 1.0f, false,
                      zeros.data());
    return;
  }
  const Chunking ch = choose_chunks(p, g);
  const std::int64_t tile_elems = static_cast<std::int64_t>(g.bkv) * g.Dp;
  const std::int64_t n_pack = p.B * p.H_kv * g.n_kt;
  const auto pack_floats = static_cast<std::size_t>(n_pack * tile_elems);
  const auto kt_floats = static_cast<std::size_t>(n_pack * p.D * g.bkv);
  const auto partial_floats =
      ch.n_chunks > 1 ? static_cast<std::size_t>(ch.n_chunks * p.B * p.H * p.S_q * g.Dp) : std::size_t{0};
  const std::int64_t chunk_rows = ch.tiles_per_chunk * g.bkv;
  const int D = static_cast<int>(p.D);
  const std::int64_t D2 = p.D + (p.D & 1);
  const std::int64_t kv16_tile = bf16 ? g.bkv * D2 : 0, kt16_tile = bf16 ? p.D * g.bkv : 0;
  // One workspace block of the calling thread, reused across calls (kernels/workspace.h), taken
  // before the parallel region so an allocation failure throws in the caller's thread.
  WorkspacePlan plan;
  const WorkspaceSlot k_slot = plan.add(pack_floats), v_slot = plan.add(pack_floats);
  const WorkspaceSlot kt_slot = plan.add(kt_floats), partial_slot = plan.add(partial_floats);
  const WorkspaceSlot k16_slot = plan.add(tiled::bf16_floats(n_pack * kv16_tile));
  const WorkspaceSlot v16_slot = plan.add(tiled::bf16_floats(n_pack * kv16_tile));
  const WorkspaceSlot kt16_slot = plan.add(tiled::bf16_floats(n_pack * kt16_tile));
  // Chunked calls share each q tile's packs between their chunks' items (packed once per call,
  // not once per chunk) where they fit under the cap.
  const QSizes q_sizes(mk, g, D, bf16, panels);
  const SharedQLayout q_layout(q_sizes, bf16);
  const std::int64_t n_qpack = p.B * p.H * g.n_qt;
  const auto q_pack_floats = static_cast<std::size_t>(n_qpack) * q_layout.floats;
  const std::int64_t q_pack_cap = p.backward_q_pack_cap < 0 ? kQPackBytesCap : p.backward_q_pack_cap;
  const bool share_q = ch.n_chunks > 1 && static_cast<std::int64_t>(q_pack_floats * 4) <= q_pack_cap;
  const WorkspaceSlot qshared_slot = plan.add(share_q ? q_pack_floats : 0);
  std::vector<BackwardScratch::Slots> slots;
  for (int t = 0; t < p.num_threads; ++t)
    slots.push_back(BackwardScratch::plan(plan, q_sizes, g, D, chunk_rows, panels));
  float* base = thread_workspace(plan.floats());
  const std::span<float> kpack = slice(base, k_slot), vpack = slice(base, v_slot),
                         ktpack = slice(base, kt_slot);
  Context cx{p,         io,           mk,           converters(p.isa), g,
             ch,        kpack.data(), vpack.data(), ktpack.data(),     slice(base, partial_slot).data(),
             tile_elems};
  std::uint16_t* k16 = bf16 ? tiled::as_bf16(slice(base, k16_slot)) : nullptr;
  std::uint16_t* v16 = bf16 ? tiled::as_bf16(slice(base, v16_slot)) : nullptr;
  std::uint16_t* kt16 = bf16 ? tiled::as_bf16(slice(base, kt16_slot)) : nullptr;
  cx.k16 = k16;
  cx.v16 = v16;
  cx.kt16 = kt16;
  cx.kv16_tile = kv16_tile;
  cx.kt16_tile = kt16_tile;
  cx.panels = panels;
  cx.qt_ld = panels ? tiled::panel_stride(mk, D) : g.bq;
  cx.qp_ld = panels ? tiled::panel_stride(mk, g.bq) : g.Dp;
  cx.qshared = share_q ? slice(base, qshared_slot).data() : nullptr;
  cx.qlayout = &q_layout;
  const std::int64_t n_items = p.B * p.H_kv * ch.n_chunks;
  const std::int64_t n_rows = p.B * p.H * p.S_q;
  std::vector<BackwardScratch> scratch;
  scratch.reserve(static_cast<std::size_t>(p.num_threads));
  for (const BackwardScratch::Slots& s : slots) scratch.emplace_back(base, s);

#pragma omp parallel num_threads(p.num_threads)
  {
    FlushDenormals ftz;
#pragma omp for schedule(static)
    for (std::int64_t idx = 0; idx < n_pack; ++idx) {
      const std::int64_t t = idx % g.n_kt, bh = idx / g.n_kt;
      const std::int64_t j0 = g.kv_begin(t);
      const int nc = g.kv_rows(t);
      tiled::pack_rows(cx.cv, p.k, bh / p.H_kv, bh % p.H_kv, j0, nc, D, g.Dp, g.bkv,
                       kpack.data() + idx * tile_elems);
      tiled::pack_rows(cx.cv, p.v, bh / p.H_kv, bh % p.H_kv, j0, nc, D, g.Dp, g.bkv,
                       vpack.data() + idx * tile_elems);
      tiled::pack_transposed(cx.cv, p.k, bh / p.H_kv, bh % p.H_kv, j0, nc, D, g.bkv,
                             ktpack.data() + idx * p.D * g.bkv);
      if (bf16) {  // exact: the fp32 packs hold widened bf16
        mk.narrow_rows_bf16(kpack.data() + idx * tile_elems, g.Dp, k16 + idx * kv16_tile, D2, g.bkv, D);
        mk.narrow_rows_bf16(vpack.data() + idx * tile_elems, g.Dp, v16 + idx * kv16_tile, D2, g.bkv, D);
        mk.narrow_rows_bf16(ktpack.data() + idx * p.D * g.bkv, g.bkv, kt16 + idx * kt16_tile, g.bkv, D,
                            g.bkv);
      }
    }
    BackwardScratch& w = scratch[static_cast<std::size_t>(omp_get_thread_num())];
    if (share_q) {
#pragma omp for schedule(static)
      for (std::int64_t idx = 0; idx < n_qpack; ++idx) {
        const std::int64_t qt = idx % g.n_qt, bh = idx / g.n_qt;
        const QSide q = q_layout.at(cx.qshared + idx * q_layout.floats, w.own(), bf16);
        pack_q_side(cx, w, q, bh / p.H, bh % p.H, g.q_begin(qt), g.q_rows(qt));
      }
    }
    const bool progress = p.progress != nullptr && *p.progress && omp_get_thread_num() == 0;
    if (progress) (*p.progress)();  // at least once per call, even if thread 0 gets no item
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t idx = 0; idx < n_items; ++idx) {
      // Chunk-major: the first kv chunks (under a causal mask the ones with the most queries)
      // are dealt first, so the small last ones fill the threads' tails.
      const std::int64_t chunk = idx / (p.B * p.H_kv), bh = idx % (p.B * p.H_kv);
      backward_item(cx, w, bh / p.H_kv, bh % p.H_kv, chunk, progress);
    }
    if (ch.n_chunks > 1) {
#pragma omp for schedule(static)
      for (std::int64_t row = 0; row < n_rows; ++row) reduce_partials(cx, row);
    }
  }
}

}  // namespace burst::kernels
