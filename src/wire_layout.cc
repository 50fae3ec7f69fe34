// Message layouts (see wire_layout.h).
#include "wire_layout.h"

#include <algorithm>

#include "burst/error.h"

namespace burst {

WireLayout::WireLayout(std::initializer_list<Spec> fields) {
  for (const Spec& f : fields) add(f.name, f.dtype, f.count);
}

std::size_t WireLayout::add(const char* name, DType dtype, std::int64_t count) {
  BURST_CHECK(count >= 0, Internal, "wire field '", name, "' of ", count, " elements");
  const auto e = static_cast<std::int64_t>(dtype_size(dtype));
  WireField f{name, dtype, count, (end_ + e - 1) / e * e};
  end_ = f.offset + f.bytes();
  align_ = std::max(align_, e);
  fields_.push_back(f);
  return fields_.size() - 1;
}

std::int64_t WireLayout::bytes() const { return (end_ + align_ - 1) / align_ * align_; }

namespace wire {

WireLayout kv_block(DType dt, std::int64_t n) { return {{"k", dt, n}, {"v", dt, n}}; }

WireLayout query_block(DType dt, std::int64_t n, std::int64_t rows) {
  return {{"q", dt, n}, {"dout", dt, n}, {"delta", DType::F32, rows}, {"lse", DType::F32, rows}};
}

WireLayout query_only(DType dt, std::int64_t n) { return {{"q", dt, n}}; }

WireLayout partial(DType wire, std::int64_t n) { return {{"partial", wire, n}}; }

WireLayout out_lse(std::int64_t q, std::int64_t rows) {
  return {{"out", DType::F32, q}, {"lse", DType::F32, rows}};
}

}  // namespace wire
}  // namespace burst
