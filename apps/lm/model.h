// apps/lm/model.h — a small Llama-style decoder in libtorch whose attention is burst's.
//
// Owns: Model (named fp32 parameters, deterministic init from a seed; its architecture is
// ModelConfig, options.h) and its forward on one rank's slice of a sequence: token embedding →
// L × [RMSNorm → GQA attention with RoPE on GLOBAL positions → residual; RMSNorm → SwiGLU MLP →
// residual] → RMSNorm → hidden states [S_local, d]. The LM head and loss live in
// fused_head_loss.h (the model never forms [S, vocab] logits).
// Does not: communicate except through the attention engine; own the optimizer (train.cc).
#pragma once

#include "torch_api.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attention_fn.h"
#include "options.h"

namespace burst::lm {

/// RoPE tables for `positions`: cos, sin [S, D/2] fp32, angles computed in fp64 (positions reach
/// ~10⁶ in evaluation, where fp32 angles would lose ~0.06 rad). Source: RoFormer (Su et al. 2021).
std::pair<torch::Tensor, torch::Tensor> rope_tables(const std::vector<std::int64_t>& positions, int head_dim,
                                                    double base);
/// RMSNorm(x)·w over the last dimension: x [.., d], w [d] (Zhang & Sennrich 2019).
torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& w, double eps);
/// Rotates x [1, S, H, D] pairwise (first half with second half, the Llama/NeoX convention).
torch::Tensor apply_rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);
/// Autocast-style linear layer x·wᵀ, x [.., in], w [out, in]: both operands cast to `dt` (no-ops
/// for fp32), the product in `dt` (bf16: oneDNN's bf16 GEMM, fp32 accumulation, result rounded to
/// bf16). The cast of w is differentiable, so its gradient lands in the fp32 master weight.
torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& w, torch::ScalarType dt);

class Model {
 public:
  explicit Model(const ModelConfig& cfg);  ///< seeded init (identical on every rank)

  const ModelConfig& config() const { return cfg_; }
  /// Parameters in a fixed order with stable names ("embed", "layer0.wq", ...).
  std::vector<torch::Tensor>& parameters() { return params_; }
  const std::vector<std::string>& names() const { return names_; }
  torch::Tensor& head() { return params_.back(); }

  /// Hidden states [S_local, d] for `tokens` [S_local] int64 at engine.positions().
  /// Collective when the engine is (one attention pass per layer). With grad mode off
  /// (torch::NoGradGuard or c10::InferenceMode) it runs forward_inference instead: the same
  /// arithmetic, nothing saved for backward.
  /// `on_stage(layer, stage)` (optional) is called as each stage of each layer begins
  /// (evaluation progress; forward_inference only).
  enum class Stage { Projections, Attention, Mlp, Done };
  using StageHook = std::function<void(int layer, Stage stage)>;
  torch::Tensor forward(const torch::Tensor& tokens, AttentionEngine& engine, const StageHook& on_stage = {});

  /// The evaluation forward, without autograd (callers hold c10::InferenceMode or
  /// torch::NoGradGuard): every intermediate is written into buffers allocated once per call and
  /// reused by every layer, and row-wise work (norms, projections, RoPE, MLP) runs in chunks of
  /// inference_rows() rows, so no layer allocates fresh [S_local, ·] tensors. Fresh large tensors
  /// cost a page fault per 4 KiB page each time (the kernel clears every page): on the whole-KJV
  /// eval they were about a third of its time. Reference twin: forward with grad mode on
  /// (test_lm_model compares them). Collective as forward.
  torch::Tensor forward_inference(const torch::Tensor& tokens, AttentionEngine& engine,
                                  const StageHook& on_stage = {});
  /// Rows per chunk of forward_inference's row-wise work (default 8192: [8192, d] scratch stays
  /// in L2 for small d). Throws Error(InvalidArgument) unless rows >= 1.
  void set_inference_rows(std::int64_t rows);
  std::int64_t inference_rows() const { return inference_rows_; }

  /// Activation checkpointing: lm::Recompute (options.h).
  using Recompute = lm::Recompute;
  void set_recompute(Recompute r) { recompute_ = r; }
  Recompute recompute() const { return recompute_; }

  /// Dtype of the linear layers' GEMMs (`--dtype`): kFloat32 (default) or kBFloat16, torch
  /// autocast-style — activations and the fp32 master weights cast to bf16 at each GEMM (the
  /// weight cast is differentiable, so gradients accumulate into the fp32 weights), products in
  /// bf16; RMSNorm, RoPE, the residual stream, the LM head and the loss stay fp32. Attention's
  /// dtype is the engine's (AttentionEngine::dtype). libtorch 1.13 runs bf16 GEMMs through oneDNN
  /// (avx512_bf16 here). Throws Error(InvalidArgument) for another dtype.
  void set_compute_dtype(torch::ScalarType dt);
  torch::ScalarType compute_dtype() const { return compute_dtype_; }

 private:
  torch::Tensor& p(const std::string& name);
  ModelConfig cfg_;
  std::vector<torch::Tensor> params_;
  std::vector<std::string> names_;
  Recompute recompute_ = Recompute::None;
  torch::ScalarType compute_dtype_ = torch::kFloat32;
  std::int64_t inference_rows_ = 8192;
};

}  // namespace burst::lm
