// The ring-family step skeleton: double-buffered read ring (flat or double ring) plus the
// write accumulator chain. See ring_skeleton.h for the schedule and its byte counts.
#include "strategies/ring_skeleton.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <exception>
#include <string>
#include <utility>

#include "burst/error.h"
#include "burst/tensor.h"
#include "plan_ring.h"
#include "strategies/wire_pack.h"

namespace burst::strategies {

namespace {

constexpr int kTagRead = 1, kTagChain = 2, kTagHome = 16;

using ring::mod;

}  // namespace

RingExecutor::RingExecutor(const Communicator& comm, const device::Device& dev, int nodes, int ranks_per_node,
                           bool overlap, DType write_wire)
    : stage_(dev),
      intra_(comm.channel()),
      inter_(comm.channel()),
      chain_(comm.channel()),
      home_(comm.channel()),
      P_(comm.size()),
      n_(nodes),
      L_(ranks_per_node),
      rank_(comm.rank()),
      overlap_(overlap),
      wire_(write_wire) {
  BURST_CHECK(nodes >= 1 && ranks_per_node >= 1 && nodes * ranks_per_node == P_, Internal, "ring topology ",
              nodes, " x ", ranks_per_node, " does not match P=", P_);
  BURST_CHECK(write_wire == DType::F32 || write_wire == DType::BF16, Internal, "write wire dtype ",
              to_string(write_wire));
}

WireLayout RingExecutor::wire_layout(std::int64_t w) const { return wire::partial(wire_, w); }

ByteBuffer RingExecutor::to_wire(device::Buffer acc) const {
  if (wire_ == DType::F32) return stage_.send_copy(std::move(acc));
  const std::int64_t n = acc.size() / kF32;
  const WireLayout layout = wire_layout(n);
  device::Buffer wire = stage_.pool().get(layout.bytes());
  stage_.device().convert(make_view(acc.f32(), {n}), field_view(layout, 0, wire.data(), {n}));
  stage_.pool().put(std::move(acc));
  return stage_.send_copy(std::move(wire));
}

void RingExecutor::add_wire(device::Buffer& acc, ByteBuffer wire) const {
  const std::int64_t n = acc.size() / kF32;
  Message m = stage_.in(std::move(wire));
  stage_.device().add(field_view(wire_layout(n), 0, stage_.device_ready(m), {n}), make_view(acc.f32(), {n}));
  stage_.recycle(std::move(m));
}

void RingExecutor::add_into(device::Buffer& acc, const device::Buffer& x) const {
  const std::int64_t n = acc.size() / kF32;
  stage_.device().add(make_view(x.f32(), {n}), make_view(acc.f32(), {n}));
}

device::Buffer RingExecutor::own_second_half(const StepFn& compute, const std::byte* own, std::int64_t W,
                                             const std::function<void()>& progress, RingRunStats& stats,
                                             StepLog& log, int record) const {
  device::Buffer w_own = stage_.pool().get_zeroed(kF32 * W);
  log.compute(record, stats.compute_seconds, [&] {
    compute(0, rank_, own, w_own.f32(), progress, RowSlice{1, 2});
  });
  return w_own;
}

int RingExecutor::partition(int rank, int t) const { return ring::partition({n_, L_}, rank, t); }

device::Buffer RingExecutor::run(device::Buffer own_read, std::int64_t write_floats, const StepFn& compute,
                                 RingRunStats& stats, bool split_own) const {
  const int P = P_, n = n_, L = L_, g = rank_, a = g / L, b = g % L;
  const std::int64_t R = own_read.size();
  const std::int64_t W = write_floats;
  // Kept across runs: no fresh pages per pass. Device memory (payloads, partials) and the
  // pinned wire buffers; one pool on a host-memory device.
  Stager& st = stage_;
  device::BufferPool &pool = st.pool(), &wires = st.wire_pool();
  st.begin_pass(R);
  const int right_intra = a * L + mod(b + 1, L), left_intra = a * L + mod(b - 1, L);
  const int right_inter = mod(a + 1, n) * L + b, left_inter = mod(a - 1, n) * L + b;
  // One record per plan step: P ring steps, then the final hop when partials travel home.
  const int records = P + (W > 0 && P > 1 ? 1 : 0);
  StepLog log(stats.steps, records);
  const std::int64_t read_bytes = R, write_bytes = wire_layout(W).bytes();

  Message cur = st.out(std::move(own_read));  // staged out once; forwarded from its wire after
  device::Buffer w_acc;
  // The own block's second half, kept for after the last step (RingExecutor::run, split_own).
  const bool defer = split_own && W > 0 && P > 1 && overlap_;
  Message own_kept;
  std::vector<device::Buffer> home_parts(static_cast<std::size_t>(n));  // by round
  RequestSet homes_in;  // one receive per round whose source is not self
  std::vector<int> home_index(static_cast<std::size_t>(n), -1);
  RequestSet inter_set, home_out;  // inter transfers live for a whole round
  std::size_t i_inter_send = 0, i_inter_recv = 0;
  int step = -1;
  try {
    if (W > 0 && P > 1) {
      for (int k = 0; k < n; ++k) {
        // The chain of my block ends in round k on rank (a + k, b − 1).
        const int src = mod(a + k, n) * L + mod(b - 1, L);
        if (src != g) {
          home_index[static_cast<std::size_t>(k)] =
              static_cast<int>(homes_in.add(home_.irecv(wires.get_host(write_bytes), src, kTagHome + k)));
          log.at((k + 1) * L).received += write_bytes;  // sent at the step that ends round k
        }
      }
    }
    auto send_home = [&](int k, int part, device::Buffer acc, StepTimes& rec) {
      if (part == g) {
        home_parts[static_cast<std::size_t>(k)] = std::move(acc);
      } else {
        home_out.add(home_.isend(to_wire(std::move(acc)), part, kTagHome + k));
        rec.sent += write_bytes;
      }
    };
    for (int t = 0; t < P; ++t) {
      step = t;
      intra_.set_step(t, P);  // named by the communication watchdog (shared by the channels)
      const int u = t % L, k = t / L;
      const bool intra = P > 1 && u<L - 1, inter = P> 1 && u == 0 && k < n - 1;
      StepTimes& rec = log.at(t);
      RequestSet step_set;
      std::size_t i_recv = 0, i_send = 0, i_chain_in = 0, i_chain_out = 0;
      // The payload in device memory; the wire's storage moves into the sends below unchanged.
      const std::byte* view = st.device_ready(cur);
      if (intra) {
        i_recv = step_set.add(intra_.irecv(wires.get_host(R), left_intra, kTagRead));
        i_send = step_set.add(intra_.isend(std::move(cur.wire), right_intra, kTagRead));
        rec.sent += read_bytes;
        rec.received += read_bytes;
      }
      if (inter) {
        inter_set.clear();
        if (intra) {
          ByteBuffer copy = wires.get_host(R);  // a second wire: the intra send owns the first
          {
            Stopwatch sw(&rec.copy);
            st.device().copy_to_host(view, copy.data(), R);
            st.device().wait(st.device().record());
          }
          i_inter_send = inter_set.add(inter_.isend(std::move(copy), right_inter, kTagRead));
        } else {
          i_inter_send = inter_set.add(inter_.isend(std::move(cur.wire), right_inter, kTagRead));
        }
        i_inter_recv = inter_set.add(inter_.irecv(wires.get_host(R), left_inter, kTagRead));
        rec.sent += read_bytes;
        rec.received += read_bytes;
      }
      device::Buffer w_loc;
      {
        Stopwatch sw(&rec.copy);  // wire copies of the partial and the zeroed step partial
        if (W > 0 && P > 1) {
          if (u >= 1) {
            i_chain_in = step_set.add(chain_.irecv(wires.get_host(write_bytes), left_intra, kTagChain));
            i_chain_out = step_set.add(chain_.isend(to_wire(std::move(w_acc)), right_intra, kTagChain));
            rec.sent += write_bytes;
            rec.received += write_bytes;
          } else if (t > 0) {
            send_home(k - 1, partition(g, t - 1), std::move(w_acc), rec);
          }
        }
        if (W > 0) w_loc = pool.get_zeroed(kF32 * W);
      }
      if (!overlap_) {
        double waited = step_set.wait_all();
        if (u == L - 1) waited += inter_set.wait_all();
        stats.exposed_comm_seconds += waited;
        rec.wait += waited;
      }
      const std::function<void()> progress = [&] {
        step_set.progress();
        inter_set.progress();
        home_out.progress();
      };
      log.compute(t, stats.compute_seconds, [&] {
        compute(t, partition(g, t), view, W > 0 ? w_loc.f32() : nullptr, progress,
                defer && t == 0 ? RowSlice{0, 2} : RowSlice{});
      });
      const auto t1 = std::chrono::steady_clock::now();
      step_set.wait_all();
      const bool last_of_round = (u == L - 1) && k < n - 1 && P > 1;
      if (last_of_round) inter_set.wait_all();
      const double waited = seconds_since(t1);
      stats.exposed_comm_seconds += waited;
      rec.wait += waited;
      // A completed send's buffer goes back to the pool, except step 0's: the own payload that
      // split_own computes on again after the last step.
      // The received payload's device copy is enqueued at once (read at the next step).
      auto retire = [&](ByteBuffer sent) {
        cur.wire = std::move(sent);
        if (defer && t == 0)
          own_kept = std::move(cur);
        else
          st.recycle(std::move(cur));
      };
      if (intra) {
        retire(step_set.take(i_send));
        cur = st.in(step_set.take(i_recv));
      } else if (last_of_round) {
        retire(inter_set.take(i_inter_send));
        cur = st.in(inter_set.take(i_inter_recv));
      }
      if (W > 0) {
        if (P > 1 && u >= 1) {
          Stopwatch sw(&rec.copy);
          add_wire(w_loc, step_set.take(i_chain_in));  // w_acc = chain partial + this step's (fp32)
          wires.put_host(step_set.take(i_chain_out));
        }
        w_acc = std::move(w_loc);
      }
    }
    device::Buffer result;
    if (W > 0) {
      step = P;
      intra_.set_step(P, P);
      StepTimes& fin = log.at(records - 1);
      if (P > 1) {
        Stopwatch sw(&fin.copy);  // the wire copy
        send_home(n - 1, partition(g, P - 1), std::move(w_acc), fin);
      } else {
        home_parts[0] = std::move(w_acc);
      }
      device::Buffer w_own;
      if (defer) {  // the own block's second half while the last partials travel home
        BURST_CHECK(!own_kept.wire.empty(), Internal, "ring: the own block's payload was not kept");
        w_own = own_second_half(
            compute, st.device_ready(own_kept), W,
            [&] {
              homes_in.progress();
              home_out.progress();
              inter_set.progress();
            },
            stats, log, records - 1);
        st.recycle(std::move(own_kept));
      }
      const auto t1 = std::chrono::steady_clock::now();
      homes_in.wait_all();
      home_out.wait_all();
      const double waited = seconds_since(t1);
      stats.exposed_comm_seconds += waited;
      fin.wait += waited;
      Stopwatch sw(&fin.copy);  // the owner's sums
      // The owner's sum in round order; a received part is a wire message, the own one fp32.
      // Round 0's part becomes the result when it is fp32 (own, or an fp32 wire: as before the
      // option existed); a bf16 one is widened into a zeroed accumulator.
      for (int k = 0; k < n; ++k) {
        const int i = home_index[static_cast<std::size_t>(k)];
        if (k == 0 && (i < 0 || wire_ == DType::F32)) {
          result = i < 0 ? std::move(home_parts[0])
                         : st.take_device(st.in(homes_in.take(static_cast<std::size_t>(i))));
          continue;
        }
        if (k == 0) result = pool.get_zeroed(kF32 * W);
        if (i >= 0) {
          add_wire(result, homes_in.take(static_cast<std::size_t>(i)));
        } else {
          add_into(result, home_parts[static_cast<std::size_t>(k)]);
          pool.put(std::move(home_parts[static_cast<std::size_t>(k)]));
        }
      }
      if (defer) {  // after the rounds: a fixed order, the same on every run
        add_into(result, w_own);
        pool.put(std::move(w_own));
      }
    }
    {
      Stopwatch sw(&log.at(records - 1).wait);
      inter_set.wait_all();
    }
    stats.buffer_bytes = std::max(stats.buffer_bytes, st.peak_bytes());
    // Every buffer goes back to the pool for the next run (sends are complete after the waits).
    st.recycle(std::move(cur));
    for (RequestSet* set : {&home_out, &inter_set})
      for (std::size_t i = 0; i < set->size(); ++i) wires.put_host(set->take(i));
    return result;
  } catch (const std::exception& e) {
    if (P == 1) throw;
    intra_.abort("ring step " + std::to_string(step) + " failed with payload in flight: " + e.what());
  }
}

}  // namespace burst::strategies
