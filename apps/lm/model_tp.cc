// apps/lm/model_tp.cc — Megatron-LM tensor parallelism of the decoder (model_tp.h).
#include "model_tp.h"

#include <cmath>

#include "burst/error.h"
#include "runtime.h"

namespace burst::lm {
namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

torch::Tensor& param(Model& m, const std::string& name) {
  for (std::size_t i = 0; i < m.names().size(); ++i)
    if (m.names()[i] == name) return m.parameters()[i];
  BURST_FAIL(Internal, "no parameter named ", name);
}

}  // namespace

TpSplit tp_split(const std::string& name) {
  for (const char* col : {".wq", ".wk", ".wv", ".w1", ".w3"})
    if (ends_with(name, col)) return TpSplit::Rows;
  for (const char* row : {".wo", ".w2"})
    if (ends_with(name, row)) return TpSplit::Columns;
  return TpSplit::Replicated;
}

bool tensor_parallel(const RunOptions& run) { return run.tensor_parallel && run.engine == EngineKind::Dist; }

void validate_tp(const ModelConfig& cfg, int P) {
  BURST_CHECK(P >= 1 && cfg.heads % P == 0 && cfg.kv_heads % P == 0 && cfg.ffn_hidden % P == 0,
              InvalidArgument,
              "--strategy tp splits whole heads and the SwiGLU width over the ranks: heads=", cfg.heads,
              ", kv_heads=", cfg.kv_heads, " and ffn_hidden=", cfg.ffn_hidden, " must be multiples of P=", P);
}

torch::Tensor tp_shard(const torch::Tensor& full, TpSplit split, int rank, int P) {
  const torch::NoGradGuard no_grad;
  if (split == TpSplit::Replicated) return full.detach().clone();
  const int dim = split == TpSplit::Rows ? 0 : 1;
  const auto n = full.size(dim) / P;
  return full.detach().narrow(dim, rank * n, n).contiguous().clone();
}

torch::Tensor tp_unshard(const Communicator& comm, const torch::Tensor& shard, TpSplit split) {
  if (split == TpSplit::Replicated) return shard.detach();
  const torch::NoGradGuard no_grad;
  const auto s = shard.detach().contiguous();
  const int P = comm.size();
  torch::Tensor all = torch::empty({P, s.size(0), s.size(1)}, s.options());
  comm.all_gather(std::span(static_cast<const std::byte*>(s.data_ptr()), s.nbytes()),
                  std::span(static_cast<std::byte*>(all.data_ptr()), all.nbytes()));
  if (split == TpSplit::Rows) return all.reshape({P * s.size(0), s.size(1)});
  return all.permute({1, 0, 2}).reshape({s.size(0), P * s.size(1)});
}

void shard_model(Model& model, int rank, int P) {
  validate_tp(model.config(), P);
  for (std::size_t i = 0; i < model.parameters().size(); ++i) {
    const TpSplit split = tp_split(model.names()[i]);
    if (split != TpSplit::Replicated)
      model.parameters()[i] = tp_shard(model.parameters()[i], split, rank, P).set_requires_grad(true);
  }
}

torch::Tensor forward_tp(Model& model, const torch::Tensor& tokens, TpEngine& engine,
                         const Model::StageHook& on_stage) {
  const ModelConfig& c = model.config();
  const std::int64_t S = engine.attention_rows(), D = c.head_dim;
  const torch::ScalarType dt = model.compute_dtype(), kF32 = torch::kFloat32;
  BURST_CHECK(tokens.dim() == 1 && tokens.size(0) == static_cast<std::int64_t>(engine.positions().size()),
              InvalidArgument, "forward_tp: want tokens [", engine.positions().size(), "], got ",
              tokens.sizes());
  auto stage = [&](int l, Model::Stage st) {
    if (on_stage) on_stage(l, st);
  };
  const auto [cos, sin] = rope_tables(engine.sequence_positions(), c.head_dim, c.rope_base);
  torch::Tensor x = param(model, "embed").index_select(0, tokens);  // [S_local, d]
  for (int l = 0; l < c.layers; ++l) {
    const std::string pre = "layer" + std::to_string(l) + ".";
    const torch::Tensor &wq = param(model, pre + "wq"), &wk = param(model, pre + "wk"),
                        &wv = param(model, pre + "wv"), &wo = param(model, pre + "wo"),
                        &w1 = param(model, pre + "w1"), &w3 = param(model, pre + "w3"),
                        &w2 = param(model, pre + "w2");
    const std::int64_t H = wq.size(0) / D, H_kv = wk.size(0) / D;  // this rank's heads
    stage(l, Model::Stage::Projections);
    // The GEMMs in dt (Model::compute_dtype) as model.cc's blocks: the normed rows are cast to dt
    // before their all-gather (bf16: half the bytes, the same values), q, k rotated in fp32, the
    // row-parallel outputs reduce-scattered in fp32 and added to the fp32 residual stream.
    const auto h = sp_all_gather(rms_norm(x, param(model, pre + "attn_norm"), c.norm_eps).to(dt), engine);
    const auto q = apply_rope(linear(h, wq, dt).to(kF32).view({1, S, H, D}), cos, sin);  // h: [S, d]
    const auto k = apply_rope(linear(h, wk, dt).to(kF32).view({1, S, H_kv, D}), cos, sin);
    const auto v = linear(h, wv, dt).view({1, S, H_kv, D});
    stage(l, Model::Stage::Attention);
    const auto a = burst_attention(q, k, v, engine).reshape({S, H * D});
    stage(l, Model::Stage::Mlp);
    x = x + sp_reduce_scatter(linear(a, wo, dt), engine);
    const auto m = sp_all_gather(rms_norm(x, param(model, pre + "mlp_norm"), c.norm_eps).to(dt), engine);
    const auto gate = torch::silu(linear(m, w1, dt)) * linear(m, w3, dt);  // [S, F/P]
    x = x + sp_reduce_scatter(linear(gate, w2, dt), engine);
  }
  stage(c.layers, Model::Stage::Done);
  return rms_norm(x, param(model, "final_norm"), c.norm_eps);
}

TpGradients reduce_gradients_tp(Model& model, const Communicator& comm) {
  auto& params = model.parameters();
  std::vector<torch::Tensor> replicated;
  std::vector<double> split_sq{0.0};
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (tp_split(model.names()[i]) == TpSplit::Replicated)
      replicated.push_back(params[i].grad().reshape({-1}));
    else
      split_sq[0] += params[i].grad().to(torch::kFloat64).pow(2).sum().item<double>();
  }
  torch::Tensor flat = torch::cat(replicated);
  const std::int64_t before = comm.counters().bytes_sent;
  if (comm.size() > 1) comm.all_reduce_sum(flat.data_ptr<float>(), flat.numel());
  all_reduce_sum_f64(comm, split_sq);
  TpGradients out;
  out.bytes_sent = comm.counters().bytes_sent - before;
  std::int64_t off = 0;
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (tp_split(model.names()[i]) != TpSplit::Replicated) continue;
    params[i].mutable_grad().copy_(flat.narrow(0, off, params[i].numel()).view_as(params[i]));
    off += params[i].numel();
  }
  out.norm = std::sqrt(flat.to(torch::kFloat64).pow(2).sum().item<double>() + split_sq[0]);
  return out;
}

}  // namespace burst::lm
