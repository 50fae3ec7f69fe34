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
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/attention_tiled_backward_internal.h"
#include "kernels/kernels.h"
#include "kernels/microkernels.h"
#include "kernels/tiled_common.h"
#include "kernels/workspace.h"

namespace burst::kernels {
namespace {

using tiled::Geometry;
using tiled_backward::backward_item, tiled_backward::pack_q_side, tiled_backward::reduce_partials;
using tiled_backward::BackwardScratch, tiled_backward::Chunking, tiled_backward::Context,
    tiled_backward::QSide, tiled_backward::QSizes, tiled_backward::SharedQLayout;

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
