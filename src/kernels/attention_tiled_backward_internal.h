// src/kernels/attention_tiled_backward_internal.h — the tiled backward's shared pieces
// (internal to attention_tiled_backward.cc and attention_tiled_backward_item.cc).
//
// Owns: the call's context (problem, packs, chunking, shared q-side packs), the per-thread
// scratch and the q-side operand layout, and the work of one item (b, kv-head, kv chunk), which
// backward_tiled (attention_tiled_backward.cc) deals to its threads. The algorithm, the split into
// items and the memory are described at the top of attention_tiled_backward.cc.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/microkernels.h"
#include "kernels/tiled_common.h"
#include "kernels/workspace.h"

namespace burst::kernels::tiled_backward {

using tiled::Geometry;

// Kv chunks of a call: n_chunks chunks of tiles_per_chunk kv tiles (the last may be shorter).
struct Chunking {
  std::int64_t n_chunks = 1, tiles_per_chunk = 1;
};

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

// Packs the q-side operands of (b, h, q tile at i0 with nr rows) into q (w.pack: the panels'
// row-major tile).
void pack_q_side(const Context& cx, BackwardScratch& w, const QSide& q, std::int64_t b, std::int64_t h,
                 std::int64_t i0, int nr);

// One item: every q tile of every query head of KV head hk against kv chunk `chunk`'s tiles;
// writes the chunk's dK, dV rows, and dQ (NC = 1) or the chunk's partial dQ rows (NC > 1).
void backward_item(const Context& cx, BackwardScratch& w, std::int64_t b, std::int64_t hk, std::int64_t chunk,
                   bool call_progress);

// dq[b, s, h] (+)= scale · Σ_c partial[c, b, h, s] in chunk order (row = (b·H + h)·S_q + s).
void reduce_partials(const Context& cx, std::int64_t row);

}  // namespace burst::kernels::tiled_backward
