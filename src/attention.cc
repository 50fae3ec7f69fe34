// Placeholder: filled in by the foundation work (issue 2).
#include "burst/attention.h"
namespace burst {
const char* to_string(KernelImpl impl) noexcept { return impl == KernelImpl::Tiled ? "tiled" : "reference"; }
const char* to_string(Isa isa) noexcept {
  switch (isa) {
    case Isa::Auto: return "auto";
    case Isa::Avx512: return "avx512";
    case Isa::Avx2: return "avx2";
    case Isa::Portable: return "portable";
  }
  return "?";
}
Isa detect_isa() noexcept {
  if (__builtin_cpu_supports("avx512f")) return Isa::Avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::Avx2;
  return Isa::Portable;
}
}  // namespace burst
