// src/strategies/wire_pack.h — tensors into and out of a message's fields (internal): a message
// is bytes laid out by a WireLayout (src/wire_layout.h), each tensor in its own dtype; the
// copies are the device's (src/device/device.h), so a message may live in device memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "burst/comm.h"
#include "burst/tensor.h"
#include "device/device.h"
#include "wire_layout.h"

namespace burst::strategies {

/// Copies the elements of `src` (any strides, up to 4 dims) in row-major order into field i of
/// the message at `base` (device memory) laid out by `layout`. Throws Error(Internal) when
/// src's dtype or element count is not the field's.
void pack_field(const device::Device& dev, const WireLayout& layout, std::size_t i, const TensorView& src,
                std::byte* base);
/// Contiguous view of `shape` over field i of the message at `base` (the field's dtype; the
/// shape's element count must be the field's count, else Error(Internal)). Reads nothing.
TensorView field_view(const WireLayout& layout, std::size_t i, const std::byte* base,
                      std::vector<std::int64_t> shape);
/// Copies row-major fp32 `src` (view.numel() values, device memory) into `view` (any strides).
void unpack_into(const device::Device& dev, const float* src, const TensorView& view);
/// The fp32 values of a host buffer that holds fp32 scratch: bytes / 4 of them.
float* f32_data(ByteBuffer& buffer);
const float* f32_data(const ByteBuffer& buffer);

}  // namespace burst::strategies
