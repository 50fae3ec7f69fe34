// Tests of the dispatch rule (burst/dispatch.h): the table CPU features → path per dtype and
// pass on the CPU kinds burst meets (described by their CPUID facts, so every row is checked on
// any host), the ISA names, and that this host's own features resolve to an ISA it can run.
#include <gtest/gtest.h>

#include <string>

#include "burst/attention.h"
#include "burst/dispatch.h"
#include "burst/error.h"

namespace burst {
namespace {

CpuFeatures avx2_host(CpuVendor vendor, int family, int model) {
  CpuFeatures c;
  c.vendor = vendor;
  c.family = family;
  c.model = model;
  c.avx2 = true;
  return c;
}
CpuFeatures avx512_host(CpuVendor vendor, int family, int model, bool bf16) {
  CpuFeatures c = avx2_host(vendor, family, model);
  c.avx512 = true;
  c.avx512_bf16 = bf16;
  return c;
}
// Sapphire / Emerald Rapids: AMX-BF16, AVX512-BF16, AVX512-FP16; granted unless said otherwise.
CpuFeatures sapphire_rapids(bool os_enabled = true, bool permitted = true) {
  CpuFeatures c = avx512_host(CpuVendor::Intel, 6, 143, true);
  c.avx512_fp16 = true;
  c.amx_bf16 = true;
  c.amx_os = os_enabled;
  c.amx_permitted = os_enabled && permitted;
  return c;
}

struct Row {
  const char* cpu;
  CpuFeatures features;
  Isa f32, bf16, f16;
  bool bf16_widened;
};

// The table of the header comment, one row per CPU kind.
std::vector<Row> rule_table() {
  return {
      {"Intel Sapphire Rapids (AMX)", sapphire_rapids(), Isa::Avx512, Isa::Amx, Isa::Avx512, false},
      {"Intel SPR, AMX refused by arch_prctl", sapphire_rapids(true, false), Isa::Avx512, Isa::Avx512,
       Isa::Avx512, true},
      {"Intel SPR, OS without tile state", sapphire_rapids(false), Isa::Avx512, Isa::Avx512, Isa::Avx512,
       true},
      {"Intel Cooper Lake (avx512_bf16, no AMX)", avx512_host(CpuVendor::Intel, 6, 85, true), Isa::Avx512,
       Isa::Avx512, Isa::Avx512, true},
      {"Intel Ice Lake server (avx512, no bf16)", avx512_host(CpuVendor::Intel, 6, 106, false), Isa::Avx512,
       Isa::Avx512, Isa::Avx512, true},
      {"Intel Cascade Lake (avx512, no bf16)", avx512_host(CpuVendor::Intel, 6, 85, false), Isa::Avx512,
       Isa::Avx512, Isa::Avx512, true},
      {"AMD Zen 4 (avx512_bf16)", avx512_host(CpuVendor::Amd, 25, 17, true), Isa::Avx512, Isa::Avx512Bf16,
       Isa::Avx512, false},
      {"AMD Zen 5 (avx512_bf16)", avx512_host(CpuVendor::Amd, 26, 2, true), Isa::Avx512, Isa::Avx512Bf16,
       Isa::Avx512, false},
      {"AMD Zen 3 (AVX2 only)", avx2_host(CpuVendor::Amd, 25, 1), Isa::Avx2, Isa::Avx2, Isa::Avx2, true},
      {"unknown vendor with avx512_bf16", avx512_host(CpuVendor::Other, 6, 0, true), Isa::Avx512, Isa::Avx512,
       Isa::Avx512, true},
      {"no SIMD", CpuFeatures{}, Isa::Portable, Isa::Portable, Isa::Portable, true},
  };
}

TEST(Dispatch, RuleTablePerDtypeAndPass) {
  for (const Row& row : rule_table()) {
    SCOPED_TRACE(row.cpu);
    for (KernelPass pass : {KernelPass::Forward, KernelPass::Backward}) {
      const PathChoice f32 = choose_path(row.features, DType::F32, pass);
      const PathChoice bf16 = choose_path(row.features, DType::BF16, pass);
      const PathChoice f16 = choose_path(row.features, DType::F16, pass);
      EXPECT_EQ(to_string(f32.isa), std::string(to_string(row.f32)));
      EXPECT_EQ(to_string(bf16.isa), std::string(to_string(row.bf16)));
      EXPECT_EQ(to_string(f16.isa), std::string(to_string(row.f16)));
      EXPECT_EQ(bf16.widened, row.bf16_widened);
      EXPECT_FALSE(f32.widened);
      EXPECT_TRUE(f16.widened);  // fp16 is the fp32 path plus a conversion, on every CPU
      // A widened bf16 / fp16 request runs exactly the fp32 path's ISA: never a slower one.
      if (bf16.widened) { EXPECT_EQ(bf16.isa, f32.isa); }
      EXPECT_EQ(f16.isa, f32.isa);
      EXPECT_EQ(bf16_operands(bf16.isa, DType::BF16), !bf16.widened);
      for (const PathChoice* c : {&f32, &bf16, &f16}) EXPECT_FALSE(c->reason.empty());
    }
  }
}

TEST(Dispatch, ReasonsNameTheRule) {
  EXPECT_NE(choose_path(sapphire_rapids(), DType::BF16, KernelPass::Forward).reason.find("AMX"),
            std::string::npos);
  EXPECT_NE(
      choose_path(sapphire_rapids(true, false), DType::BF16, KernelPass::Forward).reason.find("refused"),
      std::string::npos);
  EXPECT_NE(choose_path(avx512_host(CpuVendor::Intel, 6, 85, true), DType::BF16, KernelPass::Backward)
                .reason.find("half the fp32"),
            std::string::npos);
  EXPECT_EQ(choose_path(sapphire_rapids(), DType::BF16, KernelPass::Forward).path, "amx-bf16");
  EXPECT_EQ(choose_path(avx2_host(CpuVendor::Amd, 25, 1), DType::BF16, KernelPass::Forward).path,
            "avx2-fp32");
}

TEST(Dispatch, AmxNeedsCpuidOsAndPermission) {
  CpuFeatures c = sapphire_rapids();
  EXPECT_TRUE(c.amx_usable());
  c.amx_permitted = false;
  EXPECT_FALSE(c.amx_usable());
  c = sapphire_rapids();
  c.avx512_bf16 = false;  // the softmax and conversions between the tile products need it
  EXPECT_FALSE(c.amx_usable());
}

TEST(Dispatch, ThisHostResolvesToARunnableIsa) {
  for (DType dt : {DType::F32, DType::BF16, DType::F16})
    for (KernelPass pass : {KernelPass::Forward, KernelPass::Backward}) {
      const Isa isa = resolve_isa(Isa::Auto, dt, pass);
      EXPECT_NE(isa, Isa::Auto);
      EXPECT_NE(isa, Isa::AmxEmulated);  // a test path, never chosen
      EXPECT_TRUE(isa_available(isa)) << to_string(isa);
      EXPECT_EQ(resolve_isa(Isa::Avx2, dt, pass), Isa::Avx2);  // an explicit request is kept
    }
  const CpuFeatures& cpu = detect_cpu_features();
  EXPECT_EQ(isa_available(Isa::Amx), cpu.amx_usable());
  EXPECT_EQ(cpu.avx512_bf16, detect_isa() == Isa::Avx512Bf16);
}

TEST(Dispatch, IsaNamesRoundTrip) {
  for (Isa isa :
       {Isa::Auto, Isa::Amx, Isa::AmxEmulated, Isa::Avx512Bf16, Isa::Avx512, Isa::Avx2, Isa::Portable})
    EXPECT_EQ(parse_isa(to_string(isa)), isa);
  try {
    parse_isa("sse2");
    ADD_FAILURE() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("amx-emulated"), std::string::npos);
  }
}

}  // namespace
}  // namespace burst
