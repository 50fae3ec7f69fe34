// burst/version.h: the generated macros are numbers the preprocessor can compare (an `#if` on an
// unsubstituted "@NAME@" would not compile) and agree with BURST_VERSION_STRING.
#include "burst/version.h"

#include <gtest/gtest.h>

#include <string>

#if !defined(BURST_VERSION_MAJOR) || !defined(BURST_VERSION_MINOR) || !defined(BURST_VERSION_PATCH)
#error "burst/version.h must define BURST_VERSION_MAJOR, _MINOR and _PATCH"
#endif
#if BURST_VERSION_MAJOR < 0 || BURST_VERSION_MINOR < 0 || BURST_VERSION_PATCH < 0
#error "burst/version.h: version numbers must be non-negative integers"
#endif
#if BURST_VERSION_MAJOR * 1000000 + BURST_VERSION_MINOR * 1000 + BURST_VERSION_PATCH >= 1000
#define BURST_TEST_VERSION_AT_LEAST_0_1 1
#else
#define BURST_TEST_VERSION_AT_LEAST_0_1 0
#endif

TEST(Version, MacrosMatchTheString) {
  const std::string joined = std::to_string(BURST_VERSION_MAJOR) + "." + std::to_string(BURST_VERSION_MINOR) +
                             "." + std::to_string(BURST_VERSION_PATCH);
  EXPECT_EQ(joined, BURST_VERSION_STRING);
  EXPECT_EQ(BURST_TEST_VERSION_AT_LEAST_0_1, 1) << "the project() version is at least 0.1.0";
}
