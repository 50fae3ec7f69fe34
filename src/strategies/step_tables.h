// src/strategies/step_tables.h — the step kernels' index tables in a device's memory (internal).
//
// Owns: one device block holding the resolved mask's slice table and every rank's global
// positions of the plan's layout, uploaded once per DistAttention (not per step), and the
// translation of a host table pointer into its device twin for a step's KernelParams. On a
// host-memory device (the CPU) it holds nothing and every pointer is its own twin: no copy.
// A table it does not hold (an executor's own positions array) passes through as host memory;
// the device's step kernels then upload it per step (device/cuda/attention_cuda.cc).
// Does not: communicate or validate (the plan and mask were validated at construction).
#pragma once

#include <cstdint>
#include <vector>

#include "burst/mask.h"
#include "burst/plan.h"
#include "device/device.h"

namespace burst::strategies {

class StepTables {
 public:
  /// Uploads mask.slices() and plan.layout().positions when !dev.host_memory(); returns after
  /// the copies completed. Both must outlive this object (Setup keeps them alive).
  /// Cost: one copy of (slices + S_global positions) bytes; none on the CPU.
  StepTables(const device::Device& dev, const Plan& plan, const ResolvedMask& mask);
  /// The slice table the kernels read: the device copy, or mask.slices().data() on the CPU.
  const MaskSlice* slices() const { return slices_; }
  /// The device twin of `host`, when it points into one rank's positions of the plan
  /// (a pointer inside the array maps to the same offset); `host` itself otherwise.
  const std::int64_t* positions(const std::int64_t* host) const;

 private:
  struct Range {
    const std::int64_t* host;
    std::int64_t n;
    const std::int64_t* device;
  };
  device::Buffer block_;
  const MaskSlice* slices_ = nullptr;
  std::vector<Range> ranges_;
};

}  // namespace burst::strategies
