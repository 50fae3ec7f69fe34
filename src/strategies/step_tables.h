// src/strategies/step_tables.h — the step kernels' index tables in a device's memory (internal).
//
// Owns: TableTwins — host int64 tables (positions, index rows) with twins in a device's memory,
// uploaded once per plan (not per step) — and StepTables, the plan's: the resolved mask's slice
// table and every rank's global positions of the plan's layout, uploaded once per DistAttention.
// The translation of a host table pointer into its device twin for a step's KernelParams or an
// index copy. On a host-memory device (the CPU) they hold nothing and every pointer is its own
// twin: no copy. Every executor's own tables (allgather's and distflash's gathered positions,
// the Ulysses group's positions and rows of ulysses, usp and headpar, usp's ring groups) have
// twins; a table without one passes through as host memory, which the device's step kernels
// and index copies then upload per call (device/cuda/attention_cuda.cc, cuda_device.cc).
// Does not: communicate or validate (the plan and mask were validated at construction).
#pragma once

#include <cstdint>
#include <vector>

#include "burst/mask.h"
#include "burst/plan.h"
#include "device/device.h"

namespace burst::strategies {

class TableTwins {
 public:
  /// Holds nothing: every pointer is its own twin.
  TableTwins() = default;
  /// Uploads every table when !dev.host_memory(), in one block; returns after the copies
  /// completed. The tables must outlive this object and keep their storage (their data
  /// pointers are the keys). Cost: one copy of their bytes; none on the CPU.
  TableTwins(const device::Device& dev, const std::vector<const std::vector<std::int64_t>*>& tables);
  TableTwins(TableTwins&&) noexcept = default;
  TableTwins& operator=(TableTwins&&) noexcept = default;

  /// The device twin of `host` when it points into one of the tables (a pointer inside a table
  /// maps to the same offset); nullptr otherwise, and always on a host-memory device.
  const std::int64_t* twin(const std::int64_t* host) const;
  /// What a step kernel reads for `host`: its twin, else `host` itself.
  const std::int64_t* positions(const std::int64_t* host) const {
    const std::int64_t* t = twin(host);
    return t ? t : host;
  }

 private:
  struct Range {
    const std::int64_t* host;
    std::int64_t n;
    const std::int64_t* device;
  };
  device::Buffer block_;
  std::vector<Range> ranges_;
};

/// One table per vector of `v` (TableTwins' argument).
inline std::vector<const std::vector<std::int64_t>*> tables_of(
    const std::vector<std::vector<std::int64_t>>& v) {
  std::vector<const std::vector<std::int64_t>*> out;
  for (const auto& t : v) out.push_back(&t);
  return out;
}

class StepTables {
 public:
  /// Uploads mask.slices() and plan.layout().positions when !dev.host_memory(); returns after
  /// the copies completed. Both must outlive this object, and it must outlive the executors
  /// whose step parameters point into it (DistAttention keeps the three).
  /// Cost: one copy of (slices + S_global positions) bytes; none on the CPU.
  StepTables(const device::Device& dev, const Plan& plan, const ResolvedMask& mask);
  /// The slice table the kernels read: the device copy, or mask.slices().data() on the CPU.
  const MaskSlice* slices() const { return slices_; }
  /// The device twin of `host`, when it points into one rank's positions of the plan
  /// (a pointer inside the array maps to the same offset); `host` itself otherwise.
  const std::int64_t* positions(const std::int64_t* host) const { return positions_.positions(host); }
  /// The plan's positions' twins (what the ring family's steps translate through).
  const TableTwins& position_twins() const { return positions_; }

 private:
  device::Buffer slice_block_;
  const MaskSlice* slices_ = nullptr;
  TableTwins positions_;
};

}  // namespace burst::strategies
