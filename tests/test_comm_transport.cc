// Tests of Communicator::from_transport (burst/comm_transport.h, src/comm_transport.cc) under
// mpiexec -n 1..4. The transport here is a test-only one over an MPI_Comm_dup (plain
// MPI_Isend / MPI_Irecv / MPI_Iallgather / MPI_Ialltoallv), so every operation can be compared
// with the MPI Communicator on the same ranks: the same results (bit for bit, reductions
// included), the same byte counters, channels and splits that never cross, the same errors on
// every rank, and DistAttention passes whose outputs and gradients equal the MPI ones.
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <numeric>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "burst/comm.h"
#include "burst/comm_transport.h"
#include "burst/error.h"
#include "burst/strategy.h"
#include "test_util.h"

namespace burst {
namespace {

class MpiOp final : public TransportOp {
 public:
  explicit MpiOp(MPI_Request r) : request_(r) {}
  ~MpiOp() override {
    if (request_ != MPI_REQUEST_NULL) MPI_Wait(&request_, MPI_STATUS_IGNORE);
  }
  bool wait_for(double seconds) override {
    const auto t0 = std::chrono::steady_clock::now();
    for (;;) {
      int done = 0;
      MPI_Test(&request_, &done, MPI_STATUS_IGNORE);
      if (done) return true;
      if (seconds > 0 &&
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > seconds)
        return false;
      std::this_thread::yield();
    }
  }

 private:
  MPI_Request request_;
};

// A Transport over its own dup of MPI_COMM_WORLD (a group burst does not own).
class MpiTransport final : public Transport {
 public:
  MpiTransport() {
    MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~MpiTransport() override { MPI_Comm_free(&comm_); }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int world_rank(int rank) const override { return rank; }
  std::string name() const override { return "test MPI transport"; }
  std::unique_ptr<TransportOp> isend(std::span<std::byte> data, int dest, std::int64_t tag) override {
    MPI_Request r = MPI_REQUEST_NULL;
    MPI_Isend(data.data(), static_cast<int>(data.size()), MPI_BYTE, dest, static_cast<int>(tag), comm_, &r);
    return std::make_unique<MpiOp>(r);
  }
  std::unique_ptr<TransportOp> irecv(std::span<std::byte> data, int source, std::int64_t tag) override {
    MPI_Request r = MPI_REQUEST_NULL;
    MPI_Irecv(data.data(), static_cast<int>(data.size()), MPI_BYTE, source, static_cast<int>(tag), comm_, &r);
    return std::make_unique<MpiOp>(r);
  }
  std::unique_ptr<TransportOp> all_gather(std::span<const std::byte> send,
                                          std::span<std::byte> recv) override {
    MPI_Request r = MPI_REQUEST_NULL;
    const int n = static_cast<int>(send.size());
    MPI_Iallgather(send.data(), n, MPI_BYTE, recv.data(), n, MPI_BYTE, comm_, &r);
    ++collectives;
    return std::make_unique<MpiOp>(r);
  }
  std::unique_ptr<TransportOp> all_to_all_v(std::span<const std::byte> send,
                                            const std::vector<std::int64_t>& sb, std::span<std::byte> recv,
                                            const std::vector<std::int64_t>& rb) override {
    std::vector<int> sn(sb.begin(), sb.end()), rn(rb.begin(), rb.end()), sd(sb.size()), rd(rb.size());
    std::exclusive_scan(sn.begin(), sn.end(), sd.begin(), 0);
    std::exclusive_scan(rn.begin(), rn.end(), rd.begin(), 0);
    MPI_Request r = MPI_REQUEST_NULL;
    MPI_Ialltoallv(send.data(), sn.data(), sd.data(), MPI_BYTE, recv.data(), rn.data(), rd.data(), MPI_BYTE,
                   comm_, &r);
    ++collectives;
    return std::make_unique<MpiOp>(r);
  }
  [[noreturn]] void abort(int code) override {
    MPI_Abort(comm_, code);
    std::abort();
  }

  int collectives = 0;  // group collectives started (the whole-group path)

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
};

float val(int r, std::int64_t i) { return static_cast<float>(r * 1000 + i) * 0.37f; }

struct Both {
  std::shared_ptr<MpiTransport> group = std::make_shared<MpiTransport>();
  Communicator mpi = Communicator::world();
  Communicator over = Communicator::from_transport(group);
};

TEST(CommTransport, RankSizeAndControlExchanges) {
  Both b;
  EXPECT_EQ(b.over.rank(), b.mpi.rank());
  EXPECT_EQ(b.over.size(), b.mpi.size());
  EXPECT_EQ(b.over.exchange({b.over.rank(), 7}, "test"), b.mpi.exchange({b.mpi.rank(), 7}, "test"));
  EXPECT_EQ(b.over.all_reduce_max(std::int64_t{b.over.rank()}), b.over.size() - 1);
  EXPECT_EQ(b.over.all_reduce_sum(std::int64_t{2}), 2 * b.over.size());
  b.over.barrier();
}

// all_gather(_v), all_to_all(_v), reduce_scatter and all_reduce_sum: the same bytes as MPI's
// (reduce_scatter is the same all-to-all + rank-order sum on both; all_reduce_sum over the
// transport sums in rank order, checked against that sum computed here).
TEST(CommTransport, CollectivesEqualMpi) {
  Both b;
  const int P = b.mpi.size(), r = b.mpi.rank();
  for (Communicator* c : {&b.mpi, &b.over}) c->reset_counters();
  std::vector<std::vector<float>> got(2);
  int k = 0;
  for (Communicator* c : {&b.mpi, &b.over}) {
    std::vector<float> mine(5), all(static_cast<std::size_t>(5 * P));
    for (int i = 0; i < 5; ++i) mine[static_cast<std::size_t>(i)] = val(r, i);
    c->all_gather(std::as_bytes(std::span(mine)), std::as_writable_bytes(std::span(all)));
    std::vector<std::int64_t> bytes(static_cast<std::size_t>(P));
    for (int i = 0; i < P; ++i) bytes[static_cast<std::size_t>(i)] = 4 * (i + 1);
    std::vector<float> vmine(static_cast<std::size_t>(r + 1), val(r, 3)),
        vall(static_cast<std::size_t>(P * (P + 1) / 2));
    c->all_gather_v(std::as_bytes(std::span(vmine)), bytes, std::as_writable_bytes(std::span(vall)));
    std::vector<float> send(static_cast<std::size_t>(3 * P)), recv(send.size());
    for (std::size_t i = 0; i < send.size(); ++i) send[i] = val(r, static_cast<std::int64_t>(i));
    c->all_to_all(std::as_bytes(std::span(send)), std::as_writable_bytes(std::span(recv)));
    std::vector<std::int64_t> counts(static_cast<std::size_t>(P));
    for (int i = 0; i < P; ++i) counts[static_cast<std::size_t>(i)] = i + 2;
    std::vector<float> rs_send(static_cast<std::size_t>(std::accumulate(counts.begin(), counts.end(), 0LL)));
    for (std::size_t i = 0; i < rs_send.size(); ++i) rs_send[i] = val(r, static_cast<std::int64_t>(i)) / 7.0f;
    std::vector<float> rs(static_cast<std::size_t>(counts[static_cast<std::size_t>(r)]));
    c->reduce_scatter(rs_send.data(), counts, rs.data());
    for (const auto* v : {&all, &vall, &recv, &rs})
      got[static_cast<std::size_t>(k)].insert(got[static_cast<std::size_t>(k)].end(), v->begin(), v->end());
    ++k;
  }
  EXPECT_EQ(std::memcmp(got[0].data(), got[1].data(), got[0].size() * sizeof(float)), 0);
  EXPECT_EQ(b.over.counters().bytes_sent, b.mpi.counters().bytes_sent);
  EXPECT_EQ(b.over.counters().messages_sent, b.mpi.counters().messages_sent);
  EXPECT_EQ(b.group->collectives, P > 0 ? 3 : 0) << "all_gather, all_to_all, reduce_scatter: the group's own";
  std::vector<float> data(4), want(4, 0.0f);
  for (int i = 0; i < 4; ++i) data[static_cast<std::size_t>(i)] = val(r, i) / 3.0f;
  for (int q = 0; q < P; ++q)
    for (int i = 0; i < 4; ++i) want[static_cast<std::size_t>(i)] += val(q, i) / 3.0f;
  b.over.all_reduce_sum(data.data(), 4);
  EXPECT_EQ(std::memcmp(data.data(), want.data(), sizeof(float) * 4), 0);
}

// Point-to-point on two channels with the same tag, received in the other order: a channel's
// messages never match another's (tag namespaces).
TEST(CommTransport, ChannelsNeverCross) {
  Both b;
  const int P = b.over.size(), r = b.over.rank();
  const Communicator a = b.over.channel(), c = b.over.channel();
  const int right = (r + 1) % P, left = (r + P - 1) % P;
  ByteBuffer x(8, std::byte{1}), y(8, std::byte{2});
  RequestSet set;
  const std::size_t in_c = set.add(c.irecv(ByteBuffer(8), left, 5));
  const std::size_t in_a = set.add(a.irecv(ByteBuffer(8), left, 5));
  set.add(a.isend(std::move(x), right, 5));
  set.add(c.isend(std::move(y), right, 5));
  EXPECT_FALSE(set.progress()) << "a transport cannot poll: progress() is false until waited";
  set.wait_all();
  EXPECT_EQ(set.take(in_a)[0], std::byte{1});
  EXPECT_EQ(set.take(in_c)[0], std::byte{2});
  EXPECT_EQ(a.counters().messages_sent, b.over.counters().messages_sent) << "channels share counters";
}

// split by parity: the sub-group's collectives run point-to-point and equal MPI's split.
TEST(CommTransport, SplitSubgroupsEqualMpi) {
  Both b;
  const int r = b.mpi.rank();
  const Communicator sm = b.mpi.split(r % 2, -r), so = b.over.split(r % 2, -r);
  ASSERT_EQ(sm.size(), so.size());
  EXPECT_EQ(sm.rank(), so.rank());
  const int Q = so.size();
  std::vector<float> send(static_cast<std::size_t>(2 * Q)), rm(send.size()), ro(send.size());
  for (std::size_t i = 0; i < send.size(); ++i) send[i] = val(r, static_cast<std::int64_t>(i));
  const int before = b.group->collectives;
  sm.all_to_all(std::as_bytes(std::span(send)), std::as_writable_bytes(std::span(rm)));
  so.all_to_all(std::as_bytes(std::span(send)), std::as_writable_bytes(std::span(ro)));
  EXPECT_EQ(rm, ro);
  if (b.mpi.size() > 1) {
    EXPECT_EQ(b.group->collectives, before) << "a proper sub-group runs point-to-point";
  }
  EXPECT_EQ(so.exchange({r}, "sub"), sm.exchange({r}, "sub"));
}

TEST(CommTransport, SameErrorOnEveryRank) {
  Both b;
  const int r = b.over.rank();
  try {
    b.over.agree_verdict(r != b.over.size() - 1, "bad on the last rank", ErrorKind::InvalidArgument);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    EXPECT_EQ(e.message(), "rank " + std::to_string(b.over.size() - 1) + ": bad on the last rank");
  }
  if (b.over.size() > 1) {
    try {
      b.over.roll_call(r == 0 ? "one call" : "another call");
      FAIL() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("ranks are in different collective calls"), std::string::npos);
    }
  }
}

// DistAttention over the transport: the same output, lse and gradients, bit for bit, and the same
// bytes as over MPI (burst on the double ring's channels; usp's sub-groups at even P).
TEST(CommTransport, DistAttentionEqualsMpi) {
  Both b;
  const int P = b.mpi.size();
  for (StrategyKind s :
       {StrategyKind::Burst, StrategyKind::Ring, StrategyKind::AllGather, StrategyKind::Usp}) {
    if (s == StrategyKind::Usp && P % 2 != 0) continue;
    DistConfig cfg;
    cfg.strategy = s;
    cfg.num_threads = 1;
    if (s == StrategyKind::Usp) cfg.ulysses_degree = 2;
    if (s == StrategyKind::AllGather) cfg.layout = LayoutKind::Contiguous;
    const std::int64_t B = 1, H = 4, H_kv = 2, D = 16, S = 24 * P;
    const ProblemShape shape{B, S, H, H_kv, D};
    std::vector<std::vector<float>> results;
    std::vector<std::int64_t> bytes;
    for (const Communicator* c : {&b.mpi, &b.over}) {
      DistAttention attn(*c, cfg, shape, Mask::causal_mask());
      const std::int64_t L = attn.local_length();
      const Tensor q = test::random_tensor({B, L, H, D}, 11 + static_cast<std::uint64_t>(c->rank()));
      const Tensor k = test::random_tensor({B, L, H_kv, D}, 22 + static_cast<std::uint64_t>(c->rank()));
      const Tensor v = test::random_tensor({B, L, H_kv, D}, 33 + static_cast<std::uint64_t>(c->rank()));
      const Tensor dout = test::random_tensor({B, L, H, D}, 44 + static_cast<std::uint64_t>(c->rank()));
      Tensor out({B, L, H, D}), lse({B, H, L}), dq({B, L, H, D}), dk({B, L, H_kv, D}), dv({B, L, H_kv, D});
      attn.forward(q.view(), k.view(), v.view(), out.view(), lse.view());
      std::int64_t sent = attn.last_stats().bytes_sent;
      attn.backward(dout.view(), q.view(), k.view(), v.view(), out.view(), lse.view(), dq.view(), dk.view(),
                    dv.view());
      sent += attn.last_stats().bytes_sent;
      std::vector<float> all;
      for (const Tensor* t : {&out, &lse, &dq, &dk, &dv})
        all.insert(all.end(), t->vec().begin(), t->vec().end());
      results.push_back(std::move(all));
      bytes.push_back(sent);
    }
    EXPECT_EQ(std::memcmp(results[0].data(), results[1].data(), results[0].size() * sizeof(float)), 0)
        << "strategy " << to_string(s);
    EXPECT_EQ(bytes[0], bytes[1]) << "strategy " << to_string(s);
  }
}

}  // namespace
}  // namespace burst
