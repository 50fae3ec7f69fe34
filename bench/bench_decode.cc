// `burst bench decode` (bench_decode.h): DistKVCache::decode at several context lengths, timed
// with the shared harness's summary (median over repeats of the max over ranks).
#include "bench/bench_decode.h"

#include <CLI/CLI.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "bench/cli_options.h"
#include "bench/harness.h"
#include "burst/comm.h"
#include "burst/error.h"
#include "burst/kv_cache.h"
#include "burst/splitmix64.h"
#include "burst/tensor.h"

namespace burst::bench {
namespace {

struct DecodeOptions {
  std::vector<std::int64_t> contexts{65536, 262144, 1048576};
  std::int64_t batch = 1, heads = 8, kv_heads = 2, dim = 64, new_tokens = 1, chunk = 1024;
  int threads = 1, repeats = 21, warmup = 3;
  bool no_dram_probe = false;
  std::string dtype = "fp32";
};

void fill_random(std::vector<float>& x, std::uint64_t seed) {
  SplitMix64 rng(0x9e3779b97f4a7c15ull * (seed + 1));
  for (float& e : x) e = static_cast<float>(2 * rng.uniform() - 1);
}

// Read bandwidth of this rank while every rank reads at once: run_memory_read_probe over a buffer
// far larger than the last-level cache (the same streaming pattern as the decode kernels' loads).
double dram_read_gbs(const Communicator& world, const std::vector<float>& buf) {
  std::vector<double> t;
  double bytes = 0;
  for (int i = 0; i < 5; ++i) {
    world.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    bytes = run_memory_read_probe(Isa::Auto, buf.data(), static_cast<std::int64_t>(buf.size()));
    t.push_back(world.all_reduce_max(seconds_since(t0)));
  }
  return bytes / summarize(t).median / 1e9;
}

void run_decode(const DecodeOptions& o) {
  BURST_CHECK(o.repeats >= 1 && o.warmup >= 0 && o.new_tokens >= 1 && o.batch >= 1, InvalidArgument,
              "bench decode: --repeats ", o.repeats, " --warmup ", o.warmup, " --new-tokens ", o.new_tokens,
              " --batch ", o.batch, " must be positive");
  const Communicator world = Communicator::world();
  const int P = world.size(), rank = world.rank();
  const std::int64_t H_kv = o.kv_heads > 0 ? o.kv_heads : o.heads, S_q = o.new_tokens, B = o.batch;
  const DType dtype = parse_dtype(o.dtype);
  BURST_CHECK(dtype == DType::F32 || dtype == DType::BF16, InvalidArgument, "bench decode: --dtype ", o.dtype,
              " must be fp32 or bf16");
  std::vector<float> probe;
  if (!o.no_dram_probe) probe.assign(std::size_t{128} << 20, 1.0f);  // 512 MiB
  std::vector<std::int64_t> ids;
  for (std::int64_t b = 0; b < B; ++b) ids.push_back(b);
  for (const std::int64_t context : o.contexts) {
    BURST_CHECK(context >= P, InvalidArgument, "bench decode: --context ", context, " < ranks ", P);
    KVCacheConfig cfg;
    cfg.H = o.heads;
    cfg.H_kv = H_kv;
    cfg.D = o.dim;
    cfg.chunk_tokens = o.chunk;
    cfg.num_threads = o.threads;
    cfg.dtype = dtype;
    cfg.capacity_per_rank = B * (context / P + 1 + S_q * (o.warmup + o.repeats + 1));
    DistKVCache cache(world, cfg);
    {  // prefill: the contiguous layout, rank r holds [r·S/P, (r+1)·S/P)
      const std::int64_t lo = context * rank / P, hi = context * (rank + 1) / P;
      std::vector<std::int64_t> pos;
      for (std::int64_t t = lo; t < hi; ++t) pos.push_back(t);
      std::vector<float> k(static_cast<std::size_t>(B * (hi - lo) * H_kv * o.dim)), v(k.size());
      fill_random(k, 2 * static_cast<std::uint64_t>(rank));
      fill_random(v, 2 * static_cast<std::uint64_t>(rank) + 1);
      const TensorView kv = make_view(k.data(), {B, hi - lo, H_kv, o.dim});
      const TensorView vv = make_view(v.data(), {B, hi - lo, H_kv, o.dim});
      cache.prefill(ids, kv, vv, pos, context);
    }
    std::vector<float> q(static_cast<std::size_t>(B * S_q * o.heads * o.dim)),
        kn(static_cast<std::size_t>(B * S_q * H_kv * o.dim)), vn(kn.size()), out(q.size()),
        lse(static_cast<std::size_t>(B * o.heads * S_q));
    fill_random(q, 100);
    fill_random(kn, 101);
    fill_random(vn, 102);
    const TensorView qv = make_view(q.data(), {B, S_q, o.heads, o.dim}),
                     ov = make_view(out.data(), {B, S_q, o.heads, o.dim});
    const TensorView knv = make_view(kn.data(), {B, S_q, H_kv, o.dim}),
                     vnv = make_view(vn.data(), {B, S_q, H_kv, o.dim});
    const TensorView lv = make_view(lse.data(), {B, o.heads, S_q});
    std::vector<double> step, local, merge;
    std::int64_t bytes = 0, read = 0;
    for (int i = 0; i < o.warmup + o.repeats; ++i) {
      world.barrier();
      const auto t0 = std::chrono::steady_clock::now();
      cache.decode(ids, knv, vnv, qv, ov, lv);  // append + decode under one agreement
      const double s = seconds_since(t0);
      const DecodeStats& st = cache.last_stats();
      const double s_max = world.all_reduce_max(s), local_max = world.all_reduce_max(st.local_seconds);
      const double merge_max = world.all_reduce_max(st.merge_seconds);
      bytes = world.all_reduce_max(st.bytes_sent);
      read = world.all_reduce_max(st.kv_bytes_read);
      if (i < o.warmup) continue;
      step.push_back(s_max);
      local.push_back(local_max);
      merge.push_back(merge_max);
    }
    const std::int64_t kv_bytes = world.all_reduce_max(cache.local_tokens() * H_kv * o.dim * 2 *
                                                       static_cast<std::int64_t>(dtype_size(dtype)));
    const std::int64_t allocated = world.all_reduce_max(cache.local_bytes());
    const double dram = o.no_dram_probe ? 0.0 : dram_read_gbs(world, probe);
    if (rank != 0) continue;
    const Timing t = summarize(step), tl = summarize(local), tm = summarize(merge);
    const double per_token = t.median / static_cast<double>(S_q);
    const double stream = static_cast<double>(read) / tl.median / 1e9;
    nlohmann::json j = {{"bench", "decode"},
                        {"context", context},
                        {"ranks", P},
                        {"threads", o.threads},
                        {"B", B},
                        {"H", o.heads},
                        {"H_kv", H_kv},
                        {"D", o.dim},
                        {"new_tokens", S_q},
                        {"chunk_tokens", o.chunk},
                        {"dtype", to_string(dtype)},
                        {"warmup", o.warmup},
                        {"repeats", o.repeats},
                        {"seconds_per_token", per_token},
                        {"seconds_per_token_min", t.min / static_cast<double>(S_q)},
                        {"seconds_per_token_max", t.max / static_cast<double>(S_q)},
                        {"local_seconds", tl.median},
                        {"merge_seconds", tm.median},
                        {"tokens_per_second", 1.0 / per_token},
                        {"bytes_per_token", static_cast<double>(bytes) / static_cast<double>(S_q)},
                        {"bytes_formula", "B*S_q*H*(D+1)*4*(P-1) per step"},
                        {"kv_bytes_per_rank", kv_bytes},
                        {"kv_allocated_bytes_per_rank", allocated},
                        {"kv_bytes_read_per_token", static_cast<double>(read) / static_cast<double>(S_q)},
                        {"kv_stream_gbs", stream},
                        {"dram_read_gbs", dram},
                        {"stream_fraction", dram > 0 ? stream / dram : 0.0},
                        {"flop_formula", "4*B*S_q*H*D*context"},
                        {"gflops", 4.0 * static_cast<double>(B * S_q * o.heads * o.dim) *
                                       static_cast<double>(context) / t.median / 1e9},
                        {"load_1m", load_average_1m()}};
    print_json_line(j);
  }
}

}  // namespace

void add_decode_bench(CLI::App& bench) {
  auto o = std::make_shared<DecodeOptions>();
  auto* cmd = bench.add_subcommand("decode", "distributed decode over a sharded KV cache (under mpirun)");
  cmd->add_option("--context", o->contexts, "context lengths (tokens per sequence), comma-separated")
      ->delimiter(',')
      ->capture_default_str();
  add_shape_options(cmd, o->batch, o->heads, o->kv_heads, o->dim);
  cmd->add_option("--new-tokens", o->new_tokens, "query rows per step (S_q)")->capture_default_str();
  cmd->add_option("--chunk", o->chunk, "KV-cache chunk (split) tokens, a multiple of 64")
      ->capture_default_str();
  add_timing_options(cmd, o->threads, o->repeats, o->warmup);
  cmd->add_flag("--no-dram-probe", o->no_dram_probe, "skip the 512 MiB read-bandwidth probe");
  cmd->add_option("--dtype", o->dtype, "K/V cache storage: fp32 or bf16")->capture_default_str();
  cmd->callback([o] { run_decode(*o); });
}

}  // namespace burst::bench
