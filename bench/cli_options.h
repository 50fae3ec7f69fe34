// bench/cli_options.h — command-line options shared by the benchmarks and `burst plan`: the
// attention shape and the timing loop, registered in one place so that names, help texts and
// semantics agree across commands (each command keeps its own defaults in its options struct).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>

namespace burst::bench {

/// --batch B, --heads H, --kv-heads H_kv (0 → H), --dim D.
inline void add_shape_options(CLI::App* cmd, std::int64_t& batch, std::int64_t& heads, std::int64_t& kv_heads,
                              std::int64_t& dim) {
  cmd->add_option("--batch", batch, "B")->capture_default_str();
  cmd->add_option("--heads", heads, "H")->capture_default_str();
  cmd->add_option("--kv-heads", kv_heads, "H_kv (0: = H)");
  cmd->add_option("--dim", dim, "D")->capture_default_str();
}

/// --threads (OpenMP threads per rank), --repeats (timed; the median is reported), --warmup.
inline void add_timing_options(CLI::App* cmd, int& threads, int& repeats, int& warmup) {
  cmd->add_option("--threads", threads, "kernel (OpenMP) threads per rank")->capture_default_str();
  cmd->add_option("--repeats", repeats, "timed repeats (median reported)")->capture_default_str();
  cmd->add_option("--warmup", warmup, "untimed repeats first")->capture_default_str();
}

}  // namespace burst::bench
