// src/strategies/common.h — small helpers shared by the strategy files: packing BSHD / row
// tensors into contiguous fp32 payloads and back, views over payload memory, and the kernel
// parameters every step uses (mask, scale, global positions, threads, progress hook).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "burst/attention.h"
#include "burst/tensor.h"
#include "strategies/strategy_impl.h"

namespace burst::strategies {

/// Contiguous BSHD view [B, S, H, D] over `data`.
TensorView bshd_view(const float* data, std::int64_t B, std::int64_t S, std::int64_t H, std::int64_t D);
/// Contiguous row view [B, H, S] over `data`.
TensorView rows_view(const float* data, std::int64_t B, std::int64_t H, std::int64_t S);

/// Appends the elements of `view` (any strides, up to 4 dims) in row-major order to `out`.
void append_packed(const TensorView& view, std::vector<float>& out);
/// Copies row-major `src` (view.numel() values) into `view` (any strides).
void unpack_into(const float* src, const TensorView& view);
/// Sets every element of `view` to `value`.
void fill_view(const TensorView& view, float value);

/// Kernel parameters of a step: queries at q_pos, keys at kv_pos (global, increasing).
AttentionParams step_params(const Setup& setup, const std::int64_t* q_pos, const std::int64_t* kv_pos,
                            const std::function<void()>* progress);

}  // namespace burst::strategies
