// Llama-3 all-gather context parallelism (arXiv 2407.21783 §3.3; docs/strategies.md): all-gather K,V,
// one local kernel call of the rank's queries against the whole sequence (one softmax per row,
// no cross-step merge), and in the backward all-gather K,V again, compute dK,dV for the whole
// gathered sequence and reduce-scatter them to their owners; dQ stays local.
// Memory: the gathered K,V (2·B·S_global·H_kv·D) — by design this strategy holds the whole K/V.
// Bytes per rank: forward (P−1)·2·b_kv; backward 2·(P−1)·2·b_kv (fp32).
#include <chrono>

#include "burst/error.h"
#include "burst/softmax_merge.h"
#include "strategies/common.h"
#include "strategies/strategy_impl.h"

namespace burst::strategies {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

class AllGatherStrategy final : public Strategy {
 public:
  explicit AllGatherStrategy(const Setup& setup) : setup_(setup) {
    const ProblemShape& s = setup.shape;
    S_ = s.S_global / setup.P;
    b_kv_ = s.B * S_ * s.H_kv * s.D;
  }

  void forward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
               const TensorView& lse, DistStats& stats) override {
    const ProblemShape& s = setup_.shape;
    Tensor kg({s.B, s.S_global, s.H_kv, s.D}), vg({s.B, s.S_global, s.H_kv, s.D});
    std::vector<float> own;
    gather(k, v, kg, vg, own, stats);
    compute_forward(q, kg, vg, out, lse, stats);
    stats.peak_buffer_bytes = 4 * (2 * 2 * kg.numel() + 2 * b_kv_);
  }

  void backward(const TensorView& dout, const TensorView& q, const TensorView& k, const TensorView& v,
                const TensorView& out, const TensorView& lse, const TensorView& dq, const TensorView& dk,
                const TensorView& dv, DistStats& stats) override {
    const ProblemShape& s = setup_.shape;
    const int P = setup_.P;
    Tensor kg({s.B, s.S_global, s.H_kv, s.D}), vg({s.B, s.S_global, s.H_kv, s.D});
    std::vector<float> ranked;   // rank-order buffer: gathered K,V, then the dK,dV to scatter
    gather(k, v, kg, vg, ranked, stats);
    Tensor delta({s.B, s.H, S_});
    attention_delta(dout, out, delta.view());
    Tensor dkg({s.B, s.S_global, s.H_kv, s.D}), dvg({s.B, s.S_global, s.H_kv, s.D});
    const auto t0 = std::chrono::steady_clock::now();
    if (own_pairs() > 0) {
      const auto& pos = setup_.plan->layout().positions[static_cast<std::size_t>(setup_.rank)];
      AttentionParams p = step_params(setup_, pos.data(), nullptr, nullptr);
      attention_backward_with_delta(dout, q, kg.view(), vg.view(), lse, delta.view(), dq, dkg.view(), dvg.view(),
                                    p, false);
    } else {
      fill_view(dq, 0.0f);
    }
    stats.compute_seconds = seconds_since(t0);
    // Block r of the send buffer: [dK, dV] at rank r's positions.
    for (int r = 0; r < P; ++r) {
      float* block = ranked.data() + 2 * b_kv_ * r;
      shard(setup_.plan->layout(), r, dkg.view(), bshd_view(block, s.B, S_, s.H_kv, s.D));
      shard(setup_.plan->layout(), r, dvg.view(), bshd_view(block + b_kv_, s.B, S_, s.H_kv, s.D));
    }
    std::vector<float> mine(static_cast<std::size_t>(2 * b_kv_));
    const auto t1 = std::chrono::steady_clock::now();
    setup_.comm.reduce_scatter(ranked.data(), std::vector<std::int64_t>(static_cast<std::size_t>(P), 2 * b_kv_),
                               mine.data());
    stats.exposed_comm_seconds += seconds_since(t1);
    unpack_into(mine.data(), dk);
    unpack_into(mine.data() + b_kv_, dv);
    stats.peak_buffer_bytes = 4 * (3 * 2 * kg.numel() + 4 * b_kv_ + delta.numel());
    stats.backward_side = "kv";
    stats.visible_pairs = own_pairs();
  }

 private:
  std::int64_t own_pairs() const {
    return setup_.plan->forward().visible_pairs[static_cast<std::size_t>(setup_.rank)];
  }

  /// All-gathers [K;V] of every rank into `ranked` (rank order) and reorders into kg, vg.
  void gather(const TensorView& k, const TensorView& v, Tensor& kg, Tensor& vg, std::vector<float>& ranked,
              DistStats& stats) const {
    const ProblemShape& s = setup_.shape;
    std::vector<float> own;
    append_packed(k, own);
    append_packed(v, own);
    ranked.assign(static_cast<std::size_t>(2 * b_kv_ * setup_.P), 0.0f);
    const auto t0 = std::chrono::steady_clock::now();
    setup_.comm.all_gather(own.data(), 2 * b_kv_, ranked.data());
    stats.exposed_comm_seconds = seconds_since(t0);
    for (int r = 0; r < setup_.P; ++r) {
      const float* block = ranked.data() + 2 * b_kv_ * r;
      unshard(setup_.plan->layout(), r, bshd_view(block, s.B, S_, s.H_kv, s.D), kg.view());
      unshard(setup_.plan->layout(), r, bshd_view(block + b_kv_, s.B, S_, s.H_kv, s.D), vg.view());
    }
  }

  void compute_forward(const TensorView& q, const Tensor& kg, const Tensor& vg, const TensorView& out,
                       const TensorView& lse, DistStats& stats) const {
    const auto t0 = std::chrono::steady_clock::now();
    if (own_pairs() > 0) {
      const auto& pos = setup_.plan->layout().positions[static_cast<std::size_t>(setup_.rank)];
      attention_forward(q, kg.view(), vg.view(), out, lse, step_params(setup_, pos.data(), nullptr, nullptr));
    } else {
      fill_view(out, 0.0f);
      fill_view(lse, kNegInf);
    }
    stats.compute_seconds = seconds_since(t0);
    stats.visible_pairs = own_pairs();
  }

  Setup setup_;
  std::int64_t S_ = 0, b_kv_ = 0;
};

}  // namespace

void validate_allgather(const DistConfig& cfg, const ProblemShape&, const Mask&, int) {
  BURST_CHECK(cfg.backward_side != BackwardSide::QuerySide, Unsupported,
              "strategy 'allgather' reduce-scatters dK,dV (KV side); the query-side backward is "
              "strategy 'burst'");
}

std::unique_ptr<Strategy> make_allgather(const Setup& setup) {
  return std::make_unique<AllGatherStrategy>(setup);
}

}  // namespace burst::strategies
