// Tests for apps/lm model pieces against their reference twins (no MPI): the fused chunked
// LM head + loss vs full-logits cross-entropy; the burst attention autograd function vs
// materialised fp64 attention (document-causal mask, GQA, explicit positions); RoPE's
// relative-position property; checkpoints refusing corruption.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "burst/error.h"
#include "lm/attention_fn.h"
#include "lm/checkpoint.h"
#include "lm/fused_head_loss.h"
#include "lm/model.h"

namespace fs = std::filesystem;

namespace {

double max_rel(const torch::Tensor& a, const torch::Tensor& b) {
  const auto d = (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max().item<double>();
  return d / std::max(b.to(torch::kFloat64).abs().max().item<double>(), 1e-30);
}

// A model small enough for exact comparisons in milliseconds (GQA 4:2).
burst::lm::ModelConfig tiny_config() {
  burst::lm::ModelConfig cfg;
  cfg.vocab_size = 64;
  cfg.d_model = 32;
  cfg.heads = 4;
  cfg.kv_heads = 2;
  cfg.head_dim = 8;
  cfg.ffn_hidden = 48;
  return cfg;
}

}  // namespace

TEST(LmModel, FusedHeadLossMatchesFullLogits) {
  torch::manual_seed(3);
  const std::int64_t S = 37, d = 16, V = 50;
  const auto x0 = torch::randn({S, d}), W0 = torch::randn({V, d}) * 0.3;
  const auto target = torch::randint(0, V, {S}, torch::kInt64);
  auto weight = torch::ones({S});
  weight.index_put_({torch::indexing::Slice(0, 5)}, 0.0f);  // rows excluded from the loss
  auto x_ref = x0.clone().set_requires_grad(true), W_ref = W0.clone().set_requires_grad(true);
  const auto ref = burst::lm::head_loss_reference(x_ref, W_ref, target, weight);
  ref.backward();
  // Chunk sizes: 1, a non-divisor, exactly S and more than S.
  for (std::int64_t chunk : {1, 7, 37, 64}) {
    auto x = x0.clone().set_requires_grad(true), W = W0.clone().set_requires_grad(true);
    const auto loss = burst::lm::fused_head_loss(x, W, target, weight, chunk);
    (loss * 0.5).backward();  // a non-unit upstream gradient
    // fp32 logits over V=50, d=16: ~1e-6 relative against the same-precision reference.
    EXPECT_LT(std::abs(loss.item<double>() - ref.item<double>()) / ref.item<double>(), 1e-5) << chunk;
    EXPECT_LT(max_rel(x.grad(), x_ref.grad() * 0.5), 1e-5) << chunk;
    EXPECT_LT(max_rel(W.grad(), W_ref.grad() * 0.5), 1e-5) << chunk;
    const auto per_token = burst::lm::head_token_losses(x0, W0, target, chunk);
    EXPECT_LT(std::abs((per_token * weight).sum().item<double>() - ref.item<double>()) / ref.item<double>(),
              1e-5);
  }
  EXPECT_THROW(burst::lm::fused_head_loss(x0, W0.narrow(1, 0, 8), target, weight, 4), burst::Error);
}

TEST(LmModel, AttentionFunctionMatchesFp64Reference) {
  torch::manual_seed(5);
  // Document-causal mask over 3 documents; the engine holds a strided subset of positions, as a
  // rank of the striped layout does (keys are the same subset: self-attention on the slice).
  const std::int64_t S_global = 90, H = 4, H_kv = 2, D = 16;
  const burst::Mask mask = burst::Mask::document({0, 20, 61, 90}, /*causal=*/true);
  std::vector<std::int64_t> pos;
  for (std::int64_t p = 1; p < S_global; p += 2) pos.push_back(p);
  const auto S = static_cast<std::int64_t>(pos.size());
  burst::lm::LocalEngine engine(pos, mask, S_global, 1);
  const auto q0 = torch::randn({1, S, H, D}), k0 = torch::randn({1, S, H_kv, D}),
             v0 = torch::randn({1, S, H_kv, D});
  const auto dout = torch::randn({1, S, H, D});
  auto q = q0.clone().set_requires_grad(true), k = k0.clone().set_requires_grad(true),
       v = v0.clone().set_requires_grad(true);
  const auto out = burst::lm::burst_attention(q, k, v, engine);
  (out * dout).sum().backward();
  auto qr = q0.to(torch::kFloat64).set_requires_grad(true),
       kr = k0.to(torch::kFloat64).set_requires_grad(true),
       vr = v0.to(torch::kFloat64).set_requires_grad(true);
  const auto ref = burst::lm::reference_attention(qr, kr, vr, pos, pos, mask, S_global);
  (ref * dout.to(torch::kFloat64)).sum().backward();
  // fp32 kernels against the fp64 oracle at S ≤ 45, D = 16: errors ~1e-6; 1e-4 leaves room
  // for the backward's longer accumulation chains while still catching any wrong term.
  EXPECT_LT(max_rel(out, ref), 1e-4);
  EXPECT_LT(max_rel(q.grad(), qr.grad()), 1e-4);
  EXPECT_LT(max_rel(k.grad(), kr.grad()), 1e-4);
  EXPECT_LT(max_rel(v.grad(), vr.grad()), 1e-4);
  EXPECT_GT(engine.totals().forward_pairs, 0);
  EXPECT_THROW(burst::lm::LocalEngine({3, 2}, mask, S_global, 1), burst::Error);
}

// bf16 through the autograd function (the `--dtype bf16` path): q, k, v cast to bf16 inside,
// out bf16, dq, dk, dv the kernels' fp32 accumulators. The slow twin is the fp64 reference on the
// SAME bf16-rounded inputs. What bf16 adds over fp32 (tests/test_attention_bf16.cc derives it):
// P and dS rounded to bf16 as GEMM operands, P̃ = P(1 + ε), |ε| ≤ u = 2^-8, so per element, to
// first order,
//     out_id: u·Σ_j P_ij·|v_jd| + u·|out_id| (out's own rounding)
//     dv_jd: u·Σ_i P_ij·|dO_id|     dk_jd: u·τ·Σ_i |dS_ij|·|q_id|     dq_id: u·τ·Σ_j |dS_ij|·|k_jd|
// with |dS_ij| widened by the bf16 out's effect on delta (below)
// (sums over visible pairs and a GQA group's query heads), computed here in fp64 from the
// reference's P; plus the fp32 rule of the fp32 test above (1e-4 of the largest element). A
// missed cast, a wrong view dtype or a rounded gradient gives errors of order |values|.
TEST(LmModel, AttentionFunctionBf16MatchesFp64ReferenceOnRoundedInputs) {
  torch::manual_seed(6);
  const std::int64_t S_global = 90, H = 4, H_kv = 2, D = 16, G = H / H_kv;
  const burst::Mask mask = burst::Mask::document({0, 20, 61, 90}, /*causal=*/true);
  std::vector<std::int64_t> pos;
  for (std::int64_t p = 1; p < S_global; p += 2) pos.push_back(p);
  const auto S = static_cast<std::int64_t>(pos.size());
  burst::lm::LocalEngine engine(pos, mask, S_global, 1, burst::KernelImpl::Tiled, burst::DType::BF16);
  const auto q0 = torch::randn({1, S, H, D}), k0 = torch::randn({1, S, H_kv, D}),
             v0 = torch::randn({1, S, H_kv, D}), dout = torch::randn({1, S, H, D});
  auto q = q0.clone().set_requires_grad(true), k = k0.clone().set_requires_grad(true),
       v = v0.clone().set_requires_grad(true);
  const auto out = burst::lm::burst_attention(q, k, v, engine);
  ASSERT_EQ(out.scalar_type(), torch::kBFloat16);
  (out.to(torch::kFloat32) * dout).sum().backward();
  ASSERT_EQ(q.grad().scalar_type(), torch::kFloat32);
  EXPECT_EQ(engine.totals().passes, 2);
  EXPECT_EQ(engine.totals().bf16_passes, 2);

  const auto f64 = [](const torch::Tensor& t) { return t.to(torch::kBFloat16).to(torch::kFloat64); };
  auto qr = f64(q0).set_requires_grad(true), kr = f64(k0).set_requires_grad(true),
       vr = f64(v0).set_requires_grad(true);
  const auto dO = f64(dout);  // the engine receives dO rounded to bf16 (out's dtype)
  const auto ref = burst::lm::reference_attention(qr, kr, vr, pos, pos, mask, S_global);
  (ref * dO).sum().backward();
  // P [1, H, S, S] from the reference itself: the values are the identity (one-hot columns).
  const auto eye = torch::eye(S, torch::kFloat64).view({1, S, 1, S}).expand({1, S, H_kv, S});
  const auto P = burst::lm::reference_attention(qr.detach(), kr.detach(), eye, pos, pos, mask, S_global)
                     .permute({0, 2, 1, 3});  // [1, H, S_q, S_k]
  const auto bhsd = [&](const torch::Tensor& t) {
    return t.repeat_interleave(H / t.size(2), 2).permute({0, 2, 1, 3});
  };
  const auto group_sum = [&](const torch::Tensor& t) {  // [1, H, S, D] → [1, S, H_kv, D]
    return t.view({1, H_kv, G, S, D}).sum(2).permute({0, 2, 1, 3});
  };
  const double u = 0x1.0p-8, tau = 1.0 / std::sqrt(static_cast<double>(D));
  const auto Q = bhsd(qr.detach()), K = bhsd(kr.detach()), V = bhsd(vr.detach()), dOh = bhsd(dO);
  const auto O = bhsd(ref.detach());
  const auto delta = (dOh * O).sum(-1, true);
  // |dS| plus what out's rounding does to delta = rowsum(dO∘Õ): |δdelta_i| ≤ u·Σ_d |dO_id|·|O_id|,
  // which moves dS_ij by P_ij·δdelta_i (the kernel's delta comes from the bf16 out).
  const auto dS =
      (P * (torch::matmul(dOh, V.transpose(2, 3)) - delta)).abs() + P * (dOh.abs() * O.abs()).sum(-1, true);
  const auto bounds = std::vector<std::pair<torch::Tensor, torch::Tensor>>{
      {u * torch::matmul(P, V.abs()).permute({0, 2, 1, 3}) + u * ref.detach().abs(), ref.detach()},
      {u * group_sum(torch::matmul(P.transpose(2, 3), dOh.abs())), vr.grad()},
      {u * tau * group_sum(torch::matmul(dS.transpose(2, 3), Q.abs())), kr.grad()},
      {u * tau * torch::matmul(dS, K.abs()).permute({0, 2, 1, 3}), qr.grad()}};
  const std::vector<torch::Tensor> got{out, v.grad(), k.grad(), q.grad()};
  const char* names[] = {"out", "dv", "dk", "dq"};
  for (std::size_t i = 0; i < got.size(); ++i) {
    const auto& [first_order, want] = bounds[i];
    const auto bound = first_order * (1 + u) + 1e-4 * want.abs().max();
    const auto excess = ((got[i].to(torch::kFloat64) - want).abs() - bound).max().item<double>();
    EXPECT_LE(excess, 0.0) << names[i];
    // The bound is not vacuous: well below the values' own size.
    EXPECT_LT(bound.max().item<double>(), 0.1 * want.abs().max().item<double>()) << names[i];
  }
}

// The evaluation forward (c10::InferenceMode, buffers reused across layers, row chunks) computes
// what the training forward (autograd) computes: same per-token losses for MHA and GQA, chunk
// sizes 1, a non-divisor, exactly S and more than S; no autograd state on its output.
TEST(LmModel, InferenceForwardMatchesAutogradForward) {
  const std::int64_t S = 53;
  const burst::Mask mask = burst::Mask::document({0, 17, 40, 53}, /*causal=*/true);
  std::vector<std::int64_t> pos(static_cast<std::size_t>(S));
  for (std::int64_t i = 0; i < S; ++i) pos[static_cast<std::size_t>(i)] = i;
  torch::manual_seed(11);
  const auto tokens = torch::randint(0, 64, {S}, torch::kInt64),
             target = torch::randint(0, 64, {S}, torch::kInt64);
  for (const int kv_heads : {4, 2}) {
    auto cfg = tiny_config();
    cfg.kv_heads = kv_heads;
    burst::lm::Model model(cfg);
    burst::lm::LocalEngine train_engine(pos, mask, S, 1);
    const auto hidden_ref = model.forward(tokens, train_engine);  // grad mode on: the autograd path
    ASSERT_TRUE(hidden_ref.requires_grad());
    const auto loss_ref = burst::lm::head_token_losses(hidden_ref.detach(), model.head().detach(), target, 7);
    for (const std::int64_t rows : {1, 7, 53, 64}) {
      model.set_inference_rows(rows);
      const c10::InferenceMode inference;
      burst::lm::LocalEngine engine(pos, mask, S, 1);
      std::vector<std::pair<int, burst::lm::Model::Stage>> stages;
      const auto hidden = model.forward(
          tokens, engine, [&](int l, burst::lm::Model::Stage st) { stages.emplace_back(l, st); });
      EXPECT_TRUE(hidden.is_inference());
      EXPECT_FALSE(hidden.requires_grad());
      const auto loss = burst::lm::head_token_losses(hidden, model.head(), target, 7);
      // Same fp32 operations; only addmm's fused accumulation and chunked GEMMs may round
      // differently: ~1e-7 relative per op, 1e-5 over two layers and the head.
      EXPECT_LT(max_rel(hidden, hidden_ref.detach()), 1e-5) << "H_kv " << kv_heads << " rows " << rows;
      EXPECT_LT(max_rel(loss, loss_ref), 1e-5) << "H_kv " << kv_heads << " rows " << rows;
      EXPECT_EQ(stages.size(), 3u * static_cast<unsigned>(cfg.layers) + 1u);
    }
  }
  burst::lm::Model model(tiny_config());
  burst::lm::LocalEngine engine(pos, mask, S, 1);
  EXPECT_THROW(model.forward_inference(tokens, engine), burst::Error);  // grad mode on: refused
  EXPECT_THROW(model.set_inference_rows(0), burst::Error);
}

// The same with `--dtype bf16` (bf16 GEMMs, bf16 attention through the engine): the evaluation
// forward makes the autograd forward's roundings (GEMM products, q, k, v, out rounded to bf16;
// RoPE, norms and the residual in fp32). Only where a chunked GEMM accumulates in another order
// can a product round to the neighbouring bf16 value (one ulp, 2^-8 relative) and carry through
// the later layers; 2^-5 of the largest hidden value bounds a few such flips, while a missed
// cast or a wrong buffer dtype is an O(1) error. Both differ from the fp32 model (they are bf16).
TEST(LmModel, InferenceForwardMatchesAutogradForwardInBf16) {
  const std::int64_t S = 53;
  const burst::Mask mask = burst::Mask::document({0, 17, 40, 53}, /*causal=*/true);
  std::vector<std::int64_t> pos(static_cast<std::size_t>(S));
  for (std::int64_t i = 0; i < S; ++i) pos[static_cast<std::size_t>(i)] = i;
  torch::manual_seed(12);
  const auto tokens = torch::randint(0, 64, {S}, torch::kInt64);
  burst::lm::Model model(tiny_config());
  burst::lm::LocalEngine f32_engine(pos, mask, S, 1);
  const auto hidden_f32 = model.forward(tokens, f32_engine).detach();
  model.set_compute_dtype(torch::kBFloat16);
  const auto bf16 = burst::DType::BF16;
  burst::lm::LocalEngine train_engine(pos, mask, S, 1, burst::KernelImpl::Tiled, bf16);
  const auto hidden_ref = model.forward(tokens, train_engine).detach();
  EXPECT_EQ(train_engine.totals().bf16_passes, tiny_config().layers);
  EXPECT_GT(max_rel(hidden_ref, hidden_f32), 1e-4);  // bf16 arithmetic happened
  EXPECT_LT(max_rel(hidden_ref, hidden_f32), 0.1);   // and it is still the same model
  for (const std::int64_t rows : {7, 64}) {
    model.set_inference_rows(rows);
    const c10::InferenceMode inference;
    burst::lm::LocalEngine engine(pos, mask, S, 1, burst::KernelImpl::Tiled, bf16);
    const auto hidden = model.forward(tokens, engine);
    EXPECT_EQ(hidden.scalar_type(), torch::kFloat32);
    EXPECT_LT(max_rel(hidden, hidden_ref), 0x1.0p-5) << "rows " << rows;
    EXPECT_EQ(engine.totals().bf16_passes, tiny_config().layers);
  }
  EXPECT_THROW(model.set_compute_dtype(torch::kFloat16), burst::Error);
}

TEST(LmModel, RopeDependsOnlyOnRelativePosition) {
  torch::manual_seed(7);
  const int D = 32;
  const auto q = torch::randn({1, 1, 1, D}, torch::kFloat64), k = torch::randn({1, 1, 1, D}, torch::kFloat64);
  auto score = [&](std::int64_t pq, std::int64_t pk) {
    const auto [cq, sq] = burst::lm::rope_tables({pq}, D, 10000.0);
    const auto [ck, sk] = burst::lm::rope_tables({pk}, D, 10000.0);
    return (burst::lm::apply_rope(q, cq, sq) * burst::lm::apply_rope(k, ck, sk)).sum().item<double>();
  };
  const double near = score(17, 5);
  // Same distance far into a million-token sequence: tables are fp32, angles fp64, so the
  // score moves only by fp32 rounding of cos/sin (~1e-7 relative), not by angle loss.
  EXPECT_NEAR(score(1000017, 1000005), near, 1e-5 * std::abs(near) + 1e-6);
  EXPECT_GT(std::abs(score(17, 6) - near), 1e-6);  // and it does depend on the distance
}

// The checkpoint is a safetensors file: the Python reader (scripts/read_checkpoint.py, torch
// only) loads what the C++ side wrote, with the same shapes, values and metadata, and verifies the
// checksum. Skipped (not passed) without torch in the configured Python (BURST_PYTHON_EXECUTABLE,
// CMake's Python3_EXECUTABLE).
TEST(LmModel, CheckpointIsReadByThePythonSafetensorsReader) {
  const std::string python = std::string("'") + BURST_PYTHON_EXECUTABLE + "' ";
  if (std::system((python + "-c 'import torch' >/dev/null 2>&1").c_str()) != 0)
    GTEST_SKIP() << BURST_PYTHON_EXECUTABLE << " with torch not available";
  const fs::path path =
      fs::temp_directory_path() / ("burst_test_lm_st_" + std::to_string(::getpid()) + ".safetensors");
  torch::manual_seed(2);
  burst::lm::Checkpoint c;
  c.header = {{"kind", "burst-lm"}, {"step", 3}, {"model", {{"d_model", 5}}}};
  c.tensors.emplace_back("w", torch::randn({3, 5}));
  c.tensors.emplace_back("b", torch::randn({7}));
  c.tensors.emplace_back("empty", torch::empty({0, 4}));
  burst::lm::save_checkpoint(path, c);
  std::string out;
  {
    const std::string cmd =
        python + BURST_SOURCE_DIR + "/scripts/read_checkpoint.py " + path.string() + " --json";
    FILE* p = ::popen(cmd.c_str(), "r");
    ASSERT_NE(p, nullptr);
    char buf[4096];
    while (std::fgets(buf, sizeof buf, p) != nullptr) out += buf;
    ASSERT_EQ(::pclose(p), 0) << out;
  }
  const auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j.at("metadata").at("burst").at("step"), 3);
  EXPECT_EQ(j.at("metadata").at("burst").at("model").at("d_model"), 5);
  ASSERT_EQ(j.at("tensors").size(), 3u);
  for (const auto& [name, t] : c.tensors) {
    EXPECT_EQ(j.at("tensors").at(name).at("shape").get<std::vector<std::int64_t>>(), t.sizes().vec()) << name;
    // The same fp32 values summed in fp64 on both sides (different order): equal to ~1e-15.
    EXPECT_NEAR(j.at("tensors").at(name).at("sum").get<double>(), t.to(torch::kFloat64).sum().item<double>(),
                1e-12)
        << name;
  }
  {  // a flipped data byte fails the Python reader's checksum too
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-3, std::ios::end);
    f.put('\x55');
  }
  const std::string cmd =
      python + BURST_SOURCE_DIR + "/scripts/read_checkpoint.py " + path.string() + " --json >/dev/null 2>&1";
  EXPECT_NE(std::system(cmd.c_str()), 0);
  fs::remove(path);
}

TEST(LmModel, CheckpointRoundTripAndCorruptionIsRefused) {
  const fs::path path =
      fs::temp_directory_path() / ("burst_test_lm_ckpt_" + std::to_string(::getpid()) + ".safetensors");
  burst::lm::Checkpoint c;
  c.header = {{"kind", "burst-lm"}, {"step", 7}};
  c.tensors.emplace_back("a", torch::arange(6, torch::kFloat32).view({2, 3}));
  c.tensors.emplace_back("b", torch::ones({4}));
  burst::lm::save_checkpoint(path, c);
  const auto back = burst::lm::load_checkpoint(path);
  EXPECT_EQ(back.header.at("step"), 7);
  EXPECT_TRUE(torch::equal(burst::lm::checkpoint_tensor(back, "a", {2, 3}), c.tensors[0].second));
  EXPECT_THROW(burst::lm::checkpoint_tensor(back, "a", {3, 2}), burst::Error);  // mismatched shape
  EXPECT_THROW(burst::lm::checkpoint_tensor(back, "zzz", {1}), burst::Error);
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-12, std::ios::end);  // inside tensor b's data
    f.put('\x7f');
  }
  try {
    burst::lm::load_checkpoint(path);
    FAIL() << "corrupt checkpoint accepted";
  } catch (const burst::Error& e) {
    EXPECT_NE(std::string(e.what()).find("corrupt checkpoint"), std::string::npos) << e.what();
  }
  burst::lm::save_checkpoint(path, c);
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(12);  // inside the JSON header
    f.put('\x01');
  }
  EXPECT_THROW(burst::lm::load_checkpoint(path), burst::Error);
  fs::resize_file(path, 10);
  EXPECT_THROW(burst::lm::load_checkpoint(path), burst::Error);
  fs::remove(path);
  EXPECT_THROW(burst::lm::load_checkpoint(path), burst::Error);
}

TEST(LmModel, InitIsSeededAndConfigValidated) {
  burst::lm::ModelConfig cfg = tiny_config();
  burst::lm::Model a(cfg), b(cfg);
  for (std::size_t i = 0; i < a.parameters().size(); ++i)
    EXPECT_TRUE(torch::equal(a.parameters()[i], b.parameters()[i])) << a.names()[i];
  std::int64_t n = 0;
  for (const auto& p : a.parameters()) n += p.numel();
  EXPECT_EQ(n, cfg.num_parameters());
  EXPECT_EQ(burst::lm::ModelConfig::from_json(cfg.to_json()).to_json(), cfg.to_json());
  cfg.kv_heads = 3;
  EXPECT_THROW(cfg.validate(), burst::Error);
}

// Activation checkpointing (recomputed MLP blocks; recomputed layers with cached attention output)
// must give the same output and the same gradients as the plain forward: same operations in the
// same order, so equal up to fp32 reassociation inside torch's matmuls (1e-6 relative; a wrong or
// missing gradient term is O(1)). The layer mode must run the attention forward once per layer;
// seq-wise recomputes only the first half of the sequence (BurstEngine, docs/algorithm.md §9.1).
TEST(LmModel, ActivationCheckpointingGivesTheSameGradients) {
  burst::lm::ModelConfig cfg = tiny_config();
  const std::int64_t S = 40;
  std::vector<std::int64_t> pos(S);
  for (std::int64_t i = 0; i < S; ++i) pos[static_cast<std::size_t>(i)] = i;
  const burst::Mask mask = burst::Mask::document({0, 17, 40}, /*causal=*/true);
  torch::manual_seed(9);
  const auto tokens = torch::randint(0, cfg.vocab_size, {S}, torch::kInt64);
  const auto upstream = torch::randn({S, cfg.d_model});
  std::vector<std::vector<torch::Tensor>> grads;
  std::vector<torch::Tensor> outs;
  using R = burst::lm::Model::Recompute;
  // Seq-wise: the first-half engine covers [0, S/2) under the clipped mask ([0,17)² and
  // [17,20)² causal: 17·18/2 + 3·4/2 = 159 pairs per layer, vs 429 for the whole sequence).
  const std::int64_t half = S / 2;
  const std::vector<std::int64_t> pos_half(pos.begin(), pos.begin() + half);
  const burst::Mask mask_half = burst::lm::first_half_mask(mask, S, half);
  for (const R recompute : {R::None, R::Mlp, R::Layer, R::SeqWise}) {
    burst::lm::Model model(cfg);
    model.set_recompute(recompute);
    burst::lm::LocalEngine engine(pos, mask, S, 1);
    if (recompute == R::SeqWise)
      engine.set_first_half(std::make_unique<burst::lm::LocalEngine>(pos_half, mask_half, half, 1));
    const auto h = model.forward(tokens, engine);
    (h * upstream).sum().backward();
    outs.push_back(h.detach());
    EXPECT_EQ(engine.totals().forward_pairs, engine.totals().backward_pairs);  // no forward replayed
    EXPECT_EQ(engine.totals().forward_pairs, 429 * cfg.layers);
    if (recompute == R::SeqWise) {  // the replay recomputed exactly the first half, once per layer
      EXPECT_EQ(engine.first_half()->totals().forward_pairs, 159 * cfg.layers);
    }
    grads.emplace_back();
    for (const auto& p : model.parameters())  // "head" is unused by forward (no gradient)
      grads.back().push_back(p.grad().defined() ? p.grad().clone() : torch::Tensor());
  }
  burst::lm::Model names(cfg);
  for (std::size_t mode = 1; mode < outs.size(); ++mode) {
    EXPECT_LT(max_rel(outs[mode], outs[0]), 1e-6) << "mode " << mode;
    for (std::size_t i = 0; i < grads[0].size(); ++i) {
      ASSERT_EQ(grads[mode][i].defined(), grads[0][i].defined()) << names.names()[i];
      if (!grads[0][i].defined()) continue;
      EXPECT_LT(max_rel(grads[mode][i], grads[0][i]), 1e-6) << "mode " << mode << " " << names.names()[i];
      EXPECT_GT(grads[0][i].abs().max().item<double>(), 0.0) << names.names()[i];
    }
  }
}

// Seq-wise checkpointing refuses what it cannot do, with the reason in the message.
TEST(LmModel, SeqWiseRefusesMasksWhoseFirstHalfIsNotSelfContained) {
  // full: queries of the first half see the second half.
  EXPECT_THROW(burst::lm::first_half_mask(burst::Mask::full(), 40, 20), burst::Error);
  // a causal slice straddling the half that is not square: clipping would move its diagonal.
  burst::MaskSlice s{0, 40, 0, 30, burst::SliceKind::Causal, -1, -1};
  try {
    burst::lm::first_half_mask(burst::Mask::from_slices({s}), 40, 20);
    ADD_FAILURE() << "expected a refusal";
  } catch (const burst::Error& e) { EXPECT_EQ(e.kind(), burst::ErrorKind::Unsupported); }
  // causal shorthand: unchanged; square document slices: clipped.
  EXPECT_TRUE(burst::lm::first_half_mask(burst::Mask::causal_mask(), 40, 20).causal);
  const auto m = burst::lm::first_half_mask(burst::Mask::document({0, 17, 40}, true), 40, 20);
  ASSERT_EQ(m.slices.size(), 2u);
  EXPECT_EQ(m.slices[1].q_end, 20);
  EXPECT_EQ(m.slices[1].k_end, 20);
  // a seq-wise cache on an engine without first_half(): refused.
  std::vector<std::int64_t> pos(8);
  for (std::int64_t i = 0; i < 8; ++i) pos[static_cast<std::size_t>(i)] = i;
  burst::lm::LocalEngine engine(pos, burst::Mask::causal_mask(), 8, 1);
  burst::lm::AttentionCache cache;
  cache.second_half_only = true;
  const auto q = torch::randn({1, 8, 2, 4});
  EXPECT_THROW(burst::lm::burst_attention(q, q, q, engine, &cache), burst::Error);
}

TEST(LmModel, AttentionFunctionRefusesTensorsOffTheHost) {
  // A CUDA tensor is refused by name (burst computes on the host). This libtorch has no CUDA, so
  // the bridge is driven with a meta tensor (a device burst does not know: refused as well); the
  // CUDA message itself is tested on views in test_device_check.
  std::vector<std::int64_t> pos(8);
  for (std::int64_t i = 0; i < 8; ++i) pos[static_cast<std::size_t>(i)] = i;
  burst::lm::LocalEngine engine(pos, burst::Mask::causal_mask(), 8, 1);
  const auto q = torch::randn({1, 8, 2, 4}), meta = torch::empty({1, 8, 2, 4}, torch::Device(torch::kMeta));
  try {
    burst::lm::burst_attention(q, meta, q, engine);
    FAIL() << "a meta tensor reached the kernels";
  } catch (const burst::Error& e) {
    EXPECT_EQ(e.kind(), burst::ErrorKind::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("device 'meta'"), std::string::npos) << e.what();
  }
  if (torch::cuda::is_available()) {  // a CUDA libtorch on a GPU host: the operand is named
    try {
      burst::lm::burst_attention(q, q, q.to(torch::kCUDA), engine);
      FAIL() << "a CUDA tensor reached the kernels";
    } catch (const burst::Error& e) {
      EXPECT_NE(std::string(e.what()).find("burst_attention: v is on cuda:0, but this call runs on host"),
                std::string::npos)
          << e.what();
    }
  }
  EXPECT_NO_THROW(burst::lm::burst_attention(q, q, q, engine));
}
