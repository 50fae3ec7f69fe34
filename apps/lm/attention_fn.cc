// apps/lm/attention_fn.cc — engines and the autograd function.
#include "attention_fn.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "burst/error.h"
#include "runtime.h"

namespace burst::lm {
namespace {

/// The device a torch tensor lives on, as a view check_device reads: burst's name for it
/// (parse_device of torch's "cpu" / "cuda:1"; another device type throws InvalidArgument).
TensorView device_view(const torch::Tensor& t) {
  TensorView v;
  v.device = parse_device(t.device().str());  // first: a meta tensor has no data to point at
  v.data = t.data_ptr();
  return v;
}

/// BSHD / [1,H,S] view of a contiguous fp32 or bf16 torch tensor (bf16 as burst's DType::BF16:
/// both are the top 16 bits of an fp32, rounded to nearest even), on the tensor's device.
TensorView view_of(const torch::Tensor& t) {
  const bool bf16 = t.scalar_type() == torch::kBFloat16;
  BURST_CHECK(
      (bf16 || t.scalar_type() == torch::kFloat32) && t.is_contiguous() && t.dim() >= 1 && t.dim() <= 4,
      InvalidArgument, "attention tensors must be contiguous fp32 or bf16 with 1..4 dims, got ",
      t.scalar_type(), " ", t.sizes());
  std::vector<std::int64_t> shape(t.sizes().begin(), t.sizes().end());
  TensorView v = bf16 ? make_view(t.data_ptr(), DType::BF16, shape) : make_view(t.data_ptr<float>(), shape);
  v.device = device_view(t).device;
  return v;
}

class AttentionFunction : public torch::autograd::Function<AttentionFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor q, torch::Tensor k,
                               torch::Tensor v, AttentionEngine* engine, AttentionCache* cache) {
    const auto st = to_torch(engine->dtype());  // the autocast-style cast (a no-op for fp32)
    q = q.to(st).contiguous();
    k = k.to(st).contiguous();
    v = v.to(st).contiguous();
    const auto f32 = q.options().dtype(torch::kFloat32);
    const auto B = q.size(0), S = q.size(1), H = q.size(2);
    torch::Tensor out, lse;
    const bool seq_wise = cache != nullptr && cache->second_half_only;
    BURST_CHECK(!seq_wise || (S % 2 == 0 && engine->first_half() != nullptr), InvalidArgument,
                "burst_attention: a seq-wise cache needs an even S_local (got ", S,
                ") and an engine with first_half() attached");
    const std::int64_t kept = seq_wise ? S / 2 : S;  // rows the cache holds (the later ones)
    if (cache != nullptr && cache->out.defined()) {  // replay: the forward ran before
      BURST_CHECK(cache->out.sizes() == torch::IntArrayRef({B, kept, H, q.size(3)}) && cache->lse.defined() &&
                      cache->lse.sizes() == torch::IntArrayRef({B, H, kept}),
                  InvalidArgument, "burst_attention: cached out/lse do not match q of shape ", q.sizes());
      if (seq_wise) {  // recompute the first half (global positions [0, S_global/2)) only
        const auto half = S - kept;
        auto q1 = q.narrow(1, 0, half).contiguous(), k1 = k.narrow(1, 0, half).contiguous(),
             v1 = v.narrow(1, 0, half).contiguous();
        auto out1 = torch::empty_like(q1);
        auto lse1 = torch::empty({B, H, half}, f32);
        engine->first_half()->forward(view_of(q1), view_of(k1), view_of(v1), view_of(out1), view_of(lse1));
        out = torch::cat({out1, cache->out}, 1);
        lse = torch::cat({lse1, cache->lse}, 2);
      } else {
        out = cache->out;
        lse = cache->lse;
      }
    } else {
      out = torch::empty_like(q);
      lse = torch::empty({B, H, S}, f32);
      engine->forward(view_of(q), view_of(k), view_of(v), view_of(out), view_of(lse));
      if (cache != nullptr) {
        cache->out = seq_wise ? out.narrow(1, S - kept, kept).clone() : out;
        cache->lse = seq_wise ? lse.narrow(2, S - kept, kept).clone() : lse;
      }
    }
    ctx->save_for_backward({q, k, v, out, lse});
    ctx->saved_data["engine"] = reinterpret_cast<std::int64_t>(engine);
    return out;
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    auto* engine = reinterpret_cast<AttentionEngine*>(ctx->saved_data["engine"].toInt());
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4];
    const torch::Tensor dout = grads[0].to(out.scalar_type()).contiguous();
    // fp32 gradients whatever the dtype: the kernels' accumulators, rounded never.
    const auto f32 = q.options().dtype(torch::kFloat32);
    torch::Tensor dq = torch::empty(q.sizes(), f32), dk = torch::empty(k.sizes(), f32),
                  dv = torch::empty(v.sizes(), f32);
    engine->backward(view_of(dout), view_of(q), view_of(k), view_of(v), view_of(out), view_of(lse),
                     view_of(dq), view_of(dk), view_of(dv));
    return {dq, dk, dv, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::ScalarType to_torch(DType dt) {
  BURST_CHECK(dt == DType::F32 || dt == DType::BF16, InvalidArgument,
              "the language model computes in f32 or bf16, not ", to_string(dt));
  return dt == DType::BF16 ? torch::kBFloat16 : torch::kFloat32;
}

void AttentionEngine::count_pass(DType input_dtype) {
  ++totals_.passes;
  if (input_dtype == DType::BF16) ++totals_.bf16_passes;
}

LocalEngine::LocalEngine(std::vector<std::int64_t> positions, const Mask& mask, std::int64_t S_global,
                         int num_threads, KernelImpl impl, DType dtype)
    : positions_(std::move(positions)) {
  BURST_CHECK(dtype == DType::F32 || dtype == DType::BF16, InvalidArgument, "LocalEngine dtype ",
              to_string(dtype), " is not f32 or bf16");
  dtype_ = dtype;
  for (std::size_t i = 1; i < positions_.size(); ++i)
    BURST_CHECK(positions_[i] > positions_[i - 1], InvalidArgument,
                "LocalEngine positions must increase; position[", i, "]=", positions_[i], " after ",
                positions_[i - 1]);
  BURST_CHECK(positions_.empty() || (positions_.front() >= 0 && positions_.back() < S_global),
              InvalidArgument, "LocalEngine positions outside [0, S_global=", S_global, ")");
  params_.mask = mask;
  params_.q_positions = positions_.data();
  params_.kv_positions = positions_.data();
  params_.seq_q_global = S_global;
  params_.seq_kv_global = S_global;
  params_.num_threads = num_threads;
  params_.impl = impl;
  pairs_ = ResolvedMask(mask, S_global, S_global).visible_pairs(positions_, positions_);
}

void LocalEngine::forward(const TensorView& q, const TensorView& k, const TensorView& v,
                          const TensorView& out, const TensorView& lse) {
  const Stopwatch sw;
  attention_forward(q, k, v, out, lse, params_);
  totals_.forward_seconds += sw.seconds();
  totals_.forward_pairs += pairs_;
  count_pass(q.dtype);
}

void LocalEngine::backward(const TensorView& dout, const TensorView& q, const TensorView& k,
                           const TensorView& v, const TensorView& out, const TensorView& lse,
                           const TensorView& dq, const TensorView& dk, const TensorView& dv) {
  const Stopwatch sw;
  attention_backward(dout, q, k, v, out, lse, dq, dk, dv, params_);
  totals_.backward_seconds += sw.seconds();
  totals_.backward_pairs += pairs_;
  totals_.backward_side = "local";
  count_pass(q.dtype);
}

Mask first_half_mask(const Mask& mask, std::int64_t S, std::int64_t half) {
  BURST_CHECK(half > 0 && half < S, InvalidArgument, "first_half_mask: half=", half, " not in (0, S=", S,
              ")");
  BURST_CHECK(ResolvedMask(mask, S, S).classify(0, half - 1, half, S - 1) == TileClass::Empty,
              InvalidArgument, "seq-wise checkpointing needs a causal-type mask: under ", mask.describe(),
              " some query in [0, ", half, ") sees a key in [", half, ", ", S,
              "), so the first half is not self-contained (use --recompute layer)");
  if (mask.is_shorthand()) return mask;  // causal / windows resolve the same on the prefix
  std::vector<MaskSlice> kept;
  for (MaskSlice s : mask.slices) {
    if (s.q_begin >= half || s.k_begin >= half) continue;  // no pair inside [0, half)²
    const bool straddles = s.q_end > half || s.k_end > half;
    const bool aligned = s.kind == SliceKind::Full && s.window_left == -1 && s.window_right == -1;
    BURST_CHECK(!straddles || aligned || s.q_end == s.k_end, Unsupported, "seq-wise checkpointing: slice [",
                s.q_begin, ",", s.q_end, ")x[", s.k_begin, ",", s.k_end, ") ", to_string(s.kind),
                " straddles position ", half,
                " and is not square, so clipping it would move its diagonal (use --recompute layer)");
    s.q_end = std::min(s.q_end, half);
    s.k_end = std::min(s.k_end, half);
    kept.push_back(s);
  }
  return Mask::from_slices(std::move(kept));
}

torch::Tensor burst_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              AttentionEngine& engine, AttentionCache* cache) {
  BURST_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4 && q.size(1) == engine.attention_rows(),
              InvalidArgument,
              "burst_attention: q must be [1, S_local, H, D] with S_local = ", engine.attention_rows(),
              " rows; got q.dim()=", q.dim(), " S=", q.dim() > 1 ? q.size(1) : -1);
  // burst computes on the host: a CUDA tensor is refused here, before any cast or copy.
  check_device("burst_attention", kHost, "q", device_view(q), "k", device_view(k), "v", device_view(v));
  return AttentionFunction::apply(q, k, v, &engine, cache);
}

torch::Tensor reference_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                  const std::vector<std::int64_t>& q_pos,
                                  const std::vector<std::int64_t>& k_pos, const Mask& mask,
                                  std::int64_t S_global) {
  const ResolvedMask resolved(mask, S_global, S_global);
  const auto Sq = static_cast<std::int64_t>(q_pos.size()), Sk = static_cast<std::int64_t>(k_pos.size());
  auto visible = torch::zeros({Sq, Sk}, torch::kBool);
  auto acc = visible.accessor<bool, 2>();
  for (std::int64_t i = 0; i < Sq; ++i)
    for (std::int64_t j = 0; j < Sk; ++j)
      acc[i][j] = resolved.visible(q_pos[static_cast<std::size_t>(i)], k_pos[static_cast<std::size_t>(j)]);
  const auto H = q.size(2), H_kv = k.size(2), D = q.size(3);
  const auto group = H / H_kv;
  auto kk = k.repeat_interleave(group, 2).permute({0, 2, 3, 1});  // [B,H,D,Sk]
  auto vv = v.repeat_interleave(group, 2).permute({0, 2, 1, 3});  // [B,H,Sk,D]
  auto scores = torch::matmul(q.permute({0, 2, 1, 3}), kk) / std::sqrt(static_cast<double>(D));
  scores = scores.masked_fill(visible.logical_not(), -std::numeric_limits<double>::infinity());
  auto probs = torch::softmax(scores, -1);
  probs = torch::nan_to_num(probs, 0.0);  // fully masked rows: 0, as the kernels
  return torch::matmul(probs, vv).permute({0, 2, 1, 3});
}

}  // namespace burst::lm
