// tests/cuda_test_util.h — what the single-process CUDA tests share: a fixture base that skips
// each test when no GPU is visible, and main's exit code 77 (ctest: skipped) when every test
// that ran was skipped, so a machine without a GPU reports them skipped rather than passed.
#pragma once

#include <gtest/gtest.h>

#include "device/cuda/cuda_memory.h"

namespace burst::test {

/// Fixture base: GTEST_SKIP with the driver's reason when no CUDA device is visible. A derived
/// SetUp calls it first and returns when IsSkipped().
class OnCudaDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    const cuda::DeviceQuery q = cuda::query_devices();
    if (q.count == 0) GTEST_SKIP() << "no CUDA device: " << q.reason;
  }
};

/// main's body: runs every test; 77 when all that ran were skipped (no GPU here), else
/// RUN_ALL_TESTS's code.
inline int run_cuda_tests(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  const ::testing::UnitTest& u = *::testing::UnitTest::GetInstance();
  if (rc == 0 && u.skipped_test_count() > 0 && u.successful_test_count() == 0) return 77;
  return rc;
}

}  // namespace burst::test
