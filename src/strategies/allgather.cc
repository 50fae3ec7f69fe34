// Llama-3 all-gather context parallelism (arXiv 2407.21783 §3.3; docs/strategies.md): all-gather K,V,
// one local kernel call of the rank's queries against the whole sequence (one softmax per row,
// no cross-step merge), and in the backward all-gather K,V again, compute dK,dV for the whole
// gathered sequence (one kernel call per gathered rank block) and reduce-scatter them to their
// owners; dQ stays local. On a device that prefers whole-shaped steps (a GPU) the calls against
// the gathered sequence are cut into cuDNN's bands (strategies/shaped_steps.h; at P = 1 the one
// call over the whole sequence is one already).
// Memory: the gathered K,V (2·B·S_global·H_kv·D) — by design this strategy holds the whole K/V.
// Bytes per rank: forward e·(P−1)·2·b_kv; backward e·(P−1)·2·b_kv + 4·(P−1)·2·b_kv: K, V travel
// in their storage dtype (e = 2 bytes for bf16/f16, 4 for f32), the dK, dV partials in fp32 (the
// reduce-scatter sums them: never rounded to 16 bits before the end).
#include <chrono>
#include <cstdint>
#include <numeric>
#include <vector>

#include "burst/error.h"
#include "burst/softmax_merge.h"
#include "strategies/planned_strategy.h"
#include "strategies/pooled_tensor.h"
#include "strategies/shaped_steps.h"
#include "strategies/staging.h"
#include "strategies/step_params.h"
#include "strategies/step_tables.h"
#include "strategies/strategy_impl.h"
#include "strategies/views.h"
#include "strategies/wire_pack.h"

namespace burst::strategies {

namespace {

class AllGatherStrategy final : public Strategy {
 public:
  explicit AllGatherStrategy(const Setup& setup)
      : setup_(setup), gathered_pos_(setup.shape.S_global), stage_(*setup.device) {
    const ProblemShape& s = setup.shape;
    S_ = s.S_global / setup.P;
    b_kv_ = s.B * S_ * s.H_kv * s.D;
    std::iota(gathered_pos_.begin(), gathered_pos_.end(), std::int64_t{0});
    twins_ = TableTwins(*setup.device, {&gathered_pos_});
  }

  void forward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
               const TensorView& lse, DistStats& stats) override {
    PassRecord rec(setup_, "fwd");
    if (setup_.P == 1) {  // one rank: its K, V are the whole sequence, nothing to gather
      compute_forward(q, k, v, own_positions(), out, lse, stats, rec.log);
      stats.peak_buffer_bytes = 0;
      rec.finish();
      return;
    }
    device::Buffer ranked = gather(k, v, stats, rec.at()), g = pool().get(ranked.size());
    Gathered kv;
    {
      Stopwatch sw(&rec.at().copy);
      kv = reorder(ranked, g, k.dtype);
    }
    compute_forward(q, kv.k, kv.v, gathered_pos_.data(), out, lse, stats, rec.log);
    stats.peak_buffer_bytes = 2 * ranked.size() + wire::kv_block(k.dtype, b_kv_).bytes();
    pool().put(std::move(ranked));
    pool().put(std::move(g));
    rec.finish();
  }

  void backward(const TensorView& dout, const TensorView& q, const TensorView& k, const TensorView& v,
                const TensorView& out, const TensorView& lse, const TensorView& dq, const TensorView& dk,
                const TensorView& dv, DistStats& stats) override {
    const ProblemShape& s = setup_.shape;
    const int P = setup_.P;
    TypedTensor delta_mem = pooled_tensor(pool(), {s.B, s.H, S_}, DType::F32);
    const TensorView delta = delta_mem.view();
    dev().attention_delta(dout, out, delta);
    stats.backward_side = "kv";
    stats.visible_pairs = own_pairs();
    PassRecord rec(setup_, "bwd");
    if (P == 1) {  // one rank: dK, dV are complete, nothing to gather or reduce-scatter
      const kernels::KernelParams p = step_params(setup_, own_positions(), own_positions(), nullptr);
      stats.compute_seconds = 0;
      rec.log.compute(0, stats.compute_seconds,
                      [&] { dev().step_backward(dout, q, k, v, lse, delta, dq, dk, dv, p, false); });
      stats.peak_buffer_bytes = kF32 * delta.numel();
      pool().put(delta_mem.release());
      rec.finish();
      return;
    }
    // One kernel call per gathered rank block, dQ accumulated over them in rank order and each
    // block's dK, dV written straight into its slot of the reduce-scatter's send buffer [dK, dV]
    // (fp32). One call over the whole position-ordered sequence instead streamed K, V, dK, dV of
    // S_global rows per query tile: past the last-level cache (S = 32768, H 2, D 64: 4 × 17 MB)
    // the backward ran 1.42× the ring's time; blocks of S_global / P rows run at the ring's.
    const WireLayout kv = wire::kv_block(k.dtype, b_kv_);
    device::Buffer ranked = gather(k, v, stats, rec.at());
    device::Buffer send;
    {
      Stopwatch sw(&rec.at().copy);
      send = pool().get_zeroed(kF32 * 2 * b_kv_ * P);
      dev().fill(dq, 0.0f);
    }
    stats.compute_seconds = 0;
    rec.log.compute(0, stats.compute_seconds, [&] {
      if (own_pairs() == 0) return;
      const std::int64_t* own = own_positions();
      for (int r = 0; r < P; ++r) {
        if (block_pairs(setup_, setup_.rank, r) == 0) continue;  // no query sees block r: dK, dV stay 0
        const std::byte* block = ranked.data() + kv.bytes() * r;
        float* grad = send.f32() + 2 * b_kv_ * r;
        const std::int64_t* kv_pos = rank_positions(setup_, r).data();
        const TensorView kr = field_view(kv, wire::kK, block, {s.B, S_, s.H_kv, s.D}),
                         vr = field_view(kv, wire::kV, block, {s.B, S_, s.H_kv, s.D}),
                         dkr = bshd_view(grad, s.B, S_, s.H_kv, s.D),
                         dvr = bshd_view(grad + b_kv_, s.B, S_, s.H_kv, s.D);
        // One call per block; on a device that prefers whole-shaped steps, the block cut into
        // cuDNN's bands (a zigzag block between ranks is none whole), every call accumulating.
        for (const KernelSpan& sp :
             backward_calls(*setup_.resolved, false, dev().prefers_shaped_steps(), own, S_, kv_pos, S_))
          dev().step_backward(
              narrow(dout, 1, sp.q0, sp.q1), narrow(q, 1, sp.q0, sp.q1), narrow(kr, 1, sp.k0, sp.k1),
              narrow(vr, 1, sp.k0, sp.k1), narrow(lse, 2, sp.q0, sp.q1), narrow(delta, 2, sp.q0, sp.q1),
              narrow(dq, 1, sp.q0, sp.q1), narrow(dkr, 1, sp.k0, sp.k1), narrow(dvr, 1, sp.k0, sp.k1),
              step_params(setup_, own + sp.q0, kv_pos + sp.k0, nullptr), true);
      }
    });
    const auto t1 = std::chrono::steady_clock::now();
    // Staged: the whole [dK, dV] partials out once, this rank's summed block in once.
    device::Buffer mine =
        stage_.collective(send, kF32 * 2 * b_kv_, [&](const ByteBuffer& sent, ByteBuffer& got) {
          setup_.comm.reduce_scatter(f32_data(sent),
                                     std::vector<std::int64_t>(static_cast<std::size_t>(P), 2 * b_kv_),
                                     f32_data(got));
        });
    const double waited = seconds_since(t1);
    stats.exposed_comm_seconds += waited;
    rec.at().wait += waited;
    {
      Stopwatch sw(&rec.at().copy);
      unpack_into(dev(), mine.f32(), dk);
      unpack_into(dev(), mine.f32() + b_kv_, dv);
    }
    stats.peak_buffer_bytes = ranked.size() + send.size() + mine.size() + kF32 * delta.numel();
    pool().put(delta_mem.release());
    for (device::Buffer* x : {&ranked, &send, &mine}) pool().put(std::move(*x));
    rec.finish();
  }

 private:
  std::int64_t own_pairs() const {
    return setup_.plan->forward().visible_pairs[static_cast<std::size_t>(setup_.rank)];
  }
  const std::int64_t* own_positions() const { return rank_positions(setup_, setup_.rank).data(); }

  /// The pass's one timeline record (the plan's one collective step): times recorded into it,
  /// bytes sent from the communicator's counter; finish() appends it (DistConfig::timeline).
  /// Received = sent: the all-gather and the equal-block reduce-scatter bring every rank P − 1
  /// blocks of the size it sends P − 1 times.
  struct PassRecord {
    PassRecord(const Setup& s, const char* name)
        : setup(s),
          pass(name),
          log(s.cfg.timeline ? &steps : nullptr, 1),
          sent0(s.comm.counters().bytes_sent) {}
    void finish() {
      if (!log.on()) return;
      at().sent = setup.comm.counters().bytes_sent - sent0;
      at().received = at().sent;
      record_timeline(setup, pass, steps);
    }
    StepTimes& at() { return log.at(0); }

    const Setup& setup;
    const char* pass;
    std::vector<StepTimes> steps;
    StepLog log;
    std::int64_t sent0;
  };

  /// The whole sequence's K and V [B, S_global, H_kv, D] in the inputs' storage dtype.
  struct Gathered {
    TensorView k, v;
  };

  /// All-gathers [K;V] of every rank in their storage dtype; returns them in rank order (a pool
  /// block of device memory). Staged: the own block out once, the P blocks in once.
  device::Buffer gather(const TensorView& k, const TensorView& v, DistStats& stats, StepTimes& rec) const {
    const WireLayout kv = wire::kv_block(k.dtype, b_kv_);
    device::Buffer own = pool().get(kv.bytes());
    {
      Stopwatch sw(&rec.copy);
      pack_field(dev(), kv, wire::kK, k, own.data());
      pack_field(dev(), kv, wire::kV, v, own.data());
    }
    const auto t0 = std::chrono::steady_clock::now();
    device::Buffer ranked = stage_.collective(
        own, kv.bytes() * setup_.P,
        [&](const ByteBuffer& sent, ByteBuffer& got) { setup_.comm.all_gather(sent, got); });
    stats.exposed_comm_seconds = seconds_since(t0);
    rec.wait += stats.exposed_comm_seconds;
    pool().put(std::move(own));
    return ranked;
  }

  /// Reorders the rank-order blocks into position order in `g` (same size as `ranked`).
  Gathered reorder(const device::Buffer& ranked, const device::Buffer& g, DType dt) const {
    const ProblemShape& s = setup_.shape;
    const WireLayout block = wire::kv_block(dt, b_kv_), whole = wire::kv_block(dt, b_kv_ * setup_.P);
    Gathered kv{field_view(whole, wire::kK, g.data(), {s.B, s.S_global, s.H_kv, s.D}),
                field_view(whole, wire::kV, g.data(), {s.B, s.S_global, s.H_kv, s.D})};
    // Rank r's rows go to its global positions: a scatter along the sequence on the device,
    // reading the positions' twin in its memory (the plan's tables, uploaded once).
    for (int r = 0; r < setup_.P; ++r) {
      const std::byte* at = ranked.data() + block.bytes() * r;
      const std::int64_t* pos = rank_positions(setup_, r).data();
      const std::int64_t* twin = setup_.tables ? setup_.tables->position_twins().twin(pos) : nullptr;
      dev().index_copy(field_view(block, wire::kK, at, {s.B, S_, s.H_kv, s.D}), kv.k, 1, pos, twin, true,
                       false);
      dev().index_copy(field_view(block, wire::kV, at, {s.B, S_, s.H_kv, s.D}), kv.v, 1, pos, twin, true,
                       false);
    }
    return kv;
  }

  /// kv_pos: host memory (the own positions, or the gathered 0 .. S_global − 1); the step reads
  /// its device twin and keeps the host array as its mirror (kernels.h: KernelArgs::host_*).
  void compute_forward(const TensorView& q, const TensorView& kg, const TensorView& vg,
                       const std::int64_t* kv_pos, const TensorView& out, const TensorView& lse,
                       DistStats& stats, StepLog& log) const {
    stats.compute_seconds = 0;
    log.compute(0, stats.compute_seconds, [&] {
      if (own_pairs() > 0) {
        // One call; on a device that prefers whole-shaped steps, one per query chunk, cut into
        // cuDNN's bands (a zigzag rank's rows against the whole sequence are none whole).
        const std::int64_t* own = own_positions();
        shaped_forward(dev(), *setup_.resolved, dev().prefers_shaped_steps(), own, kv_pos, q, kg, vg, out,
                       lse, [&](std::int64_t q0, std::int64_t k0) {
                         kernels::KernelParams p = step_params(setup_, own + q0, kv_pos + k0, nullptr);
                         if (const std::int64_t* twin = twins_.twin(kv_pos + k0))
                           p.kv_pos = twin;  // gathered
                         return p;
                       });
      } else {
        dev().fill(out, 0.0f);
        dev().fill(lse, kNegInf);
      }
    });
    stats.visible_pairs = own_pairs();
  }

  Setup setup_;
  std::vector<std::int64_t> gathered_pos_;  ///< 0 .. S_global − 1
  TableTwins twins_;                        ///< gathered_pos_ in the device's memory (step_tables.h)
  std::int64_t S_ = 0, b_kv_ = 0;
  const device::Device& dev() const { return *setup_.device; }

  device::BufferPool& pool() const { return stage_.pool(); }

  mutable Stager stage_;  // message, gathered and partial buffers kept across calls (staged to the wire)
};

}  // namespace

void validate_allgather(const DistConfig& cfg, const ProblemShape&, const ResolvedMask&, int) {
  BURST_CHECK(cfg.backward_side != BackwardSide::QuerySide, Unsupported,
              "strategy 'allgather' reduce-scatters dK,dV (KV side); the query-side backward is "
              "strategy 'burst'");
}

std::unique_ptr<Strategy> make_allgather(const Setup& setup) {
  return std::make_unique<AllGatherStrategy>(setup);
}

}  // namespace burst::strategies
