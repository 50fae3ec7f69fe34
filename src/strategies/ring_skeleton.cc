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

// One run() of the executor: the state its P steps share, and the steps by name. Topology
// (docs/algorithm.md §7): `nodes` nodes of `per_node` ranks, this rank = node·per_node + local;
// step t is position t mod per_node of round t / per_node; the read payload moves along the
// intra ring inside a round and along the inter ring at a round's end.
// Completion: a step ends when its receives are in (the payload and chain partial of the next
// step), not when its sends are: those complete by the end of the next step. A rank is then held
// only by its left neighbour (whose data it needs) and by its right one a step later, so a
// slower rank does not hold up the rank behind it at every step (its receive is posted one step
// later than the send).
class RingExecutor::Run {
 public:
  Run(const RingExecutor& ex, device::Buffer own_read, std::int64_t write_floats, const StepFn& compute,
      RingRunStats& stats, bool split_own)
      : ex_(ex),
        st_(ex.stage_),
        compute_(compute),
        stats_(stats),
        steps_(ex.P_),
        nodes_(ex.n_),
        per_node_(ex.L_),
        rank_(ex.rank_),
        node_(rank_ / per_node_),
        local_(rank_ % per_node_),
        read_bytes_(own_read.size()),
        write_floats_(write_floats),
        write_bytes_(ex.wire_layout(write_floats).bytes()),
        partials_(write_floats > 0 && steps_ > 1),
        defer_own_(split_own && partials_ && ex.overlap_),
        records_(steps_ + (partials_ ? 1 : 0)),
        log_(stats.steps, records_),
        home_parts_(static_cast<std::size_t>(nodes_)),
        home_index_(static_cast<std::size_t>(nodes_), -1) {
    st_.begin_pass(read_bytes_);
    cur_ = st_.out(std::move(own_read));  // staged out once; forwarded from its wire after
  }

  device::Buffer run() {
    post_home_receives();
    for (int t = 0; t < steps_; ++t) {
      step_ = t;
      ex_.intra_.set_step(t, steps_);  // named by the communication watchdog (shared by the channels)
      post_read_transfers(t);
      pass_partial_on(t);
      if (!ex_.overlap_) wait_before_compute(t);
      compute_step(t);
      wait_receives(t);
      advance_payload(t);
      fold_chain_partial(t);
    }
    device::Buffer result = write_floats_ > 0 ? finish() : device::Buffer{};
    drain();
    return result;
  }

  int step() const { return step_; }

 private:
  // Ring neighbours: intra ring inside the node, inter ring across nodes (same local rank).
  int intra(int d) const { return node_ * per_node_ + mod(local_ + d, per_node_); }
  int inter(int d) const { return mod(node_ + d, nodes_) * per_node_ + local_; }
  int position(int t) const { return t % per_node_; }  // in its round
  int round(int t) const { return t / per_node_; }
  bool moves_intra(int t) const { return steps_ > 1 && position(t) < per_node_ - 1; }
  bool moves_inter(int t) const { return steps_ > 1 && position(t) == 0 && round(t) < nodes_ - 1; }
  bool ends_round(int t) const { return steps_ > 1 && position(t) == per_node_ - 1 && round(t) < nodes_ - 1; }

  // The owner's side of the write ring: one receive per round whose chain ends on another rank.
  void post_home_receives() {
    if (!partials_) return;
    for (int k = 0; k < nodes_; ++k) {
      const int src = mod(node_ + k, nodes_) * per_node_ + mod(local_ - 1, per_node_);  // round k's chain end
      if (src == rank_) continue;
      home_index_[static_cast<std::size_t>(k)] = static_cast<int>(
          homes_in_.add(ex_.home_.irecv(st_.wire_pool().get_host(write_bytes_), src, kTagHome + k)));
      log_.at((k + 1) * per_node_).received += write_bytes_;  // sent at the step that ends round k
    }
  }

  // Step t's payload goes on (intra: to the right; inter: at a round's start, a second copy
  // across nodes) while the next one comes in.
  void post_read_transfers(int t) {
    StepTimes& rec = log_.at(t);
    view_ = st_.device_ready(cur_);  // the wire's storage moves into the sends below unchanged
    read_sent_ = false;
    if (moves_intra(t)) {
      i_read_in_ = recvs_.add(ex_.intra_.irecv(st_.wire_pool().get_host(read_bytes_), intra(-1), kTagRead));
      i_read_out_ = sends_.add(ex_.intra_.isend(std::move(cur_.wire), intra(+1), kTagRead));
      read_sent_ = true;
      rec.sent += read_bytes_;
      rec.received += read_bytes_;
    }
    if (moves_inter(t)) {
      inter_set_.clear();
      if (read_sent_) {
        ByteBuffer copy =
            st_.wire_pool().get_host(read_bytes_);  // a second wire: the intra send owns the first
        {
          Stopwatch sw(&rec.copy);
          st_.device().copy_to_host(view_, copy.data(), read_bytes_);
          st_.device().wait(st_.device().record());
        }
        i_inter_out_ = inter_set_.add(ex_.inter_.isend(std::move(copy), inter(+1), kTagRead));
      } else {
        i_inter_out_ = inter_set_.add(ex_.inter_.isend(std::move(cur_.wire), inter(+1), kTagRead));
      }
      i_inter_in_ =
          inter_set_.add(ex_.inter_.irecv(st_.wire_pool().get_host(read_bytes_), inter(-1), kTagRead));
      rec.sent += read_bytes_;
      rec.received += read_bytes_;
    }
  }

  // The write partial of the previous step's block: along the chain inside a round, home at a
  // round's end; and this step's zeroed partial.
  void pass_partial_on(int t) {
    StepTimes& rec = log_.at(t);
    Stopwatch sw(&rec.copy);  // wire copies of the partial and the zeroed step partial
    chain_in_ = false;
    if (partials_) {
      if (position(t) >= 1) {
        i_chain_in_ =
            recvs_.add(ex_.chain_.irecv(st_.wire_pool().get_host(write_bytes_), intra(-1), kTagChain));
        sends_.add(ex_.chain_.isend(ex_.to_wire(std::move(acc_)), intra(+1), kTagChain));
        chain_in_ = true;
        rec.sent += write_bytes_;
        rec.received += write_bytes_;
      } else if (t > 0) {
        send_home(round(t) - 1, ex_.partition(rank_, t - 1), std::move(acc_), rec);
      }
    }
    if (write_floats_ > 0) step_partial_ = st_.pool().get_zeroed(kF32 * write_floats_);
  }

  void send_home(int k, int part, device::Buffer acc, StepTimes& rec) {
    if (part == rank_) {
      home_parts_[static_cast<std::size_t>(k)] = std::move(acc);
    } else {
      home_out_.add(ex_.home_.isend(ex_.to_wire(std::move(acc)), part, kTagHome + k));
      rec.sent += write_bytes_;
    }
  }

  // The no-overlap ablation: every transfer of the step done before its compute.
  void wait_before_compute(int t) {
    double waited = recvs_.wait_all() + sends_.wait_all() + earlier_sends_.wait_all();
    if (position(t) == per_node_ - 1) waited += inter_set_.wait_all();
    stats_.exposed_comm_seconds += waited;
    log_.at(t).wait += waited;
  }

  void poll() {
    recvs_.progress();
    sends_.progress();
    earlier_sends_.progress();
    inter_set_.progress();
    home_out_.progress();
    homes_in_.progress();
  }

  void compute_step(int t) {
    const std::function<void()> progress = [this] { poll(); };
    log_.compute(t, stats_.compute_seconds, [&] {
      compute_(t, ex_.partition(rank_, t), view_, write_floats_ > 0 ? step_partial_.f32() : nullptr, progress,
               defer_own_ && t == 0 ? RowSlice{0, 2} : RowSlice{});
    });
  }

  // Blocks until the next step's payload and this step's chain partial are in, and the previous
  // step's sends are out (this step's sends stay in flight until the next step's end).
  void wait_receives(int t) {
    const auto t0 = std::chrono::steady_clock::now();
    recvs_.wait_all();
    if (ends_round(t)) inter_set_.wait_all();
    earlier_sends_.wait_all();
    const double waited = seconds_since(t0);
    stats_.exposed_comm_seconds += waited;
    log_.at(t).wait += waited;
    retire_earlier_sends();
  }

  // The sends of the step before this one are complete: their buffers go back (the payload's,
  // unless split_own computes on it again after the last step).
  void retire_earlier_sends() {
    for (std::size_t i = 0; i < earlier_sends_.size(); ++i) {
      ByteBuffer sent = earlier_sends_.take(i);
      if (static_cast<int>(i) == earlier_read_index_) {
        recycle_payload(std::move(sent), earlier_read_message_, earlier_read_step_);
      } else {
        st_.wire_pool().put_host(std::move(sent));
      }
    }
    earlier_sends_ = RequestSet{};
    earlier_read_index_ = -1;
  }

  // Step t's payload is done with; the next one (received) becomes current. A payload still in
  // an intra send is kept with it until the send completes.
  void advance_payload(int t) {
    if (moves_intra(t)) {
      earlier_read_message_ = std::move(cur_);  // its wire is in the send
      earlier_read_step_ = t;
      cur_ = st_.in(recvs_.take(i_read_in_));
    } else if (ends_round(t)) {
      ByteBuffer sent = inter_set_.take(i_inter_out_);
      if (cur_.wire.empty()) {  // the inter send took this payload's wire (no intra ring)
        recycle_payload(std::move(sent), cur_, t);
      } else {  // the inter send's was a copy made at the round's start
        st_.wire_pool().put_host(std::move(sent));
        ByteBuffer own_wire = std::move(cur_.wire);
        recycle_payload(std::move(own_wire), cur_, t);
      }
      cur_ = st_.in(inter_set_.take(i_inter_in_));
    }
  }

  // A payload whose last send completed: back to the pools, or kept (split_own, step 0's).
  void recycle_payload(ByteBuffer sent, Message& m, int t) {
    m.wire = std::move(sent);
    if (defer_own_ && t == 0)
      own_kept_ = std::move(m);
    else
      st_.recycle(std::move(m));
  }

  // acc = chain partial + this step's contribution (fp32); this step's sends become the
  // earlier ones, completed by the next step's end.
  void fold_chain_partial(int t) {
    if (write_floats_ > 0) {
      if (chain_in_) {
        Stopwatch sw(&log_.at(t).copy);
        ex_.add_wire(step_partial_, recvs_.take(i_chain_in_));
      }
      acc_ = std::move(step_partial_);
    }
    recvs_ = RequestSet{};
    earlier_sends_ = std::move(sends_);
    earlier_read_index_ = read_sent_ ? static_cast<int>(i_read_out_) : -1;
    sends_ = RequestSet{};
  }

  // After the last step: the last partial home, the own block's second half (split_own) while
  // it travels, then the owner's sum of its block's round partials, in round order.
  device::Buffer finish() {
    step_ = steps_;
    ex_.intra_.set_step(steps_, steps_);
    StepTimes& fin = log_.at(records_ - 1);
    if (partials_) {
      Stopwatch sw(&fin.copy);  // the wire copy
      send_home(nodes_ - 1, ex_.partition(rank_, steps_ - 1), std::move(acc_), fin);
    } else {
      home_parts_[0] = std::move(acc_);
    }
    device::Buffer own_half;
    if (defer_own_) {  // step 0's payload: kept when its send completed (by step 1's end)
      BURST_CHECK(!own_kept_.wire.empty(), Internal, "ring: the own block's payload was not kept");
      own_half = ex_.own_second_half(
          compute_, st_.device_ready(own_kept_), write_floats_, [this] { poll(); }, stats_, log_,
          records_ - 1);
      st_.recycle(std::move(own_kept_));
    }
    const auto t0 = std::chrono::steady_clock::now();
    homes_in_.wait_all();
    home_out_.wait_all();
    const double waited = seconds_since(t0);
    stats_.exposed_comm_seconds += waited;
    fin.wait += waited;
    Stopwatch sw(&fin.copy);  // the owner's sums
    device::Buffer result = sum_home_parts();
    if (defer_own_) {  // after the rounds: a fixed order, the same on every run
      ex_.add_into(result, own_half);
      st_.pool().put(std::move(own_half));
    }
    return result;
  }

  // Round 0's part becomes the result when it is fp32 (own, or an fp32 wire); a bf16 one is
  // widened into a zeroed accumulator. A received part is a wire message, the own one fp32.
  device::Buffer sum_home_parts() {
    device::Buffer result;
    for (int k = 0; k < nodes_; ++k) {
      const int i = home_index_[static_cast<std::size_t>(k)];
      device::Buffer& own = home_parts_[static_cast<std::size_t>(k)];
      if (k == 0 && (i < 0 || ex_.wire_ == DType::F32)) {
        result =
            i < 0 ? std::move(own) : st_.take_device(st_.in(homes_in_.take(static_cast<std::size_t>(i))));
        continue;
      }
      if (k == 0) result = st_.pool().get_zeroed(kF32 * write_floats_);
      if (i >= 0) {
        ex_.add_wire(result, homes_in_.take(static_cast<std::size_t>(i)));
      } else {
        ex_.add_into(result, own);
        st_.pool().put(std::move(own));
      }
    }
    return result;
  }

  // Every transfer complete and every buffer back in the pools for the next run.
  void drain() {
    {
      Stopwatch sw(&log_.at(records_ - 1).wait);
      inter_set_.wait_all();
      earlier_sends_.wait_all();
    }
    retire_earlier_sends();
    stats_.buffer_bytes = std::max(stats_.buffer_bytes, st_.peak_bytes());
    st_.recycle(std::move(cur_));
    for (RequestSet* set : {&home_out_, &inter_set_})
      for (std::size_t i = 0; i < set->size(); ++i) st_.wire_pool().put_host(set->take(i));
  }

  const RingExecutor& ex_;
  Stager& st_;
  const StepFn& compute_;
  RingRunStats& stats_;
  const int steps_, nodes_, per_node_, rank_, node_, local_;
  const std::int64_t read_bytes_, write_floats_, write_bytes_;
  const bool partials_;   // a write accumulator that travels (W > 0, P > 1)
  const bool defer_own_;  // split_own in effect
  const int records_;     // P ring steps, then the final hop when partials travel home
  StepLog log_;
  int step_ = -1;

  Message cur_;              // this step's read payload
  const std::byte* view_{};  // ... in device memory
  Message own_kept_;         // split_own: step 0's payload, for the second half
  device::Buffer acc_;       // the write partial one step behind the read block
  device::Buffer step_partial_;
  std::vector<device::Buffer> home_parts_;  // by round: partials whose home is this rank
  RequestSet homes_in_, home_out_;
  std::vector<int> home_index_;  // round → index in homes_in_ (−1: own)
  RequestSet inter_set_;         // inter transfers live for a whole round
  std::size_t i_inter_out_ = 0, i_inter_in_ = 0;
  // This step's transfers: receives (waited at its end) and sends (at the next step's end).
  RequestSet recvs_, sends_, earlier_sends_;
  std::size_t i_read_in_ = 0, i_read_out_ = 0, i_chain_in_ = 0;
  bool read_sent_ = false, chain_in_ = false;
  int earlier_read_index_ = -1, earlier_read_step_ = 0;
  Message earlier_read_message_;  // the payload of earlier_sends_' read send
};

device::Buffer RingExecutor::run(device::Buffer own_read, std::int64_t write_floats, const StepFn& compute,
                                 RingRunStats& stats, bool split_own) const {
  Run r(*this, std::move(own_read), write_floats, compute, stats, split_own);
  try {
    return r.run();
  } catch (const std::exception& e) {
    if (P_ == 1) throw;
    intra_.abort("ring step " + std::to_string(r.step()) + " failed with payload in flight: " + e.what());
  }
}

}  // namespace burst::strategies
