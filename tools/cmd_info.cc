// `burst info` and `burst --version`: what this build is and what it runs on — version, git
// describe, compiler, MPI library, the kernel ISA paths this CPU can run, OpenMP threads and the
// data directory (one JSON line). The BLAS libtorch calls: `burst-lm info` (cmd_lm.cc).
#include <omp.h>

#include <CLI/CLI.hpp>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "bench/cluster_spec_io.h"
#include "build_info.h"
#include "burst/attention.h"
#include "burst/comm.h"
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
    j["omp_max_threads"] = omp_get_max_threads();
    j["share_dir"] = bench::share_dir().string();
    std::cout << j.dump() << std::endl;
  });
}

}  // namespace burst::cli
