// src/strategies/common.h — small helpers shared by the strategy files: packing BSHD / row
// tensors into contiguous payloads (std::vector<float> words; 16-bit tensors travel as their
// own bits, two per word) and back, views over payload memory, and the kernel
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

/// Appends the elements of `view` (any strides, up to 4 dims, f32) in row-major order to `out`.
void append_packed(const TensorView& view, std::vector<float>& out);
/// Appends a then b (same dtype and element count, any strides) in row-major order in their own
/// dtype: f32 as is, bf16/f16 as their 16-bit patterns packed two per float word (2n halves =
/// n words, so the payload stays word aligned). Words appended: packed_pair_floats(n, dtype).
void append_packed_pair(const TensorView& a, const TensorView& b, std::vector<float>& out);
std::int64_t packed_pair_floats(std::int64_t n, DType dtype);
/// Contiguous BSHD view [B, S, H, D] of `dtype` starting `elements` elements of that dtype past
/// `data` (the second tensor of a packed pair: elements = n).
TensorView bshd_view_at(const float* data, std::int64_t elements, DType dtype, std::int64_t B, std::int64_t S,
                        std::int64_t H, std::int64_t D);
/// Copies row-major `src` (view.numel() values) into `view` (any strides).
void unpack_into(const float* src, const TensorView& view);
/// Sets every element of `view` to `value`.
void fill_view(const TensorView& view, float value);

/// Kernel parameters of a step: queries at q_pos, keys at kv_pos (global, increasing).
AttentionParams step_params(const Setup& setup, const std::int64_t* q_pos, const std::int64_t* kv_pos,
                            const std::function<void()>* progress);

}  // namespace burst::strategies
