// The mask-aware schedule of the ring family (RingExecutor::run_direct, ring_skeleton.h): the
// steps of the (double) ring, but only the payloads a rank's mask needs, sent by their owners.
// Source: MagiAttention's zero-redundant communication (docs/strategies.md § Mask-aware rings).
#include <algorithm>
#include <chrono>
#include <exception>
#include <string>
#include <utility>

#include "burst/error.h"
#include "plan_ring.h"
#include "strategies/ring_skeleton.h"

namespace burst::strategies {

namespace {

constexpr int kTagDirect = 3, kTagDirectHome = 4;

}  // namespace

device::Buffer RingExecutor::run_direct(device::Buffer own_read, std::int64_t write_floats,
                                        const std::vector<std::vector<char>>& need, const StepFn& compute,
                                        RingRunStats& stats, bool split_own) const {
  const int P = P_, g = rank_;
  const std::int64_t R = own_read.size();
  const std::int64_t W = write_floats;
  BURST_CHECK(static_cast<int>(need.size()) == P, Internal, "run_direct: need has ", need.size(),
              " rows, P=", P);
  Stager& st = stage_;  // device memory and pinned wire buffers (one pool on a host-memory device)
  device::BufferPool &pool = st.pool(), &wires = st.wire_pool();
  st.begin_pass(R);
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
  // The own payload stays in device memory; each send is a fresh wire copy of it (copy_to_host).
  device::Buffer own = std::move(own_read);
  const bool defer = split_own && W > 0 && P > 1 && overlap_;  // as run(): the same sums, bit for bit
  RequestSet homes_in, home_out;
  std::vector<int> home_index(static_cast<std::size_t>(P), -1);
  StepLog log(stats.steps, P);  // one record per step; the end-of-pass work counts to the last
  const std::int64_t read_bytes = R, write_bytes = wire_layout(W).bytes();
  int step = -1;
  try {
    if (W > 0)
      for (int t = 1; t < P; ++t) {
        const int x = dest[static_cast<std::size_t>(t)];
        if (needs(x, g)) {
          home_index[static_cast<std::size_t>(t)] =
              static_cast<int>(homes_in.add(home_.irecv(wires.get_host(write_bytes), x, kTagDirectHome)));
          log.at(t).received += write_bytes;
        }
      }
    // Posts step t's transfers into `set`: the receive of the block I need, the send of mine to
    // whoever needs it (bytes counted to step t, the copy's time to `now`, the step posting it).
    // Returns the receive's index, or −1.
    const auto post = [&](int t, RequestSet& set, StepTimes& now) -> int {
      if (t <= 0 || t >= P) return -1;
      int i_recv = -1;
      const int j = src[static_cast<std::size_t>(t)], x = dest[static_cast<std::size_t>(t)];
      if (needs(g, j)) {
        i_recv = static_cast<int>(set.add(intra_.irecv(wires.get_host(R), j, kTagDirect)));
        log.at(t).received += read_bytes;
      }
      if (needs(x, g)) {
        ByteBuffer copy = wires.get_host(R);
        {
          Stopwatch sw(&now.copy);
          st.device().copy_to_host(own.data(), copy.data(), R);
          st.device().wait(st.device().record());
        }
        set.add(intra_.isend(std::move(copy), x, kTagDirect));
        log.at(t).sent += read_bytes;
      }
      return i_recv;
    };
    device::Buffer result = W > 0 ? pool.get_zeroed(kF32 * W) : device::Buffer{};
    RequestSet cur_set;
    int i_cur = -1;
    for (int t = 0; t < P; ++t) {
      step = t;
      intra_.set_step(t, P);  // named by the communication watchdog (shared by the channels)
      const int j = src[static_cast<std::size_t>(t)];
      StepTimes& rec = log.at(t);
      if (!overlap_) {  // the no-overlap ablation: this step's transfers complete before it computes
        i_cur = post(t, cur_set, rec);
        const double waited = cur_set.wait_all();
        stats.exposed_comm_seconds += waited;
        rec.wait += waited;
      }
      // This step's payload (received during the last step), its completed send copies returned
      // first: at most own + this + the next step's receive and send copy are held (4 payloads).
      Message got = i_cur >= 0 ? st.in(cur_set.take(static_cast<std::size_t>(i_cur))) : Message{};
      for (std::size_t i = 0; i < cur_set.size(); ++i) wires.put_host(cur_set.take(i));
      RequestSet next_set;
      const int i_next = overlap_ ? post(t + 1, next_set, rec) : -1;
      if (t == 0 || needs(g, j)) {
        device::Buffer w_loc;
        {
          Stopwatch sw(&rec.copy);
          if (W > 0) w_loc = t == 0 ? std::move(result) : pool.get_zeroed(kF32 * W);
        }
        const std::function<void()> progress = [&] {
          next_set.progress();
          home_out.progress();
        };
        log.compute(t, stats.compute_seconds, [&] {
          compute(t, j, t == 0 ? own.data() : st.device_ready(got), W > 0 ? w_loc.f32() : nullptr, progress,
                  defer && t == 0 ? RowSlice{0, 2} : RowSlice{});
        });
        if (t == 0) {
          result = std::move(w_loc);
        } else if (W > 0) {
          ByteBuffer wire;
          {
            Stopwatch sw(&rec.copy);
            wire = to_wire(std::move(w_loc));
          }
          home_out.add(home_.isend(std::move(wire), j, kTagDirectHome));
          rec.sent += write_bytes;
        }
      }
      st.recycle(std::move(got));
      const auto t1 = std::chrono::steady_clock::now();
      next_set.wait_all();
      const double waited = seconds_since(t1);
      stats.exposed_comm_seconds += waited;
      rec.wait += waited;
      cur_set = std::move(next_set);
      i_cur = i_next;
    }
    step = P;
    intra_.set_step(P, P);
    device::Buffer w_own;
    if (defer)  // the own block's second half while the partials travel home
      w_own = own_second_half(
          compute, own.data(), W,
          [&] {
            homes_in.progress();
            home_out.progress();
          },
          stats, log, P - 1);
    StepTimes& fin = log.at(P - 1);
    const auto t1 = std::chrono::steady_clock::now();
    homes_in.wait_all();
    home_out.wait_all();
    const double waited = seconds_since(t1);
    stats.exposed_comm_seconds += waited;
    fin.wait += waited;
    Stopwatch sw(&fin.copy);       // the owner's sums
    for (int t = 1; t < P; ++t) {  // step order: the chain's order on a flat ring
      const int i = home_index[static_cast<std::size_t>(t)];
      if (i < 0) continue;
      add_wire(result, homes_in.take(static_cast<std::size_t>(i)));  // fp32; a bf16 wire part widened
    }
    if (defer) {
      add_into(result, w_own);
      pool.put(std::move(w_own));
    }
    stats.buffer_bytes = std::max(stats.buffer_bytes, st.peak_bytes());
    for (std::size_t i = 0; i < home_out.size(); ++i) wires.put_host(home_out.take(i));
    pool.put(std::move(own));
    return result;
  } catch (const std::exception& e) {
    if (P == 1) throw;
    intra_.abort("mask-aware ring step " + std::to_string(step) +
                 " failed with payload in flight: " + e.what());
  }
}

}  // namespace burst::strategies
