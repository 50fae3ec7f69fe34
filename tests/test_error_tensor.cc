#include <gtest/gtest.h>

#include "burst/error.h"
#include "burst/tensor.h"

namespace burst {
namespace {

TEST(Error, CarriesKindAndValues) {
  try {
    BURST_CHECK(1 == 2, InvalidArgument, "H=", 6, " H_kv=", 4);
    FAIL() << "BURST_CHECK did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    EXPECT_EQ(e.message(), "H=6 H_kv=4");
    EXPECT_STREQ(e.what(), "InvalidArgument: H=6 H_kv=4");
  }
}

TEST(Tensor, ContiguousViewStrides) {
  Tensor t({2, 3, 4, 5});
  TensorView v = t.view();
  EXPECT_EQ(v.ndim, 4);
  EXPECT_EQ(v.stride[0], 60);
  EXPECT_EQ(v.stride[2], 5);
  EXPECT_EQ(v.numel(), 120);
  EXPECT_TRUE(v.is_contiguous());
  std::swap(v.shape[1], v.shape[2]);  // a permuted (SDPA-style) view is not contiguous
  std::swap(v.stride[1], v.stride[2]);
  EXPECT_FALSE(v.is_contiguous());
  EXPECT_EQ(v.describe(), "[2,4,3,5] strides [60,5,20,1] f32");
}

TEST(Tensor, RejectsBadShapes) {
  EXPECT_THROW(Tensor({-1, 2}), Error);
  float x = 0;
  EXPECT_THROW(make_view(&x, {}), Error);
  EXPECT_THROW(make_view(&x, {1, 1, 1, 1, 1}), Error);
}

}  // namespace
}  // namespace burst
