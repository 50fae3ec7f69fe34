// The device seam's CPU operations (src/device/cpu/cpu_device.h) against plain index loops:
// strided copy, gather and scatter(-add) along a middle and the innermost dimension, rounding to
// bf16 and adding it, the first non-finite element (padding never read; the block scan against
// its element-by-element twin) and fill (padding never written).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "burst/splitmix64.h"
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
/// The block scan of first_nonfinite against first_nonfinite_elementwise: f32, bf16 and f16
/// storage; contiguous views (one run of up to 9,000 elements, so hits fall in later blocks and
/// on block edges), views with padding between rows, heads or tokens (runs of one row or one
/// token), and an innermost stride of 2; no hit, one or several planted inf / −inf / NaN
/// (several exponent patterns of each), some only in the padding, which neither may report.
TEST(CpuDevice, FirstNonfiniteBlockScanMatchesTheElementwiseTwin) {
  const device::CpuDevice dev;
  SplitMix64 rng(20261128);
  const auto pick = [&](std::int64_t n) {
    return static_cast<std::int64_t>(rng.uniform() * static_cast<double>(n));
  };
  const float specials[] = {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(),
                            -std::numeric_limits<float>::quiet_NaN()};
  int hits = 0, cases = 0;
  for (const DType dtype : {DType::F32, DType::BF16, DType::F16})
    for (int trial = 0; trial < 60; ++trial) {
      const std::int64_t B = 1 + pick(2), S = 1 + pick(40), H = 1 + pick(4), D = 1 + pick(70);
      // Padding: 0 (contiguous), after each row, after each token, or the innermost stride 2.
      const int pad = trial % 4;
      const std::int64_t sd = pad == 3 ? 2 : 1, sh = D * sd + (pad == 1 ? 3 : 0);
      const std::int64_t ss = H * sh + (pad == 2 ? 5 : 0), sb = S * ss + (pad == 0 ? 0 : 7);
      const std::int64_t n = B * sb;
      std::vector<float> values(static_cast<std::size_t>(n));
      for (float& x : values) x = static_cast<float>(8 * rng.uniform() - 4);
      const int planted = trial % 5 == 0 ? 0 : 1 + static_cast<int>(pick(3));
      for (int i = 0; i < planted; ++i) values[static_cast<std::size_t>(pick(n))] = specials[pick(4)];
      std::vector<std::uint16_t> bits16(static_cast<std::size_t>(n));
      TensorView t = make_view(values.data(), {B, S, H, D});
      if (dtype != DType::F32) {
        for (std::size_t i = 0; i < values.size(); ++i) {
          const float x = values[i];
          if (dtype == DType::BF16)
            bits16[i] = bf16_from_float(x);
          else  // f16: finite values stay finite (|x| < 4); specials keep their class
            bits16[i] = std::isnan(x)   ? 0x7e00
                        : std::isinf(x) ? (x > 0 ? 0x7c00 : 0xfc00)
                                        : f16_from_float(x);
        }
        t = make_view(bits16.data(), dtype, {B, S, H, D});
      }
      t.stride = {sb, ss, sh, sd};
      const std::int64_t want = device::first_nonfinite_elementwise(t);
      ASSERT_EQ(dev.first_nonfinite(t), want)
          << to_string(dtype) << " trial " << trial << " shape " << B << "x" << S << "x" << H << "x" << D;
      hits += want >= 0;
      ++cases;
    }
  // The planted values must have been seen in most cases, and missed in the others.
  EXPECT_GT(hits, cases / 2);
  EXPECT_LT(hits, cases);
  // One long contiguous run: a hit at every position near the block edges, then none.
  std::vector<float> run(2 * 4 * 2 * 300, 1.0f);
  const TensorView rv = make_view(run.data(), {2, 4, 2, 300});
  for (const std::int64_t at : {0L, 1L, 255L, 256L, 257L, 511L, 512L, 4000L, 4799L}) {
    run[static_cast<std::size_t>(at)] = specials[at % 4];
    EXPECT_EQ(dev.first_nonfinite(rv), at);
    EXPECT_EQ(device::first_nonfinite_elementwise(rv), at);
    run[static_cast<std::size_t>(at)] = 1.0f;
  }
  EXPECT_EQ(dev.first_nonfinite(rv), -1);
}

}  // namespace burst
