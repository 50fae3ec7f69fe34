// Step tables (see step_tables.h).
#include "strategies/step_tables.h"

#include <functional>

namespace burst::strategies {

TableTwins::TableTwins(const device::Device& dev,
                       const std::vector<const std::vector<std::int64_t>*>& tables) {
  if (dev.host_memory()) return;
  std::int64_t bytes = 0;
  for (const auto* t : tables) bytes += static_cast<std::int64_t>(t->size() * sizeof(std::int64_t));
  if (bytes == 0) return;
  block_ = dev.allocate(bytes, device::MemoryKind::Device);
  std::byte* at = block_.data();
  for (const auto* t : tables) {
    const auto n = static_cast<std::int64_t>(t->size());
    if (n == 0) continue;
    const std::int64_t b = n * static_cast<std::int64_t>(sizeof(std::int64_t));
    dev.copy_from_host(static_cast<const std::byte*>(static_cast<const void*>(t->data())), at, b);
    ranges_.push_back({t->data(), n, static_cast<const std::int64_t*>(static_cast<const void*>(at))});
    at += b;
  }
  dev.wait(dev.record());  // the host arrays are pageable: the copies complete before use
}

const std::int64_t* TableTwins::twin(const std::int64_t* host) const {
  for (const Range& r : ranges_) {
    // std::less: a total order over pointers into different arrays
    if (!std::less<>{}(host, r.host) && std::less<>{}(host, r.host + r.n)) return r.device + (host - r.host);
  }
  return nullptr;
}

StepTables::StepTables(const device::Device& dev, const Plan& plan, const ResolvedMask& mask)
    : slices_(mask.slices().data()) {
  if (dev.host_memory()) return;
  positions_ = TableTwins(dev, tables_of(plan.layout().positions));
  const auto slice_bytes = static_cast<std::int64_t>(mask.slices().size() * sizeof(MaskSlice));
  if (slice_bytes == 0) return;
  slice_block_ = dev.allocate(slice_bytes, device::MemoryKind::Device);
  dev.copy_from_host(static_cast<const std::byte*>(static_cast<const void*>(mask.slices().data())),
                     slice_block_.data(), slice_bytes);
  slices_ = static_cast<const MaskSlice*>(static_cast<const void*>(slice_block_.data()));
  dev.wait(dev.record());
}

}  // namespace burst::strategies
