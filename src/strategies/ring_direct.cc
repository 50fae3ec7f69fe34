// The mask-aware schedule of the ring family (RingExecutor::run_direct, ring_skeleton.h): the
// steps of the (double) ring, but only the payloads a rank's mask needs, sent by their owners.
// Source: MagiAttention's zero-redundant communication (docs/strategies.md § Mask-aware rings).
#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <string>
#include <utility>

#include "burst/error.h"
#include "plan_ring.h"
#include "strategies/ring_skeleton.h"

namespace burst::strategies {

namespace {

constexpr int kTagDirect = 3, kTagDirectHome = 4;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

std::vector<float> RingExecutor::run_direct(std::vector<float> own_read, std::int64_t write_floats,
                                            const std::vector<std::vector<char>>& need, const StepFn& compute,
                                            RingRunStats& stats, bool split_own) const {
  const int P = P_, g = rank_;
  const auto R = static_cast<std::int64_t>(own_read.size());
  const std::int64_t W = write_floats;
  BURST_CHECK(static_cast<int>(need.size()) == P, Internal, "run_direct: need has ", need.size(),
              " rows, P=", P);
  BufferPool& pool = pool_;
  pool.begin_pass(R);
  const auto needs = [&](int reader, int owner) {
    return need[static_cast<std::size_t>(reader)][static_cast<std::size_t>(owner)] != 0;
  };
  // src[t]: whose block I hold at step t; dest[t]: who holds mine (each pair meets once, so one
  // tag per channel suffices).
  std::vector<int> src(static_cast<std::size_t>(P)), dest(static_cast<std::size_t>(P));
  for (int t = 0; t < P; ++t) {
    src[static_cast<std::size_t>(t)] = partition(g, t);
    dest[static_cast<std::size_t>(t)] = ring::holder({n_, L_}, g, t);
  }
  std::vector<float> own = std::move(own_read);
  const bool defer = split_own && W > 0 && P > 1 && overlap_;  // as run(): the same sums, bit for bit
  RequestSet homes_in, home_out;
  std::vector<int> home_index(static_cast<std::size_t>(P), -1);
  int step = -1;
  try {
    if (W > 0)
      for (int t = 1; t < P; ++t) {
        const int x = dest[static_cast<std::size_t>(t)];
        if (needs(x, g))
          home_index[static_cast<std::size_t>(t)] =
              static_cast<int>(homes_in.add(home_.irecv(pool.get(wire_floats(W)), x, kTagDirectHome)));
      }
    // Posts step t's transfers into `set`: the receive of the block I need, the send of mine to
    // whoever needs it. Returns the receive's index, or −1.
    const auto post = [&](int t, RequestSet& set) -> int {
      if (t <= 0 || t >= P) return -1;
      int i_recv = -1;
      const int j = src[static_cast<std::size_t>(t)], x = dest[static_cast<std::size_t>(t)];
      if (needs(g, j)) i_recv = static_cast<int>(set.add(intra_.irecv(pool.get(R), j, kTagDirect)));
      if (needs(x, g)) {
        std::vector<float> copy = pool.get(R);
        std::memcpy(copy.data(), own.data(), static_cast<std::size_t>(R) * sizeof(float));
        set.add(intra_.isend(std::move(copy), x, kTagDirect));
      }
      return i_recv;
    };
    std::vector<float> result = W > 0 ? pool.get_zeroed(W) : std::vector<float>{};
    RequestSet cur_set;
    int i_cur = -1;
    for (int t = 0; t < P; ++t) {
      step = t;
      intra_.set_step(t, P);  // named by the communication watchdog (shared by the channels)
      const int j = src[static_cast<std::size_t>(t)];
      if (!overlap_) {  // the no-overlap ablation: this step's transfers complete before it computes
        i_cur = post(t, cur_set);
        stats.exposed_comm_seconds += cur_set.wait_all();
      }
      // This step's payload (received during the last step), its completed send copies returned
      // first: at most own + this + the next step's receive and send copy are held (4 payloads).
      std::vector<float> got =
          i_cur >= 0 ? cur_set.take(static_cast<std::size_t>(i_cur)) : std::vector<float>{};
      for (std::size_t i = 0; i < cur_set.size(); ++i) pool.put(cur_set.take(i));
      RequestSet next_set;
      const int i_next = overlap_ ? post(t + 1, next_set) : -1;
      if (t == 0 || needs(g, j)) {
        std::vector<float> w_loc =
            W > 0 ? (t == 0 ? std::move(result) : pool.get_zeroed(W)) : std::vector<float>{};
        const std::function<void()> progress = [&] {
          next_set.progress();
          home_out.progress();
        };
        const auto t0 = std::chrono::steady_clock::now();
        compute(t, j, t == 0 ? own.data() : got.data(), W > 0 ? w_loc.data() : nullptr, progress,
                defer && t == 0 ? RowSlice{0, 2} : RowSlice{});
        stats.compute_seconds += seconds_since(t0);
        if (t == 0)
          result = std::move(w_loc);
        else if (W > 0)
          home_out.add(home_.isend(to_wire(std::move(w_loc)), j, kTagDirectHome));
      }
      pool.put(std::move(got));
      const auto t1 = std::chrono::steady_clock::now();
      next_set.wait_all();
      stats.exposed_comm_seconds += seconds_since(t1);
      cur_set = std::move(next_set);
      i_cur = i_next;
    }
    step = P;
    intra_.set_step(P, P);
    std::vector<float> w_own;
    if (defer)  // the own block's second half while the partials travel home
      w_own = own_second_half(
          compute, own.data(), W,
          [&] {
            homes_in.progress();
            home_out.progress();
          },
          stats);
    const auto t1 = std::chrono::steady_clock::now();
    homes_in.wait_all();
    home_out.wait_all();
    stats.exposed_comm_seconds += seconds_since(t1);
    for (int t = 1; t < P; ++t) {  // step order: the chain's order on a flat ring
      const int i = home_index[static_cast<std::size_t>(t)];
      if (i < 0) continue;
      std::vector<float> part = homes_in.take(static_cast<std::size_t>(i));
      add_wire(result, part);  // fp32 sum; a bf16 wire part is widened as it is added
      pool.put(std::move(part));
    }
    if (defer) {
      add_into(result, w_own);
      pool.put(std::move(w_own));
    }
    stats.buffer_bytes = std::max(stats.buffer_bytes, pool.peak_bytes());
    for (std::size_t i = 0; i < home_out.size(); ++i) pool.put(home_out.take(i));
    pool.put(std::move(own));
    return result;
  } catch (const std::exception& e) {
    if (P == 1) throw;
    intra_.abort("mask-aware ring step " + std::to_string(step) +
                 " failed with payload in flight: " + e.what());
  }
}

}  // namespace burst::strategies
