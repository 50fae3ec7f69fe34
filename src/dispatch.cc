// CPU facts (CPUID, XCR0, the AMX permission) and the dispatch rule of burst/dispatch.h.
#include "burst/dispatch.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>

#include "burst/error.h"

namespace burst {
namespace {

constexpr int kArchGetXcompPerm = 0x1022;  // <asm/prctl.h>, Linux ≥ 5.16
constexpr int kArchReqXcompPerm = 0x1023;
constexpr int kXfeatureXtiledata = 18;

std::uint64_t xcr0() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0 || (ecx & (1u << 27)) == 0) return 0;  // no OSXSAVE
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<std::uint64_t>(hi) << 32) | lo;
}

// Asks Linux for the tile data state (AMX registers are off for every process until it asks;
// without it the first tile instruction raises SIGILL). True when granted now or before.
bool request_amx_permission() {
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) return false;
  unsigned long mask = 0;
  if (syscall(SYS_arch_prctl, kArchGetXcompPerm, &mask) != 0) return false;
  return (mask & (1ul << kXfeatureXtiledata)) != 0;
}

CpuFeatures read_cpu() {
  CpuFeatures c;
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(0, &eax, &ebx, &ecx, &edx) != 0) {
    char vendor[13] = {};
    std::memcpy(vendor, &ebx, 4);
    std::memcpy(vendor + 4, &edx, 4);
    std::memcpy(vendor + 8, &ecx, 4);
    if (std::strcmp(vendor, "GenuineIntel") == 0) c.vendor = CpuVendor::Intel;
    if (std::strcmp(vendor, "AuthenticAMD") == 0) c.vendor = CpuVendor::Amd;
  }
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0) {
    const int base = static_cast<int>((eax >> 8) & 0xf);
    c.family = base == 0xf ? base + static_cast<int>((eax >> 20) & 0xff) : base;
    c.model = static_cast<int>((eax >> 4) & 0xf);
    if (base == 0x6 || base == 0xf) c.model |= static_cast<int>((eax >> 16) & 0xf) << 4;
  }
  // The SIMD tables this CPU runs are detect_isa's answer (src/attention.cc: the one place that
  // reads those CPUID bits), so the two cannot disagree.
  const Isa best = detect_isa();
  c.avx2 = best != Isa::Portable;
  c.avx512 = best == Isa::Avx512 || best == Isa::Avx512Bf16;
  c.avx512_bf16 = best == Isa::Avx512Bf16;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) != 0) {
    c.avx512_fp16 = c.avx512 && (edx & (1u << 23)) != 0;
    c.amx_bf16 = (edx & (1u << 22)) != 0 && (edx & (1u << 24)) != 0;
  }
  const std::uint64_t tile_state = (1ull << 17) | (1ull << 18);  // XTILECFG, XTILEDATA
  c.amx_os = c.amx_bf16 && (xcr0() & tile_state) == tile_state;
  c.amx_permitted = c.amx_os && request_amx_permission();
  return c;
}

Isa fp32_isa(const CpuFeatures& c) { return c.avx512 ? Isa::Avx512 : c.avx2 ? Isa::Avx2 : Isa::Portable; }
const char* fp32_path(const CpuFeatures& c) {
  return c.avx512 ? "avx512-fp32" : c.avx2 ? "avx2-fp32" : "portable-fp32";
}

}  // namespace

const CpuFeatures& detect_cpu_features() noexcept {
  static const CpuFeatures features = read_cpu();  // immutable after the first call (thread-safe init)
  return features;
}

PathChoice choose_path(const CpuFeatures& cpu, DType dtype, KernelPass pass) {
  (void)pass;  // both passes follow the same rules today (header)
  PathChoice c;
  c.isa = fp32_isa(cpu);
  c.path = fp32_path(cpu);
  if (dtype == DType::F32 || dtype == DType::F64) {
    c.reason = cpu.avx512 ? "fp32: AVX-512 FMA (the widest fp32 table)"
               : cpu.avx2 ? "fp32: AVX2 FMA (no AVX-512F)"
                          : "fp32: portable C++ (no AVX2+FMA+F16C)";
    return c;
  }
  c.widened = true;
  if (dtype == DType::F16) {
    c.reason = cpu.avx512_fp16
                   ? "fp16 widened to fp32 on load: AVX512-FP16 dot products accumulate in fp16, and "
                     "accumulators must be fp32; the fp32 path plus one conversion per packed element"
                   : "fp16 widened to fp32 on load (no fp16 arithmetic with fp32 accumulation here)";
    return c;
  }
  // bf16
  if (cpu.amx_usable()) {
    c.isa = Isa::Amx;
    c.path = "amx-bf16";
    c.widened = false;
    c.reason =
        "bf16: AMX tdpbf16ps tiles (about 6x the AVX-512 fp32 FMA rate per core on Sapphire Rapids: "
        "975 against 165 GFLOP/s probed)";
    return c;
  }
  const std::string amx_note = !cpu.amx_bf16 ? ""
                               : !cpu.amx_os ? "AMX present but the OS does not enable tile state (XCR0); "
                               : !cpu.amx_permitted ? "AMX refused by the kernel (arch_prctl XTILEDATA); "
                                                    : "AMX without AVX512-BF16; ";
  if (cpu.avx512_bf16 && cpu.vendor == CpuVendor::Amd) {
    c.isa = Isa::Avx512Bf16;
    c.path = "avx512-bf16-dot";
    c.widened = false;
    c.reason = amx_note +
               "bf16: vdpbf16ps, twice the fp32 FMA rate on AMD Zen 4/5 (bf16/fp32 kernel speed 1.6-1.75x "
               "measured on Zen 4)";
    return c;
  }
  if (cpu.avx512_bf16) {
    c.reason =
        amx_note + (cpu.vendor == CpuVendor::Intel
                        ? "bf16 widened to fp32: vdpbf16ps runs at half the fp32 FMA rate on Intel cores "
                          "(81 against 165 GFLOP/s probed; bf16 kernels at 0.6x fp32)"
                        : "bf16 widened to fp32: vdpbf16ps rate unknown on this vendor");
    return c;
  }
  c.reason = amx_note + "bf16 widened to fp32 on load (no bf16 dot product on this CPU)";
  return c;
}

Isa resolve_isa(Isa requested, DType dtype, KernelPass pass) noexcept {
  if (requested != Isa::Auto) return requested;
  try {
    return choose_path(detect_cpu_features(), dtype, pass).isa;
  } catch (...) {  // std::string allocation failure: the fp32 table is always right
    return detect_isa() == Isa::Avx512Bf16 ? Isa::Avx512 : detect_isa();
  }
}

Isa parse_isa(const std::string& name) {
  for (Isa isa :
       {Isa::Auto, Isa::Amx, Isa::AmxEmulated, Isa::Avx512Bf16, Isa::Avx512, Isa::Avx2, Isa::Portable})
    if (name == to_string(isa)) return isa;
  BURST_FAIL(InvalidArgument, "isa '", name,
             "' (valid: auto, amx, amx-emulated, avx512bf16, avx512, avx2, portable)");
}

}  // namespace burst
