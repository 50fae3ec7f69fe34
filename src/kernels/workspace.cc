// Grow-only per-thread kernel workspace (see workspace.h).
#include "kernels/workspace.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <memory>
#include <new>

#include "burst/isa.h"

namespace burst::kernels {
namespace {

struct FreeDeleter {
  void operator()(float* p) const noexcept { std::free(p); }
};

struct Block {
  std::unique_ptr<float, FreeDeleter> data;
  std::size_t floats = 0;
};

thread_local Block t_block;

}  // namespace

float* thread_workspace(std::size_t floats) {
  if (floats == 0) floats = WorkspacePlan::kAlignFloats;
  if (floats > t_block.floats) {
    t_block.data.reset();  // free first: old and new never coexist
    t_block.floats = 0;
    const std::size_t bytes = (floats * sizeof(float) + 63) / 64 * 64;
    auto* p = static_cast<float*>(std::aligned_alloc(64, bytes));
    if (p == nullptr) throw std::bad_alloc();
    t_block.data.reset(p);
    t_block.floats = floats;
  }
#if !defined(NDEBUG) || defined(BURST_POISON_WORKSPACE)
  // Debug and sanitizer builds (the CI's ASan job) poison the block on every call: a kernel that reads an
  // element it did not write then yields NaN and fails the tiled-vs-reference tests.
  std::fill(t_block.data.get(), t_block.data.get() + floats, std::numeric_limits<float>::quiet_NaN());
#endif
  return t_block.data.get();
}

void release_thread_workspace() noexcept {
  t_block.data.reset();
  t_block.floats = 0;
}

}  // namespace burst::kernels

namespace burst {

void release_kernel_workspace() noexcept { kernels::release_thread_workspace(); }

}  // namespace burst
