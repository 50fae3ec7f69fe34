// apps/lm/tp_comm.cc — TpEngine and the sequence-parallel autograd collectives.
#include "tp_comm.h"

#include "burst/error.h"
#include "runtime.h"

namespace burst::lm {
namespace {

std::vector<std::int64_t> iota_positions(std::int64_t begin, std::int64_t n) {
  std::vector<std::int64_t> p(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) p[static_cast<std::size_t>(i)] = begin + i;
  return p;
}

// The whole sequence's positions, after checking that P ranks split it evenly.
std::vector<std::int64_t> sequence_positions_of(std::int64_t S_global, int P) {
  BURST_CHECK(S_global > 0 && S_global % P == 0, InvalidArgument,
              "tensor parallelism needs the sequence length ", S_global, " to be a positive multiple of the ",
              P, " ranks");
  return iota_positions(0, S_global);
}

void check_rows(const torch::Tensor& t, std::int64_t rows, bool allow_bf16, const char* what) {
  const bool dtype_ok =
      t.scalar_type() == torch::kFloat32 || (allow_bf16 && t.scalar_type() == torch::kBFloat16);
  BURST_CHECK(t.dim() == 2 && t.size(0) == rows && dtype_ok, InvalidArgument, what, ": want ",
              allow_bf16 ? "fp32 or bf16" : "fp32", " [", rows, ", C], got ", t.sizes(), " ",
              t.scalar_type());
}

struct GatherRows : public torch::autograd::Function<GatherRows> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, TpEngine* e) {
    ctx->saved_data["engine"] = reinterpret_cast<std::int64_t>(e);
    ctx->saved_data["dtype"] = static_cast<std::int64_t>(x.scalar_type());
    return e->all_gather_rows(x);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list g) {
    auto* e = reinterpret_cast<TpEngine*>(ctx->saved_data["engine"].toInt());
    const auto dt = static_cast<torch::ScalarType>(ctx->saved_data["dtype"].toInt());
    return {e->reduce_scatter_rows(g[0].to(torch::kFloat32)).to(dt), torch::Tensor()};
  }
};

struct ScatterRows : public torch::autograd::Function<ScatterRows> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& y, TpEngine* e) {
    ctx->saved_data["engine"] = reinterpret_cast<std::int64_t>(e);
    ctx->saved_data["dtype"] = static_cast<std::int64_t>(y.scalar_type());
    return e->reduce_scatter_rows(y.to(torch::kFloat32));
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list g) {
    auto* e = reinterpret_cast<TpEngine*>(ctx->saved_data["engine"].toInt());
    const auto dt = static_cast<torch::ScalarType>(ctx->saved_data["dtype"].toInt());
    return {e->all_gather_rows(g[0].to(dt)), torch::Tensor()};
  }
};

}  // namespace

TpEngine::TpEngine(const Communicator& comm, std::int64_t S_global, const Mask& mask, int num_threads,
                   DType dtype)
    : comm_(comm),
      S_global_(S_global),
      sequence_(sequence_positions_of(S_global, comm.size()), mask, S_global, num_threads, KernelImpl::Tiled,
                dtype) {
  dtype_ = dtype;
  const std::int64_t P = comm_.size(), S_local = S_global / P, r = comm_.rank();
  shard_ = iota_positions(r * S_local, S_local);
  const std::int64_t pairs = sequence_.planned_forward_pairs();
  pairs_share_ = pairs / P + (r < pairs % P ? 1 : 0);
}

void TpEngine::forward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                       const TensorView& lse) {
  const Stopwatch sw;
  sequence_.forward(q, k, v, out, lse);
  totals_.forward_seconds += sw.seconds();
  totals_.forward_pairs += pairs_share_;
  count_pass(q.dtype);
}

void TpEngine::backward(const TensorView& dout, const TensorView& q, const TensorView& k, const TensorView& v,
                        const TensorView& out, const TensorView& lse, const TensorView& dq,
                        const TensorView& dk, const TensorView& dv) {
  const Stopwatch sw;
  sequence_.backward(dout, q, k, v, out, lse, dq, dk, dv);
  totals_.backward_seconds += sw.seconds();
  totals_.backward_pairs += pairs_share_;
  totals_.backward_side = "local";
  count_pass(q.dtype);
}

torch::Tensor TpEngine::all_gather_rows(const torch::Tensor& x) {
  const std::int64_t S_local = static_cast<std::int64_t>(shard_.size());
  check_rows(x, S_local, true, "TpEngine::all_gather_rows");
  const auto xc = x.contiguous();
  torch::Tensor out = torch::empty({S_global_, x.size(1)}, xc.options());
  const std::int64_t before = comm_.counters().bytes_sent;
  // The rows' bytes in their dtype (fp32, or bf16's 16-bit patterns).
  comm_.all_gather(std::span(static_cast<const std::byte*>(xc.data_ptr()), xc.nbytes()),
                   std::span(static_cast<std::byte*>(out.data_ptr()), out.nbytes()));
  totals_.bytes_sent += comm_.counters().bytes_sent - before;
  return out;
}

torch::Tensor TpEngine::reduce_scatter_rows(const torch::Tensor& y) {
  const std::int64_t S_local = static_cast<std::int64_t>(shard_.size());
  check_rows(y, S_global_, false, "TpEngine::reduce_scatter_rows");
  const auto yc = y.contiguous();
  torch::Tensor out = torch::empty({S_local, y.size(1)}, yc.options());
  const std::vector<std::int64_t> counts(static_cast<std::size_t>(comm_.size()), S_local * y.size(1));
  const std::int64_t before = comm_.counters().bytes_sent;
  comm_.reduce_scatter(yc.data_ptr<float>(), counts, out.data_ptr<float>());
  totals_.bytes_sent += comm_.counters().bytes_sent - before;
  return out;
}

torch::Tensor sp_all_gather(const torch::Tensor& x, TpEngine& engine) {
  return GatherRows::apply(x, &engine);
}

torch::Tensor sp_reduce_scatter(const torch::Tensor& y, TpEngine& engine) {
  return ScatterRows::apply(y, &engine);
}

}  // namespace burst::lm
