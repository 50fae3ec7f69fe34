// src/kernels/workspace.h — grow-only scratch memory of the calling thread, reused across
// kernel calls (internal).
//
// Why: a tiled call needs O(S) floats of packed K/V panels plus O(tile) per thread. Allocating
// them per call makes every call page-fault fresh memory and, with 2+ threads, pay TLB
// shootdowns when it is freed — on this VM that cost 25–30 % of a 1-thread S = 4096 forward and
// held 2 threads to 1.1–1.35× one thread (measured with glibc's mmap threshold raised: 1.89–
// 1.94×; docs/design.md § Kernel workspace). The arena keeps the largest block any call of this
// thread needed; release_kernel_workspace() (burst/attention.h) returns it.
// Usage: plan every slice first (WorkspacePlan::add gives offsets), then take the block once,
// before any OpenMP region, so an allocation failure throws in the caller's thread.
// Contents are uninitialised; kernels write every element they read.
#pragma once

#include <cstddef>
#include <span>

namespace burst::kernels {

/// One slice of a call's workspace: `floats` floats at `offset` (in floats) from its start.
struct WorkspaceSlot {
  std::size_t offset = 0, floats = 0;
};

/// The slices of one call's workspace, each 64-byte aligned.
class WorkspacePlan {
 public:
  /// Reserves n floats.
  WorkspaceSlot add(std::size_t n) {
    const WorkspaceSlot slot{floats_, n};
    floats_ += (n + kAlignFloats - 1) / kAlignFloats * kAlignFloats;
    return slot;
  }
  std::size_t floats() const { return floats_; }
  static constexpr std::size_t kAlignFloats = 16;  // 64 bytes

 private:
  std::size_t floats_ = 0;
};

/// The calling thread's block of at least `floats` floats, 64-byte aligned (grown if needed,
/// never shrunk; the previous contents are not kept across growth).
/// Throws: std::bad_alloc.
float* thread_workspace(std::size_t floats);

/// Frees the calling thread's block (the next call allocates again).
void release_thread_workspace() noexcept;

/// The span of `slot` in the block at `base`.
inline std::span<float> slice(float* base, const WorkspaceSlot& slot) {
  return {base + slot.offset, slot.floats};
}

}  // namespace burst::kernels
