// burst/isa.h — the kernel implementations and instruction sets, and what this CPU can run.
//
// Owns: the KernelImpl and Isa enums that the public attention API (burst/attention.h), the
// dispatcher (burst/dispatch.h) and the kernels (src/kernels) all name, their spellings, and the
// run-time CPUID checks of which ISA this CPU and OS can run. Includes no other burst header, so
// the kernels include this and not the attention API. Does not: choose a path per dtype and pass
// (burst/dispatch.h does), run kernels.
#pragma once

#include <cstdint>
#include <vector>

namespace burst {

enum class KernelImpl : std::uint8_t { Tiled, Reference };
/// Instruction set of the Tiled path. Auto picks the fastest path for the request's dtype and
/// pass on this CPU (burst/dispatch.h: choose_path, by measured speed, not by what exists).
/// Avx512 needs AVX-512 F and DQ (every AVX-512 CPU but the Xeon Phi), Avx2 AVX2, FMA and F16C.
/// Avx512Bf16 is Avx512 plus vdpbf16ps (AVX512_BF16): bf16 q, k, v run their GEMMs on bf16
/// operands with fp32 accumulation and the probabilities P rounded to bf16 (as FlashAttention
/// does; docs/design.md § bf16 arithmetic); F32 and F16 inputs run exactly the Avx512 path.
/// Amx is Avx512Bf16 with the bf16 GEMMs on AMX tiles (tdpbf16ps; same operands, same
/// rounding points); AmxEmulated runs that AMX kernel with its tile operations emulated in
/// software (a model of the instruction that matches the hardware bit for bit on one reduction
/// pair and within fp32 accumulation error beyond), so the AMX kernel logic is tested on any
/// AVX2 CPU (slow: for tests, never chosen by Auto).
enum class Isa : std::uint8_t { Auto, Avx512Bf16, Avx512, Avx2, Portable, Amx, AmxEmulated };

const char* to_string(KernelImpl impl) noexcept;
const char* to_string(Isa isa) noexcept;
/// Best vector ISA this CPU supports (cpuid at run time): Avx512Bf16, Avx512, Avx2 or Portable
/// (never Amx: AMX is reported by isa_available(Isa::Amx)).
Isa detect_isa() noexcept;
/// Whether this CPU (and OS, for AMX) can run `isa`; Auto is always available.
bool isa_available(Isa isa) noexcept;
/// Every Tiled-path ISA this CPU can run, best first (Amx first where usable); Portable is
/// always there, AmxEmulated last wherever a SIMD ISA is (cpuid at run time).
std::vector<Isa> supported_isas();

}  // namespace burst
