// apps/lm/fused_head_loss.h — LM head + cross-entropy fused over sequence chunks.
//
// Owns: the BurstEngine "sequence-level fusion of LM head and loss" (docs/algorithm.md §9.2): the
// local tokens are cut into chunks of `chunk` rows; each chunk's logits [chunk, V] are formed,
// reduced to per-token losses and dropped, and the backward recomputes them to form
// (softmax − onehot)·g, accumulating dW += gᵀ·x_c and dx_c = g·W. Peak logits memory is
// chunk·V instead of S_local·V. Reference twin: head_loss_reference (full logits, torch autograd).
#pragma once

#include "torch_api.h"

#include <cstdint>

namespace burst::lm {

/// Σ_i weight_i · CE(x_i Wᵀ, target_i) as a differentiable scalar (fp32, accumulated in fp64).
/// x [S, d] fp32, W [V, d] fp32, target [S] int64 in [0, V), weight [S] fp32 (0 drops a row).
/// Throws: Error(InvalidArgument) on shape mismatch. Cost: 2·S·V·d flop forward, 4·S·V·d backward
/// (+2·S·V·d recompute); extra memory chunk·V floats.
torch::Tensor fused_head_loss(const torch::Tensor& x, const torch::Tensor& W, const torch::Tensor& target,
                              const torch::Tensor& weight, std::int64_t chunk);

/// Per-token cross-entropy [S] fp32 without autograd (evaluation), chunked the same way.
torch::Tensor head_token_losses(const torch::Tensor& x, const torch::Tensor& W, const torch::Tensor& target,
                                std::int64_t chunk);

/// Reference twin: materialises [S, V] logits and uses torch's cross_entropy.
torch::Tensor head_loss_reference(const torch::Tensor& x, const torch::Tensor& W, const torch::Tensor& target,
                                  const torch::Tensor& weight);

}  // namespace burst::lm
