// bench/cli_options.h — command-line options shared by the benchmarks and `burst plan`: the
// attention shape and the timing loop, registered in one place so that names, help texts and
// semantics agree across commands (each command keeps its own defaults in its options struct).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "burst/error.h"
#include "burst/plan.h"
#include "burst/tensor.h"

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

/// --partials-dtype fp32|bf16: burst, ring — dtype of the dQ / dK, dV partials on the write ring
/// (DistConfig::partials_dtype; docs/strategies.md § bf16 write-ring partials).
inline void add_partials_option(CLI::App* cmd, std::string& partials_dtype) {
  cmd->add_option("--partials-dtype", partials_dtype,
                  "fp32|bf16: burst, ring — the backward's dQ / dK,dV partials on the write ring "
                  "(bf16: half the write bytes, rounded once per hop, summed in fp32)")
      ->capture_default_str();
}

/// The DistConfig::partials_dtype of --partials-dtype. Throws Error(InvalidArgument) for a name
/// other than fp32 / bf16, Error(Unsupported) for bf16 with a strategy other than burst or ring.
inline DType parse_partials_dtype(const std::string& name, StrategyKind strategy) {
  const DType d = parse_dtype(name);
  BURST_CHECK(d == DType::F32 || d == DType::BF16, InvalidArgument, "--partials-dtype '", name,
              "' (valid: fp32, bf16)");
  BURST_CHECK(d == DType::F32 || strategy == StrategyKind::Burst || strategy == StrategyKind::Ring,
              Unsupported, "--partials-dtype bf16 runs with --strategy burst or ring, not ",
              to_string(strategy));
  return d;
}

}  // namespace burst::bench
