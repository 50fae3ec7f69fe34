// Packing tensors into message fields through the device (see wire_pack.h).
#include "strategies/wire_pack.h"

#include "burst/error.h"
#include "strategies/views.h"

namespace burst::strategies {

void pack_field(const device::Device& dev, const WireLayout& layout, std::size_t i, const TensorView& src,
                std::byte* base) {
  const WireField& f = layout[i];
  BURST_CHECK(src.dtype == f.dtype && src.numel() == f.count, Internal, "wire field '", f.name, "' (",
              to_string(f.dtype), " x ", f.count, ") packed from ", src.describe());
  if (f.count == 0) return;
  dev.copy(src, field_view(layout, i, base, shape_of(src)));
}

TensorView field_view(const WireLayout& layout, std::size_t i, const std::byte* base,
                      std::vector<std::int64_t> shape) {
  const WireField& f = layout[i];
  std::int64_t n = 1;
  for (const std::int64_t x : shape) n *= x;
  BURST_CHECK(n == f.count, Internal, "view of ", n, " elements over wire field '", f.name, "' of ", f.count);
  return make_view(static_cast<const void*>(base + f.offset), f.dtype, shape);
}

void unpack_into(const device::Device& dev, const float* src, const TensorView& view) {
  if (view.numel() == 0) return;
  dev.copy(make_view(src, shape_of(view)), view);
}

float* f32_data(ByteBuffer& buffer) { return static_cast<float*>(static_cast<void*>(buffer.data())); }
const float* f32_data(const ByteBuffer& buffer) {
  return static_cast<const float*>(static_cast<const void*>(buffer.data()));
}

}  // namespace burst::strategies
