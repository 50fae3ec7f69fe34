// src/attention_device.h — attention_forward / attention_backward on any device of the seam
// (internal; device/device.h): the public entry points' validation and varlen split, with the
// memory work and the step kernels on `dev`, so that operands in a GPU's memory run on that GPU.
//
// Owns: putting a call's global positions and resolved mask slices in the device's memory (the
// step kernels' KernelArgs: host memory on the CPU, device memory on a GPU), delta in a device
// buffer for the backward, one step call per problem (per sequence for varlen).
// Conventions: every operand (q, k, v, out, lse, dout, dq, dk, dv) is in `dev`'s memory, which
// is `runs_on` (burst::Device: kHost for the CPU device, {Cuda, n} for GPU n); shapes, dtypes
// and errors as burst/attention.h's attention_forward / attention_backward (the same
// validation, the same messages). Operations are enqueued on dev's stream; each call returns
// after they complete (the positions' staging buffers live until then).
// Does not: choose a device (the caller constructs it), or copy between devices.
#pragma once

#include "burst/attention.h"
#include "burst/tensor.h"
#include "device/device.h"

namespace burst::entry {

/// attention_forward (burst/attention.h) with every operand in `dev`'s memory.
/// Throws: Error(InvalidArgument) naming an operand not on `runs_on` (check_device), and as
/// attention_forward; whatever dev's operations throw (Unsupported for a step kernel it lacks).
void attention_forward_on(const device::Device& dev, const Device& runs_on, const TensorView& q,
                          const TensorView& k, const TensorView& v, const TensorView& out,
                          const TensorView& lse, const AttentionParams& params);

/// attention_backward (burst/attention.h) with every operand in `dev`'s memory: delta =
/// rowsum(dout ∘ out) on the device (dev.attention_delta), then the step backward.
/// Throws: as attention_forward_on and attention_backward.
void attention_backward_on(const device::Device& dev, const Device& runs_on, const TensorView& dout,
                           const TensorView& q, const TensorView& k, const TensorView& v,
                           const TensorView& out, const TensorView& lse, const TensorView& dq,
                           const TensorView& dk, const TensorView& dv, const AttentionParams& params);

}  // namespace burst::entry
