// View arithmetic (see views.h).
#include "strategies/views.h"

#include "burst/error.h"

namespace burst::strategies {

TensorView bshd_view(const float* data, std::int64_t B, std::int64_t S, std::int64_t H, std::int64_t D) {
  return make_view(data, {B, S, H, D});
}

TensorView rows_view(const float* data, std::int64_t B, std::int64_t H, std::int64_t S) {
  return make_view(data, {B, H, S});
}

TensorView narrow(const TensorView& t, int dim, std::int64_t begin, std::int64_t end) {
  const auto d = static_cast<std::size_t>(dim);
  BURST_CHECK(dim >= 0 && dim < t.ndim && 0 <= begin && begin <= end && end <= t.shape[d], Internal,
              "narrow [", begin, ", ", end, ") of dim ", dim, " of ", t.describe());
  TensorView v = t;
  v.shape[d] = end - begin;
  v.data = static_cast<char*>(t.data) + begin * t.stride[d] * static_cast<std::int64_t>(dtype_size(t.dtype));
  return v;
}

std::vector<std::int64_t> shape_of(const TensorView& t) {
  return std::vector<std::int64_t>(t.shape.begin(), t.shape.begin() + t.ndim);
}

}  // namespace burst::strategies
