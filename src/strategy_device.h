// src/strategy_device.h — DistAttention on any device of the seam (internal; device/device.h).
//
// Owns: DistAttention::OnDevice, the device a DistAttention's passes run on. With a CudaDevice
// (device/cuda/cuda_device.h) every operand of forward / backward lives in that GPU's memory:
// the façade's checks (finiteness through Device::first_nonfinite), its fp32 stand-ins of
// 16-bit results and their final rounding go through the device, the mask's slice table and the
// plan's positions are uploaded once (strategies/step_tables.h), and each pass returns after
// the device finished it. Messages still travel as host bytes through pinned staging buffers
// (strategies/staging.h), so several ranks may share one GPU.
// Does not: choose a device (the caller constructs it: the rank's GPU is the caller's policy),
// or copy operands between devices.
#pragma once

#include <memory>

#include "burst/strategy.h"
#include "burst/tensor.h"
#include "device/device.h"

namespace burst {

struct DistAttention::OnDevice {
  /// The device every pass's memory work and step kernels run on (shared by the strategies).
  std::shared_ptr<const device::Device> device;
  /// What check_device accepts for the operands: {Cuda, n} for GPU n (kHost for the CPU device).
  Device runs_on = kHost;
};

}  // namespace burst
