// apps/lm/model.cc — the decoder's parameters and forward.
#include "model.h"

#include <cmath>

#include "burst/error.h"

namespace burst::lm {

void ModelConfig::validate() const {
  BURST_CHECK(vocab_size > 1 && d_model > 0 && layers > 0 && heads > 0 && kv_heads > 0 && head_dim > 0 &&
                  ffn_hidden > 0,
              InvalidArgument, "model sizes must be positive: vocab=", vocab_size, " d_model=", d_model,
              " layers=", layers, " heads=", heads, " kv_heads=", kv_heads, " head_dim=", head_dim,
              " ffn_hidden=", ffn_hidden);
  BURST_CHECK(heads % kv_heads == 0, InvalidArgument, "heads=", heads,
              " not divisible by kv_heads=", kv_heads);
  BURST_CHECK(head_dim % 2 == 0 && head_dim <= 256, InvalidArgument, "head_dim=", head_dim,
              " must be even (RoPE) and <= 256 (kernels)");
}

std::int64_t ModelConfig::num_parameters() const {
  const std::int64_t d = d_model, qd = std::int64_t{heads} * head_dim,
                     kvd = std::int64_t{kv_heads} * head_dim;
  const std::int64_t per_layer = 2 * d + d * qd + 2 * d * kvd + qd * d + 3 * d * ffn_hidden;
  return 2 * std::int64_t{vocab_size} * d + layers * per_layer + d;
}

nlohmann::json ModelConfig::to_json() const {
  return {{"vocab_size", vocab_size}, {"d_model", d_model},
          {"layers", layers},         {"heads", heads},
          {"kv_heads", kv_heads},     {"head_dim", head_dim},
          {"ffn_hidden", ffn_hidden}, {"rope_base", rope_base},
          {"norm_eps", norm_eps},     {"seed", seed}};
}

ModelConfig ModelConfig::from_json(const nlohmann::json& j) {
  ModelConfig c;
  c.vocab_size = j.at("vocab_size").get<int>();
  c.d_model = j.at("d_model").get<int>();
  c.layers = j.at("layers").get<int>();
  c.heads = j.at("heads").get<int>();
  c.kv_heads = j.at("kv_heads").get<int>();
  c.head_dim = j.at("head_dim").get<int>();
  c.ffn_hidden = j.at("ffn_hidden").get<int>();
  c.rope_base = j.at("rope_base").get<double>();
  c.norm_eps = j.at("norm_eps").get<double>();
  c.seed = j.at("seed").get<std::uint64_t>();
  c.validate();
  return c;
}

std::pair<torch::Tensor, torch::Tensor> rope_tables(const std::vector<std::int64_t>& positions, int head_dim,
                                                    double base) {
  const auto S = static_cast<std::int64_t>(positions.size());
  const int half = head_dim / 2;
  torch::Tensor cos = torch::empty({S, half}), sin = torch::empty({S, half});
  float* c = cos.data_ptr<float>();
  float* s = sin.data_ptr<float>();
  std::vector<double> inv_freq(static_cast<std::size_t>(half));
  for (int i = 0; i < half; ++i) inv_freq[static_cast<std::size_t>(i)] = std::pow(base, -2.0 * i / head_dim);
  for (std::int64_t t = 0; t < S; ++t)
    for (int i = 0; i < half; ++i) {
      const double a =
          static_cast<double>(positions[static_cast<std::size_t>(t)]) * inv_freq[static_cast<std::size_t>(i)];
      c[t * half + i] = static_cast<float>(std::cos(a));
      s[t * half + i] = static_cast<float>(std::sin(a));
    }
  return {cos, sin};
}

torch::Tensor apply_rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  const auto half = x.size(3) / 2;
  const auto x1 = x.narrow(3, 0, half), x2 = x.narrow(3, half, half);
  const auto c = cos.unsqueeze(0).unsqueeze(2).to(x.scalar_type());  // [1,S,1,D/2]
  const auto s = sin.unsqueeze(0).unsqueeze(2).to(x.scalar_type());
  return torch::cat({x1 * c - x2 * s, x1 * s + x2 * c}, 3);
}

torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& w, double eps) {
  return x * torch::rsqrt(x.pow(2).mean(-1, true) + eps) * w;
}

torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& w, torch::ScalarType dt) {
  return torch::matmul(x.to(dt), w.to(dt).t());
}

namespace {
constexpr auto kF32 = torch::kFloat32;

// x + W2·(silu(W1·m) ∘ W3·m) with m = RMSNorm(x): the MLP block with its residual. The norm and
// the residual stream are fp32; the three GEMMs and the gate run in `dt` (Model::compute_dtype).
torch::Tensor mlp_block(const torch::Tensor& x, const torch::Tensor& norm, const torch::Tensor& w1,
                        const torch::Tensor& w3, const torch::Tensor& w2, double eps, torch::ScalarType dt) {
  const auto m = rms_norm(x, norm, eps).to(dt);
  const auto gate = torch::silu(linear(m, w1, dt)) * linear(m, w3, dt);
  return x + linear(gate, w2, dt).to(kF32);
}

// The MLP block with selective recomputation: forward saves only its inputs (x and the
// weights, which exist anyway); backward re-runs mlp_block under autograd and differentiates it.
struct RecomputedMlp : public torch::autograd::Function<RecomputedMlp> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& norm, const torch::Tensor& w1, const torch::Tensor& w3,
                               const torch::Tensor& w2, double eps, torch::ScalarType dt) {
    ctx->save_for_backward({x, norm, w1, w3, w2});
    ctx->saved_data["eps"] = eps;
    ctx->saved_data["dt"] = static_cast<std::int64_t>(dt);
    return mlp_block(x, norm, w1, w3, w2, eps, dt);  // grad mode is off inside Function::forward
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    torch::autograd::variable_list in;
    for (const auto& t : ctx->get_saved_variables()) in.push_back(t.detach().requires_grad_(true));
    torch::Tensor y;
    {
      const torch::AutoGradMode enable(true);
      y = mlp_block(in[0], in[1], in[2], in[3], in[4], ctx->saved_data["eps"].toDouble(),
                    static_cast<torch::ScalarType>(ctx->saved_data["dt"].toInt()));
    }
    auto g = torch::autograd::grad({y}, in, {grad_out[0]});
    return {g[0], g[1], g[2], g[3], g[4], torch::Tensor(), torch::Tensor()};
  }
};

// Weights of one layer, in Model's parameter order.
enum LayerWeight { kAttnNorm, kWq, kWk, kWv, kWo, kMlpNorm, kW1, kW3, kW2, kLayerWeights };

struct LayerShape {
  std::int64_t H, H_kv, D;
  double eps;
  torch::ScalarType dt;  ///< GEMM dtype (Model::compute_dtype)
};

// x + Wo·attention(RoPE(Wq·h), RoPE(Wk·h), Wv·h) with h = RMSNorm(x): the attention block with
// its residual. `cache` as in burst_attention. The GEMMs run in sh.dt; RoPE rotates in fp32 (the
// angles reach 10⁶ rad); burst_attention casts q, k, v to the engine's dtype.
torch::Tensor attention_block(const torch::Tensor& x, const std::vector<torch::Tensor>& w,
                              const torch::Tensor& cos, const torch::Tensor& sin, AttentionEngine& engine,
                              AttentionCache* cache, const LayerShape& sh) {
  const auto S = x.size(0);
  const auto h = rms_norm(x, w[kAttnNorm], sh.eps).to(sh.dt);
  const auto q = apply_rope(linear(h, w[kWq], sh.dt).to(kF32).view({1, S, sh.H, sh.D}), cos, sin);
  const auto k = apply_rope(linear(h, w[kWk], sh.dt).to(kF32).view({1, S, sh.H_kv, sh.D}), cos, sin);
  const auto v = linear(h, w[kWv], sh.dt).view({1, S, sh.H_kv, sh.D});
  const auto a = burst_attention(q, k, v, engine, cache).reshape({S, sh.H * sh.D});
  return x + linear(a, w[kWo], sh.dt).to(kF32);
}

// One decoder layer: the attention block, then the MLP block.
torch::Tensor layer_block(const torch::Tensor& x, const std::vector<torch::Tensor>& w,
                          const torch::Tensor& cos, const torch::Tensor& sin, AttentionEngine& engine,
                          AttentionCache* cache, const LayerShape& sh) {
  return mlp_block(attention_block(x, w, cos, sin, engine, cache, sh), w[kMlpNorm], w[kW1], w[kW3], w[kW2],
                   sh.eps, sh.dt);
}

// Layer checkpointing with the attention output cached (BurstEngine's "full" and "seq-wise"
// modes, docs/algorithm.md §9.1): forward keeps the layer input x, O [1, S, H, D] and lse
// [1, H, S] (seq-wise: their later half); backward re-runs the layer under autograd with the
// attention forward replayed from the cache (full: no attention FLOPs and no messages; seq-wise:
// the first half recomputed on engine.first_half()), then differentiates it — the attention
// backward runs once.
struct CheckpointedLayer : public torch::autograd::Function<CheckpointedLayer> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& w0, const torch::Tensor& w1, const torch::Tensor& w2,
                               const torch::Tensor& w3, const torch::Tensor& w4, const torch::Tensor& w5,
                               const torch::Tensor& w6, const torch::Tensor& w7, const torch::Tensor& w8,
                               const torch::Tensor& cos, const torch::Tensor& sin, AttentionEngine* engine,
                               LayerShape sh, bool seq_wise) {
    AttentionCache cache;
    cache.second_half_only = seq_wise;
    const std::vector<torch::Tensor> w{w0, w1, w2, w3, w4, w5, w6, w7, w8};
    torch::Tensor y = layer_block(x, w, cos, sin, *engine, &cache, sh);
    ctx->save_for_backward({x, w0, w1, w2, w3, w4, w5, w6, w7, w8, cos, sin, cache.out, cache.lse});
    ctx->saved_data["engine"] = reinterpret_cast<std::int64_t>(engine);
    ctx->saved_data["shape"] = std::vector<std::int64_t>{sh.H, sh.H_kv, sh.D};
    ctx->saved_data["eps"] = sh.eps;
    ctx->saved_data["dt"] = static_cast<std::int64_t>(sh.dt);
    ctx->saved_data["seq_wise"] = seq_wise;
    return y;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    const auto saved = ctx->get_saved_variables();
    torch::autograd::variable_list in;  // x and the 9 weights
    for (int i = 0; i <= kLayerWeights; ++i)
      in.push_back(saved[static_cast<std::size_t>(i)].detach().requires_grad_(true));
    auto* engine = reinterpret_cast<AttentionEngine*>(ctx->saved_data["engine"].toInt());
    const auto dims = ctx->saved_data["shape"].toIntVector();
    const LayerShape sh{dims[0], dims[1], dims[2], ctx->saved_data["eps"].toDouble(),
                        static_cast<torch::ScalarType>(ctx->saved_data["dt"].toInt())};
    AttentionCache cache{saved[kLayerWeights + 3], saved[kLayerWeights + 4],
                         ctx->saved_data["seq_wise"].toBool()};
    torch::Tensor y;
    {
      const torch::AutoGradMode enable(true);
      const std::vector<torch::Tensor> w(in.begin() + 1, in.end());
      y = layer_block(in[0], w, saved[kLayerWeights + 1], saved[kLayerWeights + 2], *engine, &cache, sh);
    }
    auto g = torch::autograd::grad({y}, in, {grad_out[0]});
    g.resize(g.size() + 5);  // cos, sin, engine, shape, seq_wise: no gradient
    return g;
  }
};

}  // namespace

Model::Model(const ModelConfig& cfg) : cfg_(cfg) {
  cfg_.validate();
  torch::manual_seed(cfg_.seed);
  const std::int64_t d = cfg_.d_model, qd = std::int64_t{cfg_.heads} * cfg_.head_dim,
                     kvd = std::int64_t{cfg_.kv_heads} * cfg_.head_dim, f = cfg_.ffn_hidden;
  const double std0 = 0.02, std_out = 0.02 / std::sqrt(2.0 * cfg_.layers);  // GPT-2 init
  auto add = [&](const std::string& name, torch::Tensor t) {
    names_.push_back(name);
    params_.push_back(t.set_requires_grad(true));
  };
  add("embed", torch::randn({cfg_.vocab_size, d}) * std0);
  for (int l = 0; l < cfg_.layers; ++l) {
    const std::string pre = "layer" + std::to_string(l) + ".";
    add(pre + "attn_norm", torch::ones({d}));
    add(pre + "wq", torch::randn({qd, d}) * std0);
    add(pre + "wk", torch::randn({kvd, d}) * std0);
    add(pre + "wv", torch::randn({kvd, d}) * std0);
    add(pre + "wo", torch::randn({d, qd}) * std_out);
    add(pre + "mlp_norm", torch::ones({d}));
    add(pre + "w1", torch::randn({f, d}) * std0);
    add(pre + "w3", torch::randn({f, d}) * std0);
    add(pre + "w2", torch::randn({d, f}) * std_out);
  }
  add("final_norm", torch::ones({d}));
  add("head", torch::randn({cfg_.vocab_size, d}) * std0);
}

torch::Tensor& Model::p(const std::string& name) {
  for (std::size_t i = 0; i < names_.size(); ++i)
    if (names_[i] == name) return params_[i];
  BURST_FAIL(Internal, "no parameter named ", name);
}

namespace {

/// out = RMSNorm(x)·w row-wise, written into `out` [n, d] with `row` [n, 1] as scratch; the same
/// operations in the same order as rms_norm.
void rms_norm_into(torch::Tensor& out, torch::Tensor& row, const torch::Tensor& x, const torch::Tensor& w,
                   double eps) {
  at::mul_out(out, x, x);
  at::mean_out(row, out, {-1}, true);
  row.add_(eps).rsqrt_();
  at::mul_out(out, x, row);
  out.mul_(w);
}

/// out = RoPE(x) (apply_rope's arithmetic) for x, out [n, H, D], cos, sin [n, 1, D/2].
void rope_into(torch::Tensor& out, const torch::Tensor& x, const torch::Tensor& cos,
               const torch::Tensor& sin) {
  const auto half = x.size(2) / 2;
  const auto x1 = x.narrow(2, 0, half), x2 = x.narrow(2, half, half);
  auto o1 = out.narrow(2, 0, half), o2 = out.narrow(2, half, half);
  at::mul_out(o1, x1, cos);
  o1.addcmul_(x2, sin, -1);
  at::mul_out(o2, x1, sin);
  o2.addcmul_(x2, cos);
}

}  // namespace

void Model::set_inference_rows(std::int64_t rows) {
  BURST_CHECK(rows >= 1, InvalidArgument, "inference rows ", rows, " must be >= 1");
  inference_rows_ = rows;
}

void Model::set_compute_dtype(torch::ScalarType dt) {
  BURST_CHECK(dt == torch::kFloat32 || dt == torch::kBFloat16, InvalidArgument, "compute dtype ", dt,
              " is not float32 or bfloat16");
  compute_dtype_ = dt;
}

torch::Tensor Model::forward_inference(const torch::Tensor& tokens, AttentionEngine& engine,
                                       const StageHook& on_stage) {
  BURST_CHECK(!torch::GradMode::is_enabled(), InvalidArgument,
              "Model::forward_inference needs grad mode off (c10::InferenceMode or torch::NoGradGuard)");
  const auto S = tokens.size(0);
  const std::int64_t d = cfg_.d_model, H = cfg_.heads, H_kv = cfg_.kv_heads, D = cfg_.head_dim,
                     F = cfg_.ffn_hidden,
                     rows = std::min<std::int64_t>(inference_rows_, std::max<std::int64_t>(S, 1));
  const auto [cos2, sin2] = rope_tables(engine.positions(), cfg_.head_dim, cfg_.rope_base);
  const auto cos = cos2.unsqueeze(1), sin = sin2.unsqueeze(1);  // [S, 1, D/2]
  const auto f32 = torch::TensorOptions().dtype(kF32);
  // dt: the GEMMs' dtype; adt: attention's storage dtype (q, k, v, o). fp32 for both by default;
  // with bf16 the same arithmetic as forward()'s autocast-style casts, through fp32 scratch.
  const auto dt = compute_dtype_, adt = to_torch(engine.dtype());
  const bool mm16 = dt != kF32, any16 = mm16 || adt != kF32;
  const auto mm = torch::TensorOptions().dtype(dt), ao = torch::TensorOptions().dtype(adt);
  // Whole-sequence buffers: the residual stream and the attention inputs/outputs.
  torch::Tensor x = p("embed").index_select(0, tokens);  // [S, d], updated in place
  torch::Tensor q = torch::empty({1, S, H, D}, ao), k = torch::empty({1, S, H_kv, D}, ao),
                v = torch::empty({1, S, H_kv, D}, ao), o = torch::empty({1, S, H, D}, ao),
                lse = torch::empty({1, H, S}, f32);
  // Per-chunk scratch, reused by every chunk of every layer.
  torch::Tensor h = torch::empty({rows, d}, f32), row = torch::empty({rows, 1}, f32),
                lin = torch::empty({rows, H * D}, mm), g = torch::empty({rows, F}, mm),
                u = torch::empty({rows, F}, mm);
  // Only with a 16-bit dtype: h and o in the GEMM dtype, a projection widened to fp32 and its
  // rotation, the output projection's product.
  torch::Tensor hm, om, lin32, rot, prod;
  if (any16) {
    hm = torch::empty({rows, d}, mm);
    om = torch::empty({rows, H * D}, mm);
    lin32 = torch::empty({rows, H * D}, f32);
    rot = torch::empty({rows, H * D}, f32);
    prod = torch::empty({rows, d}, mm);
  }
  // `src` (n rows) in dtype `want`: itself, or copied (rounded / widened) into `scratch`.
  auto in_dtype = [](const torch::Tensor& src, torch::Tensor& scratch) {
    if (src.scalar_type() == scratch.scalar_type()) return src;
    return scratch.narrow(0, 0, src.size(0)).narrow(1, 0, src.size(1)).copy_(src);
  };
  const auto q2 = q.view({S, H * D}), k2 = k.view({S, H_kv * D}), v2 = v.view({S, H_kv * D}),
             o2 = o.view({S, H * D});
  auto stage = [&](int l, Stage st) {
    if (on_stage) on_stage(l, st);
  };
  for (int l = 0; l < cfg_.layers; ++l) {
    const std::string pre = "layer" + std::to_string(l) + ".";
    // The weights in the GEMM dtype, once per layer (the same tensors for fp32).
    const torch::Tensor wq = p(pre + "wq").to(dt), wk = p(pre + "wk").to(dt), wv = p(pre + "wv").to(dt),
                        wo = p(pre + "wo").to(dt), w1 = p(pre + "w1").to(dt), w3 = p(pre + "w3").to(dt),
                        w2 = p(pre + "w2").to(dt);
    stage(l, Stage::Projections);
    for (std::int64_t r0 = 0; r0 < S; r0 += rows) {
      const auto n = std::min(rows, S - r0);
      auto hc = h.narrow(0, 0, n), rc = row.narrow(0, 0, n);
      rms_norm_into(hc, rc, x.narrow(0, r0, n), p(pre + "attn_norm"), cfg_.norm_eps);
      const auto hmc = any16 ? in_dtype(hc, hm) : hc;
      const auto c = cos.narrow(0, r0, n), s = sin.narrow(0, r0, n);
      // RoPE in fp32 from the projection `lc` into `out` (the whole-sequence buffer's rows).
      auto rope = [&](torch::Tensor out, const torch::Tensor& lc, std::int64_t heads) {
        if (!any16) return rope_into(out, lc.view({n, heads, D}), c, s);
        auto r = rot.narrow(0, 0, n).narrow(1, 0, heads * D).view({n, heads, D});
        rope_into(r, in_dtype(lc, lin32).view({n, heads, D}), c, s);
        out.copy_(r);
      };
      auto lq = lin.narrow(0, 0, n), lk = lin.narrow(0, 0, n).narrow(1, 0, H_kv * D);
      at::mm_out(lq, hmc, wq.t());
      rope(q2.narrow(0, r0, n).view({n, H, D}), lq, H);
      at::mm_out(lk, hmc, wk.t());
      rope(k2.narrow(0, r0, n).view({n, H_kv, D}), lk, H_kv);
      auto vc = v2.narrow(0, r0, n);
      if (dt == adt) {
        at::mm_out(vc, hmc, wv.t());
      } else {
        auto lv = lin.narrow(0, 0, n).narrow(1, 0, H_kv * D);
        at::mm_out(lv, hmc, wv.t());
        vc.copy_(lv);
      }
    }
    stage(l, Stage::Attention);
    const DType edt = engine.dtype();
    engine.forward(make_view(q.data_ptr(), edt, {1, S, H, D}), make_view(k.data_ptr(), edt, {1, S, H_kv, D}),
                   make_view(v.data_ptr(), edt, {1, S, H_kv, D}), make_view(o.data_ptr(), edt, {1, S, H, D}),
                   make_view(lse.data_ptr<float>(), {1, H, S}));
    stage(l, Stage::Mlp);
    for (std::int64_t r0 = 0; r0 < S; r0 += rows) {
      const auto n = std::min(rows, S - r0);
      auto xc = x.narrow(0, r0, n), hc = h.narrow(0, 0, n), rc = row.narrow(0, 0, n), gc = g.narrow(0, 0, n),
           uc = u.narrow(0, 0, n);
      if (!any16) {  // fp32: the output projection and the residual in one fused addmm
        xc.addmm_(o2.narrow(0, r0, n), wo.t());
      } else {  // x + (o·Woᵀ in dt), as forward()'s x + linear(a, Wo).to(fp32)
        auto pc = prod.narrow(0, 0, n);
        if (mm16) {
          at::mm_out(pc, in_dtype(o2.narrow(0, r0, n), om), wo.t());
          xc.add_(pc);
        } else {
          xc.addmm_(in_dtype(o2.narrow(0, r0, n), rot), wo.t());
        }
      }
      rms_norm_into(hc, rc, xc, p(pre + "mlp_norm"), cfg_.norm_eps);
      const auto hmc = any16 ? in_dtype(hc, hm) : hc;
      at::mm_out(gc, hmc, w1.t());
      torch::silu_(gc);
      at::mm_out(uc, hmc, w3.t());
      gc.mul_(uc);
      if (mm16) {
        auto pc = prod.narrow(0, 0, n);
        at::mm_out(pc, gc, w2.t());
        xc.add_(pc);
      } else {
        xc.addmm_(gc, w2.t());
      }
    }
  }
  stage(cfg_.layers, Stage::Done);
  for (std::int64_t r0 = 0; r0 < S; r0 += rows) {  // the final norm, in place row chunk by chunk
    const auto n = std::min(rows, S - r0);
    auto hc = h.narrow(0, 0, n), rc = row.narrow(0, 0, n);
    rms_norm_into(hc, rc, x.narrow(0, r0, n), p("final_norm"), cfg_.norm_eps);
    x.narrow(0, r0, n).copy_(hc);
  }
  return x;
}

torch::Tensor Model::forward(const torch::Tensor& tokens, AttentionEngine& engine,
                             const StageHook& on_stage) {
  if (!torch::GradMode::is_enabled()) return forward_inference(tokens, engine, on_stage);
  const auto [cos, sin] = rope_tables(engine.positions(), cfg_.head_dim, cfg_.rope_base);
  torch::Tensor x = p("embed").index_select(0, tokens);  // [S, d]
  const LayerShape sh{cfg_.heads, cfg_.kv_heads, cfg_.head_dim, cfg_.norm_eps, compute_dtype_};
  const bool grad = torch::GradMode::is_enabled();
  for (int l = 0; l < cfg_.layers; ++l) {
    const std::string pre = "layer" + std::to_string(l) + ".";
    std::vector<torch::Tensor> w;
    for (const char* n : {"attn_norm", "wq", "wk", "wv", "wo", "mlp_norm", "w1", "w3", "w2"})
      w.push_back(p(pre + n));
    if (grad && (recompute_ == Recompute::Layer || recompute_ == Recompute::SeqWise)) {
      x = CheckpointedLayer::apply(x, w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7], w[8], cos, sin, &engine,
                                   sh, recompute_ == Recompute::SeqWise);
      continue;
    }
    x = attention_block(x, w, cos, sin, engine, nullptr, sh);
    x = grad && recompute_ == Recompute::Mlp
            ? RecomputedMlp::apply(x, w[kMlpNorm], w[kW1], w[kW3], w[kW2], cfg_.norm_eps, compute_dtype_)
            : mlp_block(x, w[kMlpNorm], w[kW1], w[kW3], w[kW2], cfg_.norm_eps, compute_dtype_);
  }
  return rms_norm(x, p("final_norm"), cfg_.norm_eps);
}

}  // namespace burst::lm
