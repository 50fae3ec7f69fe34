// apps/lm/fused_head_loss.cc — chunked LM head + cross-entropy (docs/algorithm.md §9.2).
#include "fused_head_loss.h"

#include "burst/error.h"

namespace burst::lm {
namespace {

void check_inputs(const torch::Tensor& x, const torch::Tensor& W, const torch::Tensor& target,
                  std::int64_t chunk) {
  BURST_CHECK(x.dim() == 2 && W.dim() == 2 && x.size(1) == W.size(1) && target.dim() == 1 &&
                  target.size(0) == x.size(0) && chunk > 0,
              InvalidArgument,
              "fused head: want x [S,d], W [V,d], target [S], chunk > 0; got x.dim()=", x.dim(),
              " W.dim()=", W.dim(), " target.dim()=", target.dim(), " chunk=", chunk);
}

class FusedHeadLoss : public torch::autograd::Function<FusedHeadLoss> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x, torch::Tensor W,
                               torch::Tensor target, torch::Tensor weight, std::int64_t chunk) {
    torch::NoGradGuard no_grad;
    const auto S = x.size(0);
    double total = 0;
    for (std::int64_t s0 = 0; s0 < S; s0 += chunk) {
      const auto n = std::min(chunk, S - s0);
      const auto logits = torch::matmul(x.narrow(0, s0, n), W.t());  // [n, V]
      const auto lse = torch::logsumexp(logits, 1);
      const auto picked = logits.gather(1, target.narrow(0, s0, n).unsqueeze(1)).squeeze(1);
      total += ((lse - picked).to(torch::kFloat64) * weight.narrow(0, s0, n).to(torch::kFloat64))
                   .sum()
                   .item<double>();
    }
    ctx->save_for_backward({x, W, target, weight});
    ctx->saved_data["chunk"] = chunk;
    return torch::tensor(total, x.options());
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    torch::NoGradGuard no_grad;
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &W = saved[1], &target = saved[2], &weight = saved[3];
    const auto chunk = ctx->saved_data["chunk"].toInt();
    const auto g = grads[0];
    const auto S = x.size(0);
    torch::Tensor dx = torch::empty_like(x), dW = torch::zeros_like(W);
    for (std::int64_t s0 = 0; s0 < S; s0 += chunk) {
      const auto n = std::min(chunk, S - s0);
      const auto xc = x.narrow(0, s0, n);
      auto d = torch::softmax(torch::matmul(xc, W.t()), 1);  // recompute
      d.scatter_add_(1, target.narrow(0, s0, n).unsqueeze(1), -torch::ones({n, 1}, d.options()));
      d.mul_((weight.narrow(0, s0, n) * g).unsqueeze(1));
      dx.narrow(0, s0, n).copy_(torch::matmul(d, W));
      dW.addmm_(d.t(), xc);
    }
    return {dx, dW, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor fused_head_loss(const torch::Tensor& x, const torch::Tensor& W, const torch::Tensor& target,
                              const torch::Tensor& weight, std::int64_t chunk) {
  check_inputs(x, W, target, chunk);
  BURST_CHECK(weight.dim() == 1 && weight.size(0) == x.size(0), InvalidArgument,
              "fused head: weight must be [S]");
  return FusedHeadLoss::apply(x, W, target, weight, chunk);
}

torch::Tensor head_token_losses(const torch::Tensor& x, const torch::Tensor& W, const torch::Tensor& target,
                                std::int64_t chunk) {
  check_inputs(x, W, target, chunk);
  torch::NoGradGuard no_grad;
  const auto S = x.size(0);
  torch::Tensor out = torch::empty({S}, x.options());
  // One logits buffer and one picked-logit buffer for every chunk: a fresh [chunk, V] tensor per
  // chunk would be a fresh mapping (page faults on every page) each time.
  const auto rows = std::min(chunk, std::max<std::int64_t>(S, 1));
  torch::Tensor logits_buf = torch::empty({rows, W.size(0)}, x.options()),
                picked_buf = torch::empty({rows, 1}, x.options());
  for (std::int64_t s0 = 0; s0 < S; s0 += chunk) {
    const auto n = std::min(chunk, S - s0);
    auto logits = logits_buf.narrow(0, 0, n), picked = picked_buf.narrow(0, 0, n);
    at::mm_out(logits, x.narrow(0, s0, n), W.t());
    at::gather_out(picked, logits, 1, target.narrow(0, s0, n).unsqueeze(1));
    auto o = out.narrow(0, s0, n);
    at::logsumexp_out(o, logits, {1});
    o.sub_(picked.squeeze(1));
  }
  return out;
}

torch::Tensor head_loss_reference(const torch::Tensor& x, const torch::Tensor& W, const torch::Tensor& target,
                                  const torch::Tensor& weight) {
  const auto logits = torch::matmul(x, W.t());
  const auto ce = torch::cross_entropy_loss(logits, target, {}, at::Reduction::None);
  return (ce * weight).sum();
}

}  // namespace burst::lm
