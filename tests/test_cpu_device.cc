// The device seam's CPU operations (src/device/cpu/cpu_device.h) against plain index loops:
// strided copy, gather and scatter(-add) along a middle and the innermost dimension, rounding to
// bf16 and adding it, the first non-finite element (padding never read) and fill (padding never
// written).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "burst/tensor.h"
#include "device/cpu/cpu_device.h"

namespace burst {
namespace {

/// The CPU device's copies against plain index loops on a strided [2, 5, 3, 4] view (element
/// (a, b, c, d) at a·100 + b·16 + c·5 + d, padding between rows and heads).
TEST(CpuDevice, CopiesGathersScattersFillsAddsAndRoundsAsPlainLoops) {
  const device::CpuDevice dev;
  std::vector<float> big(200 + 16 * 5);
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i) * 0.5f - 7.0f;
  TensorView strided = make_view(big.data(), {2, 5, 3, 4});
  strided.stride = {100, 16, 5, 1};
  auto at = [&](std::int64_t a, std::int64_t b, std::int64_t c, std::int64_t d) {
    return big[static_cast<std::size_t>(a * 100 + b * 16 + c * 5 + d)];
  };
  std::vector<float> packed(120);
  dev.copy(strided, make_view(packed.data(), {2, 5, 3, 4}));
  for (std::int64_t a = 0; a < 2; ++a)
    for (std::int64_t b = 0; b < 5; ++b)
      for (std::int64_t c = 0; c < 3; ++c)
        for (std::int64_t d = 0; d < 4; ++d)
          ASSERT_EQ(packed[static_cast<std::size_t>(((a * 5 + b) * 3 + c) * 4 + d)], at(a, b, c, d));
  const std::vector<std::int64_t> rows = {4, 0, 2};
  std::vector<float> gathered(2 * 3 * 3 * 4);
  dev.index_copy(strided, make_view(gathered.data(), {2, 3, 3, 4}), 1, rows.data(), nullptr, false, false);
  for (std::int64_t a = 0; a < 2; ++a)
    for (std::int64_t i = 0; i < 3; ++i)
      for (std::int64_t c = 0; c < 3; ++c)
        for (std::int64_t d = 0; d < 4; ++d)
          ASSERT_EQ(gathered[static_cast<std::size_t>(((a * 3 + i) * 3 + c) * 4 + d)],
                    at(a, rows[static_cast<std::size_t>(i)], c, d));
  std::vector<float> acc(120, 1.0f);
  dev.index_copy(make_view(gathered.data(), {2, 3, 3, 4}), make_view(acc.data(), {2, 5, 3, 4}), 1,
                 rows.data(), nullptr, true, true);  // scatter-add back
  for (std::int64_t a = 0; a < 2; ++a)
    for (std::int64_t b = 0; b < 5; ++b)
      for (std::int64_t c = 0; c < 3; ++c)
        for (std::int64_t d = 0; d < 4; ++d) {
          const bool hit = b == 4 || b == 0 || b == 2;
          ASSERT_EQ(acc[static_cast<std::size_t>(((a * 5 + b) * 3 + c) * 4 + d)],
                    hit ? 1.0f + at(a, b, c, d) : 1.0f);
        }
  std::vector<float> inner(2 * 5 * 3 * 2);  // gather along the innermost dim, element by element
  const std::vector<std::int64_t> cols = {3, 1};
  dev.index_copy(strided, make_view(inner.data(), {2, 5, 3, 2}), 3, cols.data(), nullptr, false, false);
  EXPECT_EQ(inner[1], at(0, 0, 0, 1));
  EXPECT_EQ(inner[static_cast<std::size_t>(((1 * 5 + 4) * 3 + 2) * 2)], at(1, 4, 2, 3));
  std::vector<std::uint16_t> h(120);
  const TensorView hv = make_view(h.data(), DType::BF16, {2, 5, 3, 4});
  dev.convert(strided, hv);
  std::vector<float> sum(120, 0.25f);
  dev.add(hv, make_view(sum.data(), {2, 5, 3, 4}));
  for (std::size_t i = 0; i < 120; ++i) {
    ASSERT_EQ(h[i], bf16_from_float(packed[i]));
    ASSERT_EQ(sum[i], 0.25f + bf16_to_float(h[i]));
  }
  EXPECT_EQ(dev.first_nonfinite(strided), -1);
  big[static_cast<std::size_t>(1 * 100 + 2 * 16 + 1 * 5 + 3)] = -INFINITY;  // element (1, 2, 1, 3)
  big[static_cast<std::size_t>(1 * 100 + 4 * 16 + 0 * 5 + 0)] = NAN;        // a later one: not the first
  big[4] = NAN;                                                             // padding: not seen
  EXPECT_EQ(dev.first_nonfinite(strided), ((1 * 5 + 2) * 3 + 1) * 4 + 3);
  dev.convert(strided, hv);
  EXPECT_EQ(dev.first_nonfinite(hv), ((1 * 5 + 2) * 3 + 1) * 4 + 3);
  big[4] = -5.0f;  // the padding's value again, for the fill check below
  dev.fill(strided, -2.0f);
  EXPECT_EQ(at(1, 4, 2, 3), -2.0f);
  EXPECT_EQ(big[4], -5.0f);  // padding between heads (c stride 5, d < 4) untouched
}

}  // namespace
}  // namespace burst
