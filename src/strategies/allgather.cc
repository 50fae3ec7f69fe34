// Llama-3 all-gather context parallelism (arXiv 2407.21783 §3.3; docs/strategies.md): all-gather K,V,
// one local kernel call of the rank's queries against the whole sequence (one softmax per row,
// no cross-step merge), and in the backward all-gather K,V again, compute dK,dV for the whole
// gathered sequence and reduce-scatter them to their owners; dQ stays local.
// Memory: the gathered K,V (2·B·S_global·H_kv·D) — by design this strategy holds the whole K/V.
// Bytes per rank: forward e·(P−1)·2·b_kv; backward e·(P−1)·2·b_kv + 4·(P−1)·2·b_kv: K, V travel
// in their storage dtype (e = 2 bytes for bf16/f16, 4 for f32), the dK, dV partials in fp32 (the
// reduce-scatter sums them: never rounded to 16 bits before the end).
#include <chrono>
#include <cstdint>
#include <vector>

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
    Gathered g(setup_.shape, k.dtype);
    std::vector<float> own;
    gather(k, v, g, own, stats);
    compute_forward(q, g.k, g.v, out, lse, stats);
    stats.peak_buffer_bytes = e(k.dtype) * (2 * 2 * g.k.numel() + 2 * b_kv_);
  }

  void backward(const TensorView& dout, const TensorView& q, const TensorView& k, const TensorView& v,
                const TensorView& out, const TensorView& lse, const TensorView& dq, const TensorView& dk,
                const TensorView& dv, DistStats& stats) override {
    const ProblemShape& s = setup_.shape;
    const int P = setup_.P;
    Gathered gk(s, k.dtype);
    std::vector<float> ranked;  // rank-order buffer: gathered K,V, then the dK,dV to scatter
    gather(k, v, gk, ranked, stats);
    Tensor delta({s.B, s.H, S_});
    attention_delta(dout, out, delta.view());
    Tensor dkg({s.B, s.S_global, s.H_kv, s.D}), dvg({s.B, s.S_global, s.H_kv, s.D});
    const auto t0 = std::chrono::steady_clock::now();
    if (own_pairs() > 0) {
      const auto& pos = setup_.plan->layout().positions[static_cast<std::size_t>(setup_.rank)];
      AttentionParams p = step_params(setup_, pos.data(), nullptr, nullptr);
      attention_backward_with_delta(dout, q, gk.k, gk.v, lse, delta.view(), dq, dkg.view(), dvg.view(), p,
                                    false);
    } else {
      fill_view(dq, 0.0f);
    }
    stats.compute_seconds = seconds_since(t0);
    // Block r of the send buffer: [dK, dV] (fp32) at rank r's positions.
    ranked.resize(static_cast<std::size_t>(2 * b_kv_ * P));
    for (int r = 0; r < P; ++r) {
      float* block = ranked.data() + 2 * b_kv_ * r;
      shard(setup_.plan->layout(), r, dkg.view(), bshd_view(block, s.B, S_, s.H_kv, s.D));
      shard(setup_.plan->layout(), r, dvg.view(), bshd_view(block + b_kv_, s.B, S_, s.H_kv, s.D));
    }
    std::vector<float> mine(static_cast<std::size_t>(2 * b_kv_));
    const auto t1 = std::chrono::steady_clock::now();
    setup_.comm.reduce_scatter(
        ranked.data(), std::vector<std::int64_t>(static_cast<std::size_t>(P), 2 * b_kv_), mine.data());
    stats.exposed_comm_seconds += seconds_since(t1);
    unpack_into(mine.data(), dk);
    unpack_into(mine.data() + b_kv_, dv);
    stats.peak_buffer_bytes =
        e(k.dtype) * 2 * gk.k.numel() + 4 * (2 * 2 * gk.k.numel() + 4 * b_kv_ + delta.numel());
    stats.backward_side = "kv";
    stats.visible_pairs = own_pairs();
  }

 private:
  std::int64_t own_pairs() const {
    return setup_.plan->forward().visible_pairs[static_cast<std::size_t>(setup_.rank)];
  }

  static std::int64_t e(DType dt) { return static_cast<std::int64_t>(dtype_size(dt)); }

  /// The whole sequence's K and V [B, S_global, H_kv, D] in the inputs' storage dtype.
  struct Gathered {
    std::vector<float> f32;           // f32 storage
    std::vector<std::uint16_t> bits;  // bf16 / f16 storage
    TensorView k, v;
    Gathered(const ProblemShape& s, DType dt) {
      const std::int64_t n = s.B * s.S_global * s.H_kv * s.D;
      const void* base = nullptr;
      if (dt == DType::F32) {
        f32.resize(static_cast<std::size_t>(2 * n));
        base = f32.data();
      } else {
        bits.resize(static_cast<std::size_t>(2 * n));
        base = bits.data();
      }
      k = make_view(base, dt, {s.B, s.S_global, s.H_kv, s.D});
      v = make_view(static_cast<const char*>(base) + n * e(dt), dt, {s.B, s.S_global, s.H_kv, s.D});
    }
  };

  /// All-gathers [K;V] of every rank in their storage dtype into `ranked` (rank order) and
  /// reorders them into g.
  void gather(const TensorView& k, const TensorView& v, Gathered& g, std::vector<float>& ranked,
              DistStats& stats) const {
    const ProblemShape& s = setup_.shape;
    const DType dt = k.dtype;
    const std::int64_t words = packed_pair_floats(b_kv_, dt);
    std::vector<float> own;
    append_packed_pair(k, v, own);
    ranked.assign(static_cast<std::size_t>(words * setup_.P), 0.0f);
    const auto t0 = std::chrono::steady_clock::now();
    setup_.comm.all_gather(own.data(), words, ranked.data());
    stats.exposed_comm_seconds = seconds_since(t0);
    for (int r = 0; r < setup_.P; ++r) {
      const float* block = ranked.data() + words * r;
      unshard(setup_.plan->layout(), r, bshd_view_at(block, 0, dt, s.B, S_, s.H_kv, s.D), g.k);
      unshard(setup_.plan->layout(), r, bshd_view_at(block, b_kv_, dt, s.B, S_, s.H_kv, s.D), g.v);
    }
  }

  void compute_forward(const TensorView& q, const TensorView& kg, const TensorView& vg, const TensorView& out,
                       const TensorView& lse, DistStats& stats) const {
    const auto t0 = std::chrono::steady_clock::now();
    if (own_pairs() > 0) {
      const auto& pos = setup_.plan->layout().positions[static_cast<std::size_t>(setup_.rank)];
      attention_forward(q, kg, vg, out, lse, step_params(setup_, pos.data(), nullptr, nullptr));
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
