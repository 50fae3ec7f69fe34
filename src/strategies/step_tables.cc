// Step tables (see step_tables.h).
#include "strategies/step_tables.h"

#include <functional>

namespace burst::strategies {

StepTables::StepTables(const device::Device& dev, const Plan& plan, const ResolvedMask& mask)
    : slices_(mask.slices().data()) {
  if (dev.host_memory()) return;
  const auto& positions = plan.layout().positions;
  const auto slice_bytes = static_cast<std::int64_t>(mask.slices().size() * sizeof(MaskSlice));
  std::int64_t bytes = slice_bytes;  // slices first: their alignment (8) holds for the int64s after
  for (const auto& pos : positions) bytes += static_cast<std::int64_t>(pos.size() * sizeof(std::int64_t));
  if (bytes == 0) return;
  block_ = dev.allocate(bytes, device::MemoryKind::Device);
  std::byte* at = block_.data();
  const auto upload = [&](const void* src, std::int64_t n) {
    if (n > 0) dev.copy_from_host(static_cast<const std::byte*>(src), at, n);
    std::byte* placed = at;
    at += n;
    return placed;
  };
  slices_ =
      static_cast<const MaskSlice*>(static_cast<const void*>(upload(mask.slices().data(), slice_bytes)));
  for (const auto& pos : positions) {
    const auto n = static_cast<std::int64_t>(pos.size());
    const std::byte* d = upload(pos.data(), n * static_cast<std::int64_t>(sizeof(std::int64_t)));
    ranges_.push_back({pos.data(), n, static_cast<const std::int64_t*>(static_cast<const void*>(d))});
  }
  dev.wait(dev.record());  // the host arrays are pageable: the copies complete before use
}

const std::int64_t* StepTables::positions(const std::int64_t* host) const {
  for (const Range& r : ranges_) {
    // std::less: a total order over pointers into different arrays
    if (r.n > 0 && !std::less<>{}(host, r.host) && std::less<>{}(host, r.host + r.n))
      return r.device + (host - r.host);
  }
  return host;
}

}  // namespace burst::strategies
