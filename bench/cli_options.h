// bench/cli_options.h — command-line options shared by the benchmarks, `burst plan` and `burst
// simulate`: the attention shape, the timing loop, the storage dtype and usp's options,
// registered in one place so that names, help texts and semantics agree across commands (each
// command keeps its own defaults in its options struct).
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

/// --dtype: the storage dtype of q, k, v and dout, in parse_dtype's spellings (fp32, bf16, fp16,
/// ...); `choices` is the help's list (e.g. "fp32|bf16|fp16") and `what` what the dtype sets in
/// this command. fp64 and unknown names are rejected when the command line is parsed.
inline void add_dtype_option(CLI::App* cmd, std::string& dtype, const std::string& choices,
                             const std::string& what) {
  cmd->add_option("--dtype", dtype, choices + ": " + what)
      ->check(CLI::Validator(
          [](std::string& s) -> std::string {
            try {
              return parse_dtype(s) == DType::F64 ? "fp64 is not computed: fp32, bf16 or fp16" : "";
            } catch (const Error& e) { return e.message(); }
          },
          "DTYPE"))
      ->capture_default_str();
}

/// --ulysses-degree u (usp; the plan and cost model of usp): 0 → the largest divisor of P that
/// divides H_kv.
inline void add_ulysses_degree_option(CLI::App* cmd, int& degree) {
  cmd->add_option("--ulysses-degree", degree, "usp: Ulysses degree u (0: largest divisor of P dividing H_kv)")
      ->capture_default_str();
}

/// --usp-ring ring|burst: usp's ring across the Ulysses groups (burst: BurstEngine's hybrid, the
/// query-side backward on the double ring). Checked when parsed.
inline void add_usp_ring_option(CLI::App* cmd, std::string& ring) {
  cmd->add_option("--usp-ring", ring,
                  "usp: ring across the Ulysses groups, ring|burst (burst: BurstEngine's hybrid)")
      ->check(CLI::IsMember({"ring", "burst"}))
      ->capture_default_str();
}

}  // namespace burst::bench
