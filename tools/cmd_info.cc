// `burst info` and `burst --version`: what this build is and what it runs on — version, git
// describe, compiler, MPI library, the kernel ISA paths this CPU can run, OpenMP threads and the
// data directory (one JSON line). The BLAS libtorch calls: `burst-lm info` (cmd_lm.cc).
#include <omp.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "bench/cluster_spec_io.h"
#include "bench/gpu.h"
#include "build_info.h"
#include "burst/attention.h"
#include "burst/comm.h"
#include "burst/dispatch.h"
#include "burst/version.h"
#include "commands.h"

namespace burst::cli {

namespace {

std::string compiler() {
#if defined(__clang__)
  return std::string("Clang ") + __clang_version__;
#elif defined(__GNUC__)
  return std::string("GCC ") + __VERSION__;
#else
  return "unknown";
#endif
}

}  // namespace

std::string version_line() {
  return std::string("burst ") + BURST_VERSION_STRING + " (git " + build_git_describe() + ")";
}

void add_info_command(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("info", "print this build's version, compiler, MPI, ISA paths and BLAS as JSON");
  cmd->callback([] {
    nlohmann::json j;
    j["version"] = BURST_VERSION_STRING;
    j["git_describe"] = build_git_describe();
    j["build_type"] = build_type();
    j["compiler"] = compiler();
    j["mpi_library"] = mpi_library_version();
    j["mpi_standard"] = mpi_standard_version();
    j["isa"] = to_string(detect_isa());
    nlohmann::json paths = nlohmann::json::array();
    for (Isa isa : supported_isas()) paths.push_back(to_string(isa));
    j["isa_paths"] = paths;
    // The path Auto takes per dtype and pass, and why (burst/dispatch.h); BURST_ISA (or --isa of
    // `burst bench kernel`) overrides it.
    const CpuFeatures& cpu = detect_cpu_features();
    j["cpu"] = {{"vendor", cpu.vendor == CpuVendor::Intel ? "intel"
                           : cpu.vendor == CpuVendor::Amd ? "amd"
                                                          : "other"},
                {"family", cpu.family},
                {"model", cpu.model},
                {"avx2", cpu.avx2},
                {"avx512", cpu.avx512},
                {"avx512_bf16", cpu.avx512_bf16},
                {"avx512_fp16", cpu.avx512_fp16},
                {"amx_bf16", cpu.amx_bf16},
                {"amx_os_enabled", cpu.amx_os},
                {"amx_permitted", cpu.amx_permitted}};
    nlohmann::json dispatch = nlohmann::json::array();
    for (DType dt : {DType::F32, DType::BF16, DType::F16})
      for (KernelPass pass : {KernelPass::Forward, KernelPass::Backward}) {
        const PathChoice c = choose_path(cpu, dt, pass);
        dispatch.push_back({{"dtype", to_string(dt)},
                            {"pass", pass == KernelPass::Forward ? "fwd" : "bwd"},
                            {"isa", to_string(c.isa)},
                            {"path", c.path},
                            {"widened_to_fp32", c.widened},
                            {"reason", c.reason}});
      }
    j["dispatch"] = dispatch;
    if (const char* env = std::getenv("BURST_ISA")) j["isa_override"] = env;
    j["omp_max_threads"] = omp_get_max_threads();
    j["share_dir"] = bench::share_dir().string();
    j["cuda"] = bench::gpu_info();  // built with CUDA, the GPUs seen, MPIX_Query_cuda_support
    std::cout << j.dump() << std::endl;
  });
}

}  // namespace burst::cli
