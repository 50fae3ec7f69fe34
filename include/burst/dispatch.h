// burst/dispatch.h — which kernel path runs a request on this CPU, and why.
//
// Owns: the CPU facts the choice depends on (CpuFeatures, read once from CPUID, XCR0 and the
// kernel's AMX permission) and the rule that maps (CPU, dtype, pass) to a Tiled-path ISA
// (choose_path): a pure function, so the table is unit-tested on CPUs this host is not.
// Invariant: the choice is by measured speed, not by what merely exists — a bf16 or fp16
// request never runs a path slower than widening to fp32 and running the fp32 path (the
// measurements behind each rule are in docs/dispatch.md).
// Does not: time anything at run time (the rules are fixed; `burst calibrate` measures the rate
// of the chosen path for the cost model), or read the environment (the CLI's --isa / BURST_ISA
// arrive as AttentionParams::isa / DistConfig::isa).
#pragma once

#include <cstdint>
#include <string>

#include "burst/attention.h"
#include "burst/tensor.h"

namespace burst {

enum class CpuVendor : std::uint8_t { Intel, Amd, Other };
enum class KernelPass : std::uint8_t { Forward, Backward };

/// What the dispatch rule needs to know about a CPU.
struct CpuFeatures {
  CpuVendor vendor = CpuVendor::Other;
  int family = 0, model = 0;   ///< CPUID leaf 1, display family / model
  bool avx2 = false;           ///< AVX2 + FMA + F16C (the AVX2 table and every SIMD converter)
  bool avx512 = false;         ///< AVX-512F + DQ (with avx2; DQ for vreduceps in exp2)
  bool avx512_bf16 = false;    ///< AVX-512 BW + VL + BF16 (vdpbf16ps; with avx512)
  bool avx512_fp16 = false;    ///< AVX512-FP16
  bool amx_bf16 = false;       ///< CPUID leaf 7 EDX: AMX-TILE (bit 24) and AMX-BF16 (bit 22)
  bool amx_os = false;         ///< XCR0 bits 17 and 18: the OS saves tile state
  bool amx_permitted = false;  ///< arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) granted
  /// tdpbf16ps can run: CPUID, OS state and permission all present (plus AVX512-BF16 for the
  /// softmax and conversions between the tile products).
  bool amx_usable() const { return amx_bf16 && amx_os && amx_permitted && avx512_bf16; }
};

/// This CPU's features. The first call asks Linux for AMX tile permission once per process
/// (arch_prctl ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA = 18) when CPUID and XCR0 report AMX; a
/// refusal leaves amx_permitted false and every AMX path off. Thread-safe; not collective.
const CpuFeatures& detect_cpu_features() noexcept;

/// The path one (dtype, pass) request takes on a CPU, and the reason in words.
struct PathChoice {
  Isa isa = Isa::Portable;  ///< what AttentionParams::isa = Auto resolves to
  /// "amx-bf16", "avx512-bf16-dot", "avx512-fp32", "avx2-fp32" or "portable-fp32".
  std::string path;
  bool widened = false;  ///< 16-bit inputs are widened to fp32 and run the fp32 path
  std::string reason;    ///< one sentence naming the rule and its evidence
};

/// The rule table (pure; docs/dispatch.md):
/// - F32: the widest fp32 FMA table (avx512 > avx2 > portable).
/// - BF16: AMX tiles where usable; else on AMD (Zen 4/5) vdpbf16ps, which runs at twice the
///   fp32 FMA rate there; else (Intel without AMX or with AMX refused — vdpbf16ps at half the
///   fp32 rate on Intel cores — and unknown vendors) widened to fp32 on the fp32 path.
/// - F16: widened to fp32 on every CPU (AVX512-FP16's dot products accumulate in fp16, which the
///   fp32-accumulation rule forbids), so fp16 is the fp32 path plus one conversion per packed
///   element.
/// pass is part of the key so a rule can differ between passes; today both follow the rules above.
/// F64 is not a kernel dtype: it maps like F32 (the boundary rejects it).
PathChoice choose_path(const CpuFeatures& cpu, DType dtype, KernelPass pass);

/// AttentionParams::isa resolved for this CPU: Auto → choose_path(detect_cpu_features(), ...).isa,
/// anything else returned as given (the caller checks isa_available).
Isa resolve_isa(Isa requested, DType dtype, KernelPass pass) noexcept;

/// Whether (isa, dtype) runs the GEMMs on bf16 operands (P and dS rounded to bf16 as operands,
/// fp32 accumulators): bf16 inputs on Avx512Bf16, Amx or AmxEmulated. Everything else computes in
/// fp32 on widened inputs.
constexpr bool bf16_operands(Isa isa, DType dtype) noexcept {
  return dtype == DType::BF16 && (isa == Isa::Avx512Bf16 || isa == Isa::Amx || isa == Isa::AmxEmulated);
}

/// Parses an ISA name as to_string(Isa) prints it ("auto", "amx", "amx-emulated", "avx512bf16",
/// "avx512", "avx2", "portable"). Throws: Error(InvalidArgument) naming the valid values.
Isa parse_isa(const std::string& name);

}  // namespace burst
