// burst/splitmix64.h — SplitMix64, the one seeded generator of burst: its output is identical on
// every platform and compiler (std distributions are not), so every rank and machine derives the
// same benchmark masks, test inputs and benchmark inputs from the same seed.
// Source: Steele, Lea, Flood, "Fast splittable pseudorandom number generators", OOPSLA 2014.
// Not for cryptography.
#pragma once

#include <cstdint>

namespace burst {

class SplitMix64 {
 public:
  explicit constexpr SplitMix64(std::uint64_t seed) noexcept : state_(seed) {}
  /// Next 64-bit output (state += golden gamma, then the variant-13 finaliser).
  constexpr std::uint64_t next() noexcept {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  /// Uniform double in [0, 1) from the top 53 bits of next().
  constexpr double uniform() noexcept { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

 private:
  std::uint64_t state_;
};

}  // namespace burst
