// `burst calibrate`, the attention kernel's side (cmd_calibrate_internal.h): the Tiled kernel
// timed on every rank at once (ranks contending as in `burst bench`; with shared cores, batches
// of calls or one rank per compute slot), the rate and per-call overhead fitted over the
// calibration lengths, the per-element masking cost of Partial tiles as a line in the head dim,
// and the bf16-operand speed-up. cmd_calibrate.cc assembles the spec from them.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "bench/harness.h"
#include "burst/attention.h"
#include "burst/comm.h"
#include "burst/cost_model.h"
#include "burst/mask.h"
#include "burst/plan.h"
#include "burst/splitmix64.h"
#include "cmd_calibrate_internal.h"

namespace burst::cli {

namespace {

void fill_uniform(std::vector<float>& x, std::uint64_t seed) {
  SplitMix64 rng(seed * 0x9e3779b97f4a7c15ull + 7);
  for (float& v : x) v = static_cast<float>(2 * rng.uniform() - 1);
}

/// Seconds of back-to-back kernel calls per timed repeat when ranks share cores (time_kernel).
constexpr double kSharedCoresBatchSeconds = 0.05;

struct KernelPoint {
  double flops = 0, seconds = 0;
};

/// Positions of the masking probe: queries on even, keys on odd positions of a causal mask over
/// 2S, so the hulls of almost every tile overlap the diagonal (Partial, masked per element).
struct Interleaved {
  std::vector<std::int64_t> q, k;
  explicit Interleaved(std::int64_t S) : q(static_cast<std::size_t>(S)), k(static_cast<std::size_t>(S)) {
    for (std::int64_t i = 0; i < S; ++i) {
      q[static_cast<std::size_t>(i)] = 2 * i;
      k[static_cast<std::size_t>(i)] = 2 * i + 1;
    }
  }
};

/// A barrier whose waiting ranks sleep between polls (0.1 ms) instead of spinning in MPI, so that
/// ranks not being timed leave the cores to those that are. Collective.
void sleeping_barrier(const Communicator& comm) {
  auto sleep_until_done = [](Request r) {
    while (!r.test()) std::this_thread::sleep_for(std::chrono::microseconds(100));
  };
  if (comm.rank() == 0) {
    for (int r = 1; r < comm.size(); ++r) sleep_until_done(comm.irecv(ByteBuffer(1), r, 11));
    for (int r = 1; r < comm.size(); ++r) sleep_until_done(comm.isend(ByteBuffer(1), r, 12));
  } else {
    sleep_until_done(comm.isend(ByteBuffer(1), 0, 11));
    sleep_until_done(comm.irecv(ByteBuffer(1), 0, 12));
  }
}

}  // namespace

double collective_seconds(const Communicator& comm, const std::function<void()>& collective, int rounds,
                          const std::function<void()>& barrier, bool counts) {
  std::vector<double> samples;
  for (int i = 0; i < rounds + 1; ++i) {
    if (barrier)
      barrier();
    else
      comm.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    collective();
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double slowest = comm.all_reduce_max(counts ? t : 0.0);
    if (i >= 1) samples.push_back(slowest);
  }
  return bench::summarize(samples).median;
}

namespace {

/// Median over repeats of the seconds all ranks take to run the forward or backward kernel at
/// length S together (between two barriers): full mask, or
/// (probe != nullptr) the causal masking probe on its interleaved positions; operands and results
/// stored as `dtype` (BF16 on an AVX512_BF16 CPU: the bf16-arithmetic path).
KernelPoint time_kernel(const Communicator& comm, const CalibrateOptions& o, std::int64_t S, bool backward,
                        const Interleaved* probe = nullptr, DType dtype = DType::F32) {
  const std::int64_t H = o.heads, D = o.head_dim;
  const std::vector<std::int64_t> shape{1, S, H, D};
  auto seeded = [&shape](std::uint64_t seed) {
    Tensor t(shape);
    fill_uniform(t.vec(), seed);
    return t;
  };
  const bench::StoredTensor q(seeded(1), dtype), k(seeded(2), dtype), v(seeded(3), dtype),
      dout(seeded(4), dtype);
  const bench::StoredTensor out(Tensor(shape), dtype), dq(Tensor(shape), dtype), dk(Tensor(shape), dtype),
      dv(Tensor(shape), dtype);
  Tensor lse({1, H, S});
  AttentionParams p;
  p.num_threads = o.threads;
  if (probe != nullptr) {
    p.mask = Mask::causal_mask();
    p.q_positions = probe->q.data();
    p.kv_positions = probe->k.data();
    p.seq_q_global = p.seq_kv_global = 2 * S;
  }
  auto run = [&] {
    if (backward)
      attention_backward(dout.view, q.view, k.view, v.view, out.view, lse.view(), dq.view, dk.view, dv.view,
                         p);
    else
      attention_forward(q.view, k.view, v.view, out.view, lse.view(), p);
  };
  // Every repeat runs on all ranks at once, between two barriers, and counts from a rank's
  // leaving the first to the last rank's reaching the second (max over ranks): the ranks share
  // the cores as they do inside a distributed pass. Timing each rank's kernel alone misses
  // that: with more ranks than cores a rank the scheduler holds back starts its clock late, so
  // every rank measures the solo time while the ranks in fact run in turn (and ranks timing
  // their repeats on their own drift apart and sometimes run one to a core).
  // Ranks sharing cores: a repeat also pays for the scheduler letting the last rank back onto a
  // core (about a time slice), a fixed cost per repeat that the fit would charge to every kernel
  // call, where a distributed pass pays it once for its many calls. So run back-to-back calls
  // filling kSharedCoresBatchSeconds between the barriers and count per call.
  // one_per_slot: the same between sleeping barriers, only the ranks that compute timed (the
  // others sleep, so each computing rank has a core to itself).
  auto barrier = [&] {
    if (o.one_per_slot)
      sleeping_barrier(comm);
    else
      comm.barrier();
  };
  auto per_call = [&](int calls, int rounds) {  // max over ranks: the same on every rank
    return collective_seconds(
               comm,
               [&] {
                 if (o.computes)
                   for (int i = 0; i < calls; ++i) run();
                 barrier();
               },
               rounds, barrier, o.computes) /
           calls;
  };
  int calls = 1;
  if (o.shared_cores)
    calls = std::max(1, static_cast<int>(std::ceil(kSharedCoresBatchSeconds / per_call(1, 1))));
  const double seconds = per_call(calls, o.repeats);
  const double pairs = static_cast<double>(S) * static_cast<double>(S);
  return {attention_flops(pairs, 1, H, D, backward), seconds};
}

/// Seconds per query row of a Partial tile at head dim `D` (ClusterSpec::partial_row_cost): the
/// masking probe's time minus that of the full-mask kernel scaled to the area the probe
/// computes, over its Partial rows — area and rows counted with the spec's tiles as the model
/// counts them. Probe and full run alternate over 3 rounds and the median round counts, so that
/// a change of the machine's speed between them does not masquerade as masking cost.
double partial_row_seconds(const Communicator& comm, CalibrateOptions o, const ClusterSpec& c, std::int64_t S,
                           bool backward, std::int64_t D) {
  o.head_dim = D;
  const Interleaved probe(S);
  SequenceLayout layout;
  layout.P = 2;
  layout.S_global = 2 * S;
  layout.positions = {probe.q, probe.k};
  std::vector<double> rows;
  const auto [tile_q, tile_kv] = c.kernel_tile(backward);
  const std::vector<double> area = visible_pair_matrix(ResolvedMask(Mask::causal_mask(), 2 * S, 2 * S),
                                                       layout, 1.0, tile_q, tile_kv, &rows);
  if (rows[1] <= 0) return 0.0;
  const double over = c.call_overhead(backward);
  const double share = area[1] / (static_cast<double>(S) * static_cast<double>(S));
  std::vector<double> rounds;
  for (int r = 0; r < 3; ++r) {
    const double t_full = time_kernel(comm, o, S, backward).seconds;
    const double t_probe = time_kernel(comm, o, S, backward, &probe).seconds;
    rounds.push_back((t_probe - over - (t_full - over) * share) / (rows[1] * static_cast<double>(o.heads)));
  }
  std::sort(rounds.begin(), rounds.end());
  return std::max(0.0, rounds[1]);
}

}  // namespace

RowCost partial_row_line(const Communicator& comm, const CalibrateOptions& o, const ClusterSpec& c,
                         std::int64_t S, bool backward) {
  RowCost f;
  for (std::int64_t D :
       {o.head_dim * 5 / 8, o.head_dim * 7 / 8, o.head_dim, o.head_dim * 11 / 8, o.head_dim * 7 / 4}) {
    D = std::max<std::int64_t>(8, (D + 4) / 8 * 8);
    f.points.emplace_back(D, partial_row_seconds(comm, o, c, S, backward, D));
  }
  if (!backward) {
    std::vector<double> t;
    for (const auto& point : f.points) t.push_back(point.second);
    f.base = bench::summarize(t).median;
    return f;
  }
  double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& [D, t] : f.points) {
    const double x = static_cast<double>(D);
    n += 1;
    sx += x;
    sy += t;
    sxx += x * x;
    sxy += x * t;
  }
  const double det = n * sxx - sx * sx;
  f.per_dim = det > 0 ? (n * sxy - sx * sy) / det : 0.0;
  f.base = (sy - f.per_dim * sx) / n;
  if (f.per_dim < 0) {
    f.per_dim = 0;
    f.base = sy / n;
  } else if (f.base < 0) {
    f.base = 0;
    f.per_dim = sxy / sxx;
  }
  return f;
}

std::string row_cost_text(const RowCost& f) {
  std::string out;
  for (const auto& [D, t] : f.points)
    out += (out.empty() ? "" : ", ") + std::to_string(t * 1e9) + " at D=" + std::to_string(D);
  return out + " -> " + std::to_string(f.base * 1e9) + " + " + std::to_string(f.per_dim * 1e9) + " * D";
}

KernelFit fit_lengths(const Communicator& comm, const CalibrateOptions& o, bool backward) {
  std::vector<std::pair<double, double>> points;
  for (std::int64_t S : o.seqs) {
    const KernelPoint k = time_kernel(comm, o, S, backward);
    points.emplace_back(k.flops, k.seconds);
  }
  return fit_kernel_time(points);
}

double bf16_speedup(const Communicator& comm, const CalibrateOptions& o, bool backward) {
  std::vector<double> ratios;
  for (std::int64_t S : o.seqs) {
    const double t32 = time_kernel(comm, o, S, backward).seconds;
    const double t16 = time_kernel(comm, o, S, backward, nullptr, DType::BF16).seconds;
    ratios.push_back(t32 / t16);
  }
  return bench::summarize(ratios).median;
}

}  // namespace burst::cli
