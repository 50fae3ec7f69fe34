// The stand-in out O' of device/out_synth.h (host twin; the GPU kernel runs the same functions
// and test_cuda_cudnn compares it bit for bit): rowsum(dO ∘ O') must come back as delta within
// out_synth_delta_bound — summed exactly (fp64) and as a consumer sums it (fp32, in order) — and
// O' must stay within the range of the out that delta came from.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "burst/tensor.h"
#include "device/out_synth.h"

namespace burst::device {
namespace {

float round_to(float x, DType dt) {
  if (dt == DType::BF16) return bf16_to_float(bf16_from_float(x));
  if (dt == DType::F16) return f16_to_float(f16_from_float(x));
  return x;
}

/// O' of one row, rounded to dt (the host twin of cuda::synthesize_out).
std::vector<float> synth(const std::vector<float>& dout, float delta, DType dt) {
  const auto D = static_cast<std::int64_t>(dout.size());
  const float c =
      out_synth_scale([&](std::int64_t d) { return dout[static_cast<std::size_t>(d)]; }, D, delta);
  std::vector<float> o;
  for (const float g : dout) o.push_back(round_to(out_synth_value(g, c), dt));
  return o;
}

struct Sums {
  double exact;  // Σ dO·O' in fp64 (exact for these operands up to fp64's own rounding)
  float fp32;    // Σ dO·O' in fp32, in order of d
};
Sums rowsum(const std::vector<float>& dout, const std::vector<float>& o) {
  Sums s{0.0, 0.0f};
  for (std::size_t d = 0; d < dout.size(); ++d) {
    s.exact += static_cast<double>(dout[d]) * o[d];
    s.fp32 += dout[d] * o[d];
  }
  return s;
}

/// Checks one row: delta from a real out row (fp64, then fp32 as burst's delta is), O' against
/// the bound and the range. Returns |Σ dO·O' − delta| / bound for the caller's statistics.
double check_row(const std::vector<float>& dout, const std::vector<float>& out, DType dt) {
  double exact_delta = 0, l1 = 0, out_max = 0;
  for (std::size_t d = 0; d < dout.size(); ++d) {
    exact_delta += static_cast<double>(dout[d]) * out[d];
    l1 += std::fabs(dout[d]);
    out_max = std::max(out_max, static_cast<double>(std::fabs(out[d])));
  }
  const auto delta = static_cast<float>(exact_delta);
  const std::vector<float> o = synth(dout, delta, dt);
  const Sums s = rowsum(dout, o);
  const double bound = out_synth_delta_bound(delta, l1, static_cast<std::int64_t>(dout.size()), dt);
  EXPECT_LE(std::fabs(s.exact - delta), bound) << "exact sum, D " << dout.size();
  EXPECT_LE(std::fabs(static_cast<double>(s.fp32) - delta), bound) << "fp32 sum, D " << dout.size();
  for (const float x : o) {
    EXPECT_TRUE(std::isfinite(x));
    // |O'_d| = |delta| / ‖dO‖₁ ≤ max|O| (rounded up by at most one unit of the dtype)
    EXPECT_LE(std::fabs(x), out_max * (1 + 0x1p-7) + 1e-30);
  }
  return bound > 0 ? std::fabs(s.exact - delta) / bound : 0.0;
}

std::vector<float> random_row(std::mt19937_64& rng, std::int64_t D, DType dt, float scale, double zeros) {
  std::normal_distribution<float> n(0.0f, scale);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<float> r;
  for (std::int64_t d = 0; d < D; ++d) r.push_back(u(rng) < zeros ? 0.0f : round_to(n(rng), dt));
  return r;
}

TEST(OutSynth, RowsumComesBackAsDeltaWithinTheBound) {
  std::mt19937_64 rng(5);
  for (const DType dt : {DType::BF16, DType::F16})
    for (const std::int64_t D : {1, 16, 64, 128, 256}) {
      double worst = 0;
      for (int row = 0; row < 400; ++row) {
        const float scale = row % 4 == 0 ? 1e-3f : row % 4 == 1 ? 30.0f : 1.0f;
        const std::vector<float> dout = random_row(rng, D, dt, scale, row % 3 == 0 ? 0.3 : 0.0),
                                 out = random_row(rng, D, dt, 1.0f, 0.0);
        worst = std::max(worst, check_row(dout, out, dt));
      }
      // The bound is met and not vacuous: the rounding of O' shows (ratios well above 0). At D = 1
      // O' = delta / dO is O itself, exactly (a product of two 16-bit values is exact in fp32).
      if (D > 1) { EXPECT_GT(worst, 0.05) << to_string(dt) << " D " << D; }
    }
}

TEST(OutSynth, ExtremeRowsStayFiniteAndInRange) {
  for (const DType dt : {DType::BF16, DType::F16}) {
    const float big = dt == DType::F16 ? 60000.0f : 1e30f, tiny = dt == DType::F16 ? 1e-4f : 1e-30f;
    // dO and out at the ends of the dtype's range, delta of either sign, cancellation in delta.
    check_row({big, big, -big, big}, {1.0f, -1.0f, 0.5f, 0.25f}, dt);
    check_row({tiny, -tiny, tiny, tiny}, {big, big, -big, 0.0f}, dt);
    check_row({1.0f, 1.0f}, {big, -big}, dt);  // delta = 0 exactly: O' = 0
    check_row({0.0f, 3.0f, 0.0f}, {5.0f, -2.0f, 7.0f}, dt);
  }
  // A row with dO = 0 has delta 0 and gets O' = 0.
  for (const float x : synth({0.0f, 0.0f, 0.0f}, 0.0f, DType::BF16)) EXPECT_EQ(x, 0.0f);
  // O' takes dO's signs: every product dO_d · O'_d has delta's sign (no cancellation).
  const std::vector<float> g = {2.0f, -1.0f, 0.0f, 4.0f};
  const std::vector<float> o = synth(g, -3.0f, DType::BF16);
  for (std::size_t d = 0; d < g.size(); ++d) EXPECT_LE(g[d] * o[d], 0.0f);
  EXPECT_EQ(o[2], 0.0f);
}

TEST(OutSynth, TheBoundIsTightEnoughToCatchAWrongScale) {
  // A stand-in off by one unit of the dtype in its scale must break the bound on some row: the
  // bound is no wider than the rounding it accounts for.
  std::mt19937_64 rng(11);
  int caught = 0;
  for (int row = 0; row < 200; ++row) {
    const std::vector<float> dout = random_row(rng, 64, DType::BF16, 1.0f, 0.0),
                             out = random_row(rng, 64, DType::BF16, 1.0f, 0.0);
    double delta = 0, l1 = 0;
    for (std::size_t d = 0; d < dout.size(); ++d) {
      delta += static_cast<double>(dout[d]) * out[d];
      l1 += std::fabs(dout[d]);
    }
    std::vector<float> o = synth(dout, static_cast<float>(delta), DType::BF16);
    for (float& x : o) x *= 1.0f + 0x1p-7f;  // two units of bf16 off
    if (std::fabs(rowsum(dout, o).exact - delta) >
        out_synth_delta_bound(static_cast<float>(delta), l1, 64, DType::BF16))
      ++caught;
  }
  EXPECT_GT(caught, 150);
}

}  // namespace
}  // namespace burst::device
