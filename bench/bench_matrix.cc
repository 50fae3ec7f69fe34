// `burst bench matrix`: strategies × layouts × the 14 masks × lengths × passes on the ranks of
// MPI_COMM_WORLD, one JSON line per case (bench/harness.h conventions). See bench_matrix.h.
// FLOPs: forward 4·B·H·D·visible_pairs over the whole mask area, backward 2.5× (LongCA-bench);
// gflops_per_rank = flop / seconds / P. Time: per repeat the max over ranks of the pass's wall
// time, then the median of the repeats after `warmup` untimed passes. --dtype bf16|fp16 stores
// q, k, v, dout and the results in 16 bits (inputs rounded once, also for the error check's
// single-process reference); bf16 on an AVX512_BF16 CPU computes on bf16 operands.
#include "bench/bench_matrix.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "bench/cli_options.h"
#include "bench/cluster_spec_io.h"
#include "bench/harness.h"
#include "burst/cost_model.h"
#include "burst/dispatch.h"
#include "burst/error.h"
#include "burst/splitmix64.h"
#include "burst/strategy.h"

namespace burst::bench {
namespace {

struct MatrixOptions {
  std::string strategies = "all", layouts = "default", masks = "all", seqs = "1024,2048", passes = "fwd,bwd",
              cluster, output, dtype = "fp32";
  std::int64_t batch = 1, heads = 8, kv_heads = 0, dim = 64, check_max_seq = 1024;
  int threads = 1, repeats = 3, warmup = 1;
  double memory_limit = 0;
};

struct Case {
  StrategyKind strategy;
  LayoutKind layout;
  MaskType mask;
  std::int64_t S;
  bool backward;
};

std::vector<std::string> split_csv(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

std::vector<LayoutKind> default_layouts(StrategyKind s) {
  switch (s) {
    case StrategyKind::Burst:
    case StrategyKind::Ring: return {LayoutKind::Contiguous, LayoutKind::Zigzag, LayoutKind::Striped};
    case StrategyKind::AllGather: return {LayoutKind::Zigzag};
    case StrategyKind::Usp: return {LayoutKind::Zigzag};
    default: return {LayoutKind::Contiguous};
  }
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  double m = 0;
  for (std::size_t i = 0; i < a.vec().size(); ++i)
    m = std::max(m, std::fabs(static_cast<double>(a.vec()[i]) - static_cast<double>(b.vec()[i])));
  return m;
}

std::string case_key(const Case& c, const MatrixOptions& o, int P, std::int64_t H_kv, DType dtype) {
  std::ostringstream k;
  k << to_string(c.strategy) << "|" << to_string(c.layout) << "|" << to_string(c.mask) << "|" << c.S << "|P"
    << P << "|" << (c.backward ? "bwd" : "fwd") << "|B" << o.batch << "|H" << o.heads << "|Hkv" << H_kv
    << "|D" << o.dim << "|T" << o.threads;
  if (dtype != DType::F32) k << "|" << to_string(dtype);  // fp32 keys unchanged (resumable outputs)
  return k.str();
}

// t's values rounded to dtype and widened back (exact): the inputs every run and reference sees.
void round_in_place(Tensor& t, DType dtype) {
  if (dtype == DType::F32) return;
  Tensor copy = t;
  const StoredTensor s(std::move(copy), dtype);
  convert(s.view, t.view());
}

Tensor widened(const StoredTensor& s) {
  Tensor t(std::vector<std::int64_t>(s.view.shape.begin(), s.view.shape.begin() + s.view.ndim));
  convert(s.view, t.view());
  return t;
}

std::set<std::string> completed_cases(const std::string& path) {
  std::set<std::string> done;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.is_object() && j.contains("case")) done.insert(j["case"].get<std::string>());
  }
  return done;
}

class MatrixRunner {
 public:
  MatrixRunner(const MatrixOptions& o, const Communicator& comm)
      : o_(o),
        comm_(comm),
        P_(comm.size()),
        H_kv_(o.kv_heads > 0 ? o.kv_heads : o.heads),
        dtype_(parse_dtype(o.dtype)) {
    BURST_CHECK(dtype_ != DType::F64, InvalidArgument, "bench matrix: --dtype must be fp32, bf16 or fp16");
    if (!o.cluster.empty()) {
      cluster_ = load_cluster(o.cluster);
      have_cluster_ = true;
    } else {  // memory estimates only: rates are placeholders
      cluster_.matmul_flops = cluster_.memory_bandwidth = cluster_.intra_bandwidth = 1;
    }
    cluster_.nodes = 1;
    cluster_.devices_per_node = P_;
    memory_limit_ = o.memory_limit > 0 ? o.memory_limit
                                       : 0.7 * static_cast<double>(sysconf(_SC_PHYS_PAGES)) *
                                             static_cast<double>(sysconf(_SC_PAGE_SIZE)) / P_;
    if (!o.output.empty()) done_ = completed_cases(o.output);
  }

  void run(const std::vector<Case>& cases) {
    const auto t0 = std::chrono::steady_clock::now();
    std::size_t index = 0;
    for (const Case& c : cases) {
      ++index;
      const std::string key = case_key(c, o_, P_, H_kv_, dtype_);
      if (done_.count(key)) continue;
      nlohmann::json j = run_case(c, key);
      if (comm_.rank() == 0) {
        print_json_line(j);
        if (!o_.output.empty()) std::ofstream(o_.output, std::ios::app) << j.dump() << "\n";
        const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const double eta = elapsed / static_cast<double>(index) * static_cast<double>(cases.size() - index);
        std::fprintf(stderr, "[matrix %zu/%zu] %s: %s (elapsed %.0f s, ETA %.0f s)\n", index, cases.size(),
                     key.c_str(),
                     j["status"] == "ok" ? (std::to_string(j["seconds"].get<double>() * 1e3) + " ms").c_str()
                                         : ("skipped: " + j["reason"].get<std::string>()).c_str(),
                     elapsed, eta);
        std::fflush(stderr);
      }
    }
  }

 private:
  nlohmann::json base_record(const Case& c, const std::string& key) const {
    const bool amx = resolve_isa(Isa::Auto, DType::BF16, KernelPass::Forward) == Isa::Amx;
    const char* arithmetic = !bf16_arithmetic(c.strategy) ? "fp32" : amx ? "bf16-amx" : "bf16-dot";
    return {{"bench", "matrix"},
            {"case", key},
            {"strategy", to_string(c.strategy)},
            {"layout", to_string(c.layout)},
            {"mask", to_string(c.mask)},
            {"S_global", c.S},
            {"P", P_},
            {"pass", c.backward ? "bwd" : "fwd"},
            {"B", o_.batch},
            {"H", o_.heads},
            {"H_kv", H_kv_},
            {"D", o_.dim},
            {"dtype", to_string(dtype_)},
            {"arithmetic", arithmetic},
            {"threads", o_.threads},
            {"repeats", o_.repeats},
            {"warmup", o_.warmup},
            {"load_1m", load_average_1m()}};
  }

  // burst, ring and allgather move and compute on the 16-bit tensors; the other strategies get
  // fp32 stand-ins from the façade (docs/strategies.md § Bytes per dtype).
  bool keeps_16bit(StrategyKind s) const {
    return dtype_ != DType::F32 &&
           (s == StrategyKind::Burst || s == StrategyKind::Ring || s == StrategyKind::AllGather);
  }
  // bf16 tensors reaching the kernels on a path with bf16 operands (AMX, or vdpbf16ps where the
  // dispatch rule keeps it: burst/dispatch.h; docs/design.md).
  bool bf16_arithmetic(StrategyKind s) const {
    return keeps_16bit(s) && bf16_operands(resolve_isa(Isa::Auto, dtype_, KernelPass::Forward), dtype_);
  }

  Estimate model(const Case& c, const Mask& mask) const {
    Workload w;
    w.B = o_.batch;
    w.S_global = c.S;
    w.H = o_.heads;
    w.H_kv = H_kv_;
    w.D = o_.dim;
    w.mask = mask;
    w.pass = c.backward ? PassKind::Backward : PassKind::Forward;
    w.bytes_per_element = keeps_16bit(c.strategy) ? 2 : 4;
    w.bf16_arithmetic = bf16_arithmetic(c.strategy);
    return estimate(cluster_, w, Candidate{c.strategy, c.layout, 0, BackwardSide::Auto, true});
  }

  nlohmann::json run_case(const Case& c, const std::string& key) {
    nlohmann::json j = base_record(c, key);
    const Mask mask = make_benchmark_mask(c.mask, c.S);
    const Estimate predicted = model(c, mask);
    // Local tensors + the global copies used for sharding and the error check.
    const double global_bytes = 8.0 * static_cast<double>(o_.batch * c.S * o_.heads * o_.dim) * 4;
    if (predicted.feasible && static_cast<double>(predicted.memory_bytes) + global_bytes > memory_limit_) {
      j["status"] = "skipped";
      j["reason"] = "needs ~" +
                    std::to_string((static_cast<double>(predicted.memory_bytes) + global_bytes) / 1e9) +
                    " GB per rank > limit " + std::to_string(memory_limit_ / 1e9) + " GB";
      return j;
    }
    DistConfig cfg;
    cfg.strategy = c.strategy;
    cfg.layout = c.layout;
    cfg.num_threads = o_.threads;
    ProblemShape shape{o_.batch, c.S, o_.heads, H_kv_, o_.dim};
    shape.dtype = dtype_;
    std::unique_ptr<DistAttention> da;
    try {
      da = std::make_unique<DistAttention>(comm_, cfg, shape, mask);
    } catch (const Error& e) {  // same verdict on every rank (strategy.h)
      if (e.kind() != ErrorKind::InvalidArgument && e.kind() != ErrorKind::Unsupported) throw;
      j["status"] = "skipped";
      j["reason"] = e.message();
      return j;
    }
    const SequenceLayout& layout = da->plan().layout();
    const int r = comm_.rank();
    const std::int64_t S_local = da->local_length();
    Tensor gq({o_.batch, c.S, o_.heads, o_.dim}), gk({o_.batch, c.S, H_kv_, o_.dim}), gv(gk.shape()),
        gdo(gq.shape());
    fill_uniform(gq, 11);
    fill_uniform(gk, 12);
    fill_uniform(gv, 13);
    fill_uniform(gdo, 14);
    for (Tensor* t : {&gq, &gk, &gv, &gdo}) round_in_place(*t, dtype_);
    auto local = [&](const Tensor& global, std::int64_t heads) {
      Tensor t({o_.batch, S_local, heads, o_.dim});
      if (global.numel() > 0) shard(layout, r, global.view(), t.view());
      return StoredTensor(std::move(t), dtype_);
    };
    const StoredTensor q = local(gq, o_.heads), k = local(gk, H_kv_), v = local(gv, H_kv_),
                       dout = local(gdo, o_.heads);
    const StoredTensor out = local(Tensor(), o_.heads), dq = local(Tensor(), o_.heads),
                       dk = local(Tensor(), H_kv_), dv = local(Tensor(), H_kv_);
    Tensor lse({o_.batch, o_.heads, S_local});
    auto fwd = [&] { da->forward(q.view, k.view, v.view, out.view, lse.view()); };
    auto bwd = [&] {
      da->backward(dout.view, q.view, k.view, v.view, out.view, lse.view(), dq.view, dk.view, dv.view);
    };
    fwd();
    if (c.S <= o_.check_max_seq)
      j["max_error"] = check_error(c, mask, layout, gq, gk, gv, gdo, out, dq, dk, dv, bwd);
    // ulysses / usp: each backward consumes the context its forward saved (DeepSpeed's autograd
    // context), so a timed backward follows an untimed forward, as in training.
    const bool saves = cfg.strategy == StrategyKind::Ulysses || cfg.strategy == StrategyKind::Usp;
    // The forward above is the first untimed forward: it counts toward the forward's warm-up (at
    // S = 16K and more one pass is seconds).
    const Timing t = c.backward ? time_pass(bwd, o_.warmup, saves ? std::function<void()>(fwd) : nullptr)
                                : time_pass(fwd, std::max(0, o_.warmup - 1));
    const DistStats& st = da->last_stats();
    std::vector<float> compute(static_cast<std::size_t>(P_));
    const float mine = static_cast<float>(st.compute_seconds);
    comm_.all_gather(std::as_bytes(std::span(&mine, 1)), std::as_writable_bytes(std::span(compute)));
    double cmax = 0, csum = 0;
    for (float x : compute) {
      cmax = std::max(cmax, static_cast<double>(x));
      csum += x;
    }
    const double e = dtype_ == DType::F32 ? 4.0 : 2.0;
    const double local_bytes = e * static_cast<double>(q.view.numel() * (c.backward ? 4 : 2) +
                                                       k.view.numel() * (c.backward ? 4 : 2)) +
                               4.0 * static_cast<double>(lse.numel());
    const double pairs = static_cast<double>(ResolvedMask(mask, c.S, c.S).visible_pairs());
    const double flop =
        c.backward ? attention_backward_flop(o_.batch, o_.heads, o_.dim, static_cast<std::int64_t>(pairs))
                   : attention_forward_flop(o_.batch, o_.heads, o_.dim, static_cast<std::int64_t>(pairs));
    j["status"] = "ok";
    add_timing(j, t, flop);
    j["flop_formula"] = c.backward ? kAttentionBackwardFlopFormula : kAttentionForwardFlopFormula;
    j["visible_pairs"] = static_cast<std::int64_t>(pairs);
    j["gflops_per_rank"] = flop / t.median / P_ / 1e9;
    j["bytes_sent_per_rank"] = comm_.all_reduce_max(st.bytes_sent);
    j["exposed_comm_seconds"] = comm_.all_reduce_max(st.exposed_comm_seconds);
    j["compute_seconds_max"] = cmax;
    j["balance"] = csum > 0 ? cmax / (csum / P_) : 1.0;
    j["peak_memory_bytes"] =
        static_cast<std::int64_t>(local_bytes) + comm_.all_reduce_max(st.peak_buffer_bytes);
    if (!st.backward_side.empty()) j["backward_side"] = st.backward_side;
    if (have_cluster_ && predicted.feasible) {
      j["predicted_seconds"] = predicted.seconds;
      j["predicted_cluster"] = cluster_.name;
    }
    j["predicted_bytes_per_rank"] = predicted.bytes_per_device;
    return j;
  }

  /// Median of o_.repeats timed calls of fn (max over ranks) after `warmup` untimed ones; `before`,
  /// when set, runs untimed ahead of each call.
  Timing time_pass(const std::function<void()>& fn, int warmup,
                   const std::function<void()>& before = nullptr) const {
    for (int i = 0; i < warmup; ++i) {
      if (before) before();
      fn();
    }
    std::vector<double> samples;
    for (int i = 0; i < o_.repeats; ++i) {
      if (before) before();
      comm_.barrier();
      const auto t0 = std::chrono::steady_clock::now();
      fn();
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      samples.push_back(comm_.all_reduce_max(s));
    }
    return summarize(samples);
  }

  /// Max |distributed − single-process| over out (forward) or dq, dk, dv (backward), all ranks.
  double check_error(const Case& c, const Mask& mask, const SequenceLayout& layout, const Tensor& gq,
                     const Tensor& gk, const Tensor& gv, const Tensor& gdo, const StoredTensor& out,
                     const StoredTensor& dq, const StoredTensor& dk, const StoredTensor& dv,
                     const std::function<void()>& bwd) const {
    AttentionParams p;
    p.mask = mask;
    p.num_threads = o_.threads;
    const AttentionOutput ref = attention_forward(gq.view(), gk.view(), gv.view(), p);
    const int r = comm_.rank();
    auto local_of = [&](const Tensor& global, const Tensor& like) {
      Tensor t(like.shape());
      shard(layout, r, global.view(), t.view());
      return t;
    };
    const Tensor out32 = widened(out);
    double err = max_abs_diff(local_of(ref.out, out32), out32);
    if (c.backward) {
      bwd();
      const AttentionGrads g =
          attention_backward(gdo.view(), gq.view(), gk.view(), gv.view(), ref.out.view(), ref.lse.view(), p);
      const Tensor dq32 = widened(dq), dk32 = widened(dk), dv32 = widened(dv);
      err = std::max({err, max_abs_diff(local_of(g.dq, dq32), dq32), max_abs_diff(local_of(g.dk, dk32), dk32),
                      max_abs_diff(local_of(g.dv, dv32), dv32)});
    }
    return comm_.all_reduce_max(err);
  }

  MatrixOptions o_;
  const Communicator& comm_;
  int P_;
  std::int64_t H_kv_;
  DType dtype_;
  ClusterSpec cluster_;
  bool have_cluster_ = false;
  double memory_limit_ = 0;
  std::set<std::string> done_;
};

void run_matrix(const MatrixOptions& o) {
  const Communicator comm = Communicator::world();
  std::vector<StrategyKind> strategies;
  if (o.strategies == "all")
    strategies = all_strategies();
  else
    for (const auto& s : split_csv(o.strategies)) strategies.push_back(strategy_from_string(s));
  std::vector<MaskType> masks;
  if (o.masks == "all")
    masks = all_mask_types();
  else
    for (const auto& m : split_csv(o.masks)) masks.push_back(mask_type_from_string(m));
  std::vector<std::int64_t> seqs;
  for (const auto& s : split_csv(o.seqs)) seqs.push_back(std::stoll(s));
  std::vector<bool> passes;
  for (const auto& p : split_csv(o.passes)) {
    BURST_CHECK(p == "fwd" || p == "bwd", InvalidArgument, "bench matrix: --passes item '", p,
                "' (fwd or bwd)");
    passes.push_back(p == "bwd");
  }
  std::vector<Case> cases;
  for (StrategyKind s : strategies) {
    std::vector<LayoutKind> layouts;
    if (o.layouts == "default")
      layouts = default_layouts(s);
    else
      for (const auto& l : split_csv(o.layouts)) layouts.push_back(layout_from_string(l));
    for (LayoutKind l : layouts)
      for (MaskType m : masks)
        for (std::int64_t S : seqs)
          for (bool b : passes) cases.push_back({s, l, m, S, b});
  }
  MatrixRunner(o, comm).run(cases);
}

}  // namespace

void add_matrix_bench(CLI::App& bench) {
  auto o = std::make_shared<MatrixOptions>();
  auto* cmd =
      bench.add_subcommand("matrix", "strategies x layouts x masks x lengths x passes (under mpirun)");
  cmd->add_option("--strategies", o->strategies, "comma list or 'all'")->capture_default_str();
  cmd->add_option("--layouts", o->layouts, "comma list or 'default' (per strategy)")->capture_default_str();
  cmd->add_option("--masks", o->masks, "comma list of benchmark masks or 'all'")->capture_default_str();
  cmd->add_option("--seqs", o->seqs, "comma list of S_global")->capture_default_str();
  cmd->add_option("--passes", o->passes, "fwd,bwd")->capture_default_str();
  add_shape_options(cmd, o->batch, o->heads, o->kv_heads, o->dim);
  add_timing_options(cmd, o->threads, o->repeats, o->warmup);
  add_dtype_option(cmd, o->dtype, "fp32|bf16|fp16", "storage of q, k, v, dout and results (lse fp32)");
  cmd->add_option("--check-max-seq", o->check_max_seq, "check errors for S <= this")->capture_default_str();
  cmd->add_option("--cluster", o->cluster, "cluster spec for predicted_seconds (e.g. a calibrated one)");
  cmd->add_option("--memory-limit", o->memory_limit, "bytes per rank (0: 70% of RAM / P)");
  cmd->add_option("--output,-o", o->output, "append JSON lines here; cases already present are skipped");
  cmd->callback([o] { run_matrix(*o); });
}

}  // namespace burst::bench
