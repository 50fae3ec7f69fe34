#include <omp.h>

#include <CLI/CLI.hpp>
#include <iostream>
#include <nlohmann/json.hpp>

#include "burst/attention.h"
#include "commands.h"

namespace burst::cli {

void add_info_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("info", "print this machine's ISA and thread facts as JSON");
  cmd->callback([] {
    nlohmann::json j;
    j["isa"] = to_string(detect_isa());
    j["omp_max_threads"] = omp_get_max_threads();
    std::cout << j.dump() << std::endl;
  });
}

}  // namespace burst::cli
