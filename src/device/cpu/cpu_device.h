// src/device/cpu/cpu_device.h — the CPU implementation of the device seam (internal).
//
// Owns: today's host code behind device::Device — strided and index copies (memcpy per
// contiguous innermost run), fill, add, the scalar wire-dtype rounding of burst/tensor.h,
// merge_forward (burst/softmax_merge.h), attention_delta (burst/attention.h), the step kernels
// (kernels/step.h) and the content fingerprint. Device memory is host memory (host_memory()
// true): allocations are ByteBuffers, staging is the identity, every operation is complete on
// return, events are complete when recorded. Stateless and immutable.
// Not final: tests derive a stand-in that keeps "device" memory apart from the host
// (tests/test_device_staging.cc) to count the staging copies a GPU would make.
#pragma once

#include "device/device.h"

namespace burst::device {

class CpuDevice : public Device {
 public:
  std::string name() const override { return "cpu"; }
  bool host_memory() const override { return true; }
  Buffer allocate(std::int64_t bytes, MemoryKind kind) const override;
  StreamHandle stream() const override { return nullptr; }
  Event record() const override { return {}; }
  bool ready(const Event&) const override { return true; }
  void wait(const Event&) const override {}
  void copy_to_host(const std::byte* src, std::byte* dst_host, std::int64_t bytes) const override;
  void copy_from_host(const std::byte* src_host, std::byte* dst, std::int64_t bytes) const override;
  void copy(const TensorView& src, const TensorView& dst) const override;
  /// Reads `index` (host memory is this device's: `index_twin` is not needed).
  void index_copy(const TensorView& src, const TensorView& dst, int dim, const std::int64_t* index,
                  const std::int64_t* index_twin, bool scatter, bool accumulate) const override;
  void fill(const TensorView& dst, float value) const override;
  void add(const TensorView& x, const TensorView& acc) const override;
  void convert(const TensorView& src, const TensorView& dst) const override;
  void merge_forward(const TensorView& out, const TensorView& lse, const TensorView& out_part,
                     const TensorView& lse_part) const override;
  void attention_delta(const TensorView& dout, const TensorView& out, const TensorView& delta) const override;
  void step_forward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                    const TensorView& lse, const kernels::KernelParams& p) const override;
  void step_backward(const TensorView& dout, const TensorView& q, const TensorView& k, const TensorView& v,
                     const TensorView& lse, const TensorView& delta, const TensorView& dq,
                     const TensorView& dk, const TensorView& dv, const kernels::KernelParams& p,
                     bool accumulate, const TensorView* out = nullptr) const override;
  std::uint64_t fingerprint(std::initializer_list<TensorView> views) const override;
  std::int64_t first_nonfinite(const TensorView& t) const override;
};

/// CpuDevice::first_nonfinite's reference twin: the same answer (the row-major index of the first
/// element of t [4-d, f32 / bf16 / f16, any strides] whose exponent is all ones, or −1), one
/// element at a time. The fast scan runs it for views whose innermost stride is not 1.
/// Throws: Error(Internal) for another dtype or rank.
std::int64_t first_nonfinite_elementwise(const TensorView& t);

}  // namespace burst::device
