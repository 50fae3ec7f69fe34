// Compiles and runs the C++ example of README.md verbatim: tests/CMakeLists.txt extracts the
// README's ```cpp block into readme_example.inc at configure time (re-run when README.md
// changes), and it is included below as the body of a test. The example's own
// `#include <burst/burst.h>` is a no-op there (the header was included first, #pragma once).
#include <burst/burst.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace {

TEST(Readme, CppExampleCompilesAndRuns) {
#include "readme_example.inc"
  // The example runs causal GQA attention on zero tensors: every visible score is 0, so row i
  // (which sees keys 0..i) has out = mean of zeros = 0 and lse = log(i + 1).
  ASSERT_EQ(out.shape(), (std::vector<std::int64_t>{1, 256, 8, 64}));
  ASSERT_EQ(lse.shape(), (std::vector<std::int64_t>{1, 8, 256}));
  for (float x : out.vec()) ASSERT_EQ(x, 0.0f);
  for (std::int64_t h = 0; h < 8; ++h)
    for (std::int64_t i = 0; i < 256; ++i)
      ASSERT_NEAR(lse.data()[h * 256 + i], std::log(static_cast<double>(i + 1)), 1e-5)
          << "h=" << h << " i=" << i;
}

}  // namespace
