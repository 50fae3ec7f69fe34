// Tests of burst/comm.h under mpiexec -n 1..4: every collective against values each rank can
// compute on its own, ring send/recv with RAII buffers, counters against the documented
// convention, agreement helpers (every rank throws the same Error, never a hang).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "burst/comm.h"
#include "burst/comm_interop.h"
#include "burst/error.h"

namespace burst {
namespace {

// Value that rank r puts at index i: distinct across (r, i), exactly representable in fp32.
float val(int r, std::int64_t i) { return static_cast<float>(r * 1000 + i); }

// fp32 values as a message and back (the communicator moves bytes).
ByteBuffer bytes_of(const std::vector<float>& v) {
  ByteBuffer b(v.size() * sizeof(float));
  if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}
std::vector<float> floats_of(const ByteBuffer& b) {
  std::vector<float> v(b.size() / sizeof(float));
  if (!v.empty()) std::memcpy(v.data(), b.data(), v.size() * sizeof(float));
  return v;
}
ByteBuffer floats_buffer(std::size_t n) { return ByteBuffer(n * sizeof(float)); }
template <typename T>
std::span<const std::byte> send_span(const std::vector<T>& v) {
  return std::as_bytes(std::span(v));
}
template <typename T>
std::span<std::byte> recv_span(std::vector<T>& v) {
  return std::as_writable_bytes(std::span(v));
}

TEST(Comm, WorldRankSize) {
  const Communicator c = Communicator::world();
  EXPECT_GE(c.rank(), 0);
  EXPECT_LT(c.rank(), c.size());
  EXPECT_EQ(c.all_reduce_sum(std::int64_t{1}), c.size());
}

TEST(Comm, RingSendRecvOwnsBuffers) {
  const Communicator c = Communicator::world();
  const int P = c.size(), r = c.rank();
  c.reset_counters();
  for (std::int64_t n : {std::int64_t{0}, std::int64_t{1}, std::int64_t{1000}, std::int64_t{70000}}) {
    std::vector<float> out(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) out[static_cast<std::size_t>(i)] = val(r, i);
    RequestSet set;
    const auto is = set.add(c.isend(bytes_of(out), (r + 1) % P, 7));
    const auto ir = set.add(c.irecv(floats_buffer(static_cast<std::size_t>(n)), (r + P - 1) % P, 7));
    while (!set.progress()) {}
    set.wait_all();
    const auto sent = floats_of(set.take(is));  // the send buffer comes back intact
    const auto got = floats_of(set.take(ir));
    ASSERT_EQ(static_cast<std::int64_t>(got.size()), n);
    for (std::int64_t i = 0; i < n; ++i) {
      EXPECT_EQ(got[static_cast<std::size_t>(i)], val((r + P - 1) % P, i));
      EXPECT_EQ(sent[static_cast<std::size_t>(i)], val(r, i));
    }
  }
  EXPECT_EQ(c.counters().bytes_sent, 4 * (0 + 1 + 1000 + 70000));
  EXPECT_EQ(c.counters().messages_sent, 4);
}

// Messages are bytes: odd sizes (a bf16 payload of odd length, a 3-byte tail) arrive exactly and
// are counted exactly, point to point and in the collectives.
TEST(Comm, OddByteCountsArriveAndCountExactly) {
  const Communicator c = Communicator::world();
  const int P = c.size(), r = c.rank();
  auto pattern = [](int rank, std::size_t n) {
    ByteBuffer b(n);
    for (std::size_t i = 0; i < n; ++i)
      b[i] = static_cast<std::byte>((static_cast<std::size_t>(rank) * 31 + i) & 0xffu);
    return b;
  };
  c.reset_counters();
  RequestSet set;
  for (const std::size_t n : {std::size_t{2}, std::size_t{3}, std::size_t{1001}}) {
    const auto ir = set.add(c.irecv(ByteBuffer(n), (r + P - 1) % P, 5));
    set.add(c.isend(pattern(r, n), (r + 1) % P, 5));
    set.wait_all();
    EXPECT_EQ(set.take(ir), pattern((r + P - 1) % P, n));
    set.clear();
  }
  EXPECT_EQ(c.counters().bytes_sent, 2 + 3 + 1001);
  std::vector<std::int64_t> sizes;
  std::int64_t total = 0;
  for (int q = 0; q < P; ++q) total += sizes.emplace_back(2 * q + 1);  // rank q sends 2q + 1 bytes
  ByteBuffer all(static_cast<std::size_t>(total));
  c.reset_counters();
  c.all_gather_v(pattern(r, static_cast<std::size_t>(2 * r + 1)), sizes, all);
  EXPECT_EQ(c.counters().bytes_sent, (2 * r + 1) * (P - 1));
  std::size_t at = 0;
  for (int q = 0; q < P; ++q) {
    const ByteBuffer want = pattern(q, static_cast<std::size_t>(2 * q + 1));
    EXPECT_TRUE(std::equal(want.begin(), want.end(), all.begin() + static_cast<std::ptrdiff_t>(at)))
        << "rank " << q;
    at += want.size();
  }
}

TEST(Comm, ChannelsDoNotMatchAndShareCounters) {
  const Communicator c = Communicator::world();
  const Communicator ch = c.channel();
  const int P = c.size(), r = c.rank();
  c.reset_counters();
  // Same tag on both channels, receives posted in the opposite order: must still match by channel.
  RequestSet set;
  const auto a = set.add(ch.irecv(floats_buffer(2), (r + P - 1) % P, 1));
  const auto b = set.add(c.irecv(floats_buffer(3), (r + P - 1) % P, 1));
  set.add(c.isend(bytes_of(std::vector<float>(3, 1.0f)), (r + 1) % P, 1));
  set.add(ch.isend(bytes_of(std::vector<float>(2, 2.0f)), (r + 1) % P, 1));
  set.wait_all();
  EXPECT_EQ(floats_of(set.take(a)), std::vector<float>(2, 2.0f));
  EXPECT_EQ(floats_of(set.take(b)), std::vector<float>(3, 1.0f));
  EXPECT_EQ(c.counters().bytes_sent, 4 * 5);
  EXPECT_EQ(ch.counters().bytes_sent, 4 * 5);
}

TEST(Comm, AllGatherAndV) {
  const Communicator c = Communicator::world();
  const int P = c.size(), r = c.rank();
  c.reset_counters();
  std::vector<float> mine = {val(r, 0), val(r, 1), val(r, 2)};
  std::vector<float> all(static_cast<std::size_t>(3 * P));
  c.all_gather(send_span(mine), recv_span(all));
  for (int q = 0; q < P; ++q)
    for (int i = 0; i < 3; ++i) EXPECT_EQ(all[static_cast<std::size_t>(3 * q + i)], val(q, i));
  EXPECT_EQ(c.counters().bytes_sent, 4 * 3 * (P - 1));

  std::vector<std::int64_t> counts(static_cast<std::size_t>(P));
  for (int q = 0; q < P; ++q) counts[static_cast<std::size_t>(q)] = q + 1;  // rank q sends q+1
  std::vector<float> v(static_cast<std::size_t>(r + 1));
  for (int i = 0; i <= r; ++i) v[static_cast<std::size_t>(i)] = val(r, i);
  std::vector<float> gathered(static_cast<std::size_t>(P * (P + 1) / 2));
  for (std::int64_t& n : counts) n *= 4;  // bytes
  c.all_gather_v(send_span(v), counts, recv_span(gathered));
  std::size_t at = 0;
  for (int q = 0; q < P; ++q)
    for (int i = 0; i <= q; ++i) EXPECT_EQ(gathered[at++], val(q, i));
}

TEST(Comm, AllToAllAndV) {
  const Communicator c = Communicator::world();
  const int P = c.size(), r = c.rank();
  std::vector<float> send(static_cast<std::size_t>(2 * P)), recv(static_cast<std::size_t>(2 * P));
  for (int q = 0; q < P; ++q)
    for (int i = 0; i < 2; ++i) send[static_cast<std::size_t>(2 * q + i)] = val(r, 10 * q + i);
  c.all_to_all(send_span(send), recv_span(recv));
  for (int q = 0; q < P; ++q)
    for (int i = 0; i < 2; ++i) EXPECT_EQ(recv[static_cast<std::size_t>(2 * q + i)], val(q, 10 * r + i));

  // v: rank r sends (q + 1) values to rank q; receives (r + 1) from each.
  std::vector<std::int64_t> sc(static_cast<std::size_t>(P)), rc(static_cast<std::size_t>(P), r + 1);
  std::vector<float> sv;
  for (int q = 0; q < P; ++q) {
    sc[static_cast<std::size_t>(q)] = q + 1;
    for (int i = 0; i <= q; ++i) sv.push_back(val(r, 10 * q + i));
  }
  std::vector<float> rv(static_cast<std::size_t>(P * (r + 1)));
  c.reset_counters();
  std::vector<std::int64_t> sb = sc, rb = rc;  // bytes
  for (std::int64_t& n : sb) n *= 4;
  for (std::int64_t& n : rb) n *= 4;
  c.all_to_all_v(send_span(sv), sb, recv_span(rv), rb);
  for (int q = 0; q < P; ++q)
    for (int i = 0; i <= r; ++i) EXPECT_EQ(rv[static_cast<std::size_t>(q * (r + 1) + i)], val(q, 10 * r + i));
  const std::int64_t expect = 4 * (std::accumulate(sc.begin(), sc.end(), std::int64_t{0}) - (r + 1));
  EXPECT_EQ(c.counters().bytes_sent, expect);
}

TEST(Comm, ReduceScatterAndAllReduce) {
  const Communicator c = Communicator::world();
  const int P = c.size(), r = c.rank();
  std::vector<std::int64_t> counts(static_cast<std::size_t>(P));
  std::int64_t total = 0;
  for (int q = 0; q < P; ++q) total += (counts[static_cast<std::size_t>(q)] = 2 + q);
  std::vector<float> send(static_cast<std::size_t>(total));
  for (std::int64_t i = 0; i < total; ++i) send[static_cast<std::size_t>(i)] = val(r, i);
  std::vector<float> recv(static_cast<std::size_t>(2 + r));
  c.reduce_scatter(send.data(), counts, recv.data());
  std::int64_t off = 0;
  for (int q = 0; q < r; ++q) off += counts[static_cast<std::size_t>(q)];
  for (int i = 0; i < 2 + r; ++i) {
    double expect = 0;
    for (int q = 0; q < P; ++q) expect += val(q, off + i);
    EXPECT_EQ(recv[static_cast<std::size_t>(i)], static_cast<float>(expect));
  }
  std::vector<float> x = {static_cast<float>(r), 1.0f};
  c.all_reduce_sum(x.data(), 2);
  EXPECT_EQ(x[0], static_cast<float>(P * (P - 1) / 2));
  EXPECT_EQ(x[1], static_cast<float>(P));
  EXPECT_EQ(c.all_reduce_max(static_cast<double>(r)), static_cast<double>(P - 1));
  EXPECT_EQ(c.all_reduce_min(std::int64_t{r}), 0);
}

// The sum is taken in rank order in fp32 (reproducible bit for bit, whatever the arrival order),
// and the reused scratch of a bigger call leaves a smaller one's result untouched.
TEST(Comm, ReduceScatterSumsInRankOrder) {
  const Communicator c = Communicator::world();
  const int P = c.size(), r = c.rank();
  for (const std::int64_t n : {std::int64_t{1000}, std::int64_t{3}}) {
    const std::vector<std::int64_t> counts(static_cast<std::size_t>(P), n);
    auto value = [](int rank, std::int64_t i) {
      return 0.1f * static_cast<float>(rank + 1) + 1e-7f * static_cast<float>(i);
    };
    std::vector<float> send(static_cast<std::size_t>(n * P));
    for (std::int64_t i = 0; i < n * P; ++i) send[static_cast<std::size_t>(i)] = value(r, i);
    std::vector<float> recv(static_cast<std::size_t>(n), -1.0f);
    c.reduce_scatter(send.data(), counts, recv.data());
    for (std::int64_t i = 0; i < n; ++i) {
      float expect = value(0, r * n + i);
      for (int q = 1; q < P; ++q) expect += value(q, r * n + i);
      ASSERT_EQ(recv[static_cast<std::size_t>(i)], expect) << "element " << i << " of " << n;
    }
  }
}

TEST(Comm, AgreeThrowsSameErrorOnEveryRank) {
  const Communicator c = Communicator::world();
  EXPECT_NO_THROW(c.agree(0xdeadbeefcafeULL, "shape"));
  // Differs only on the last rank (with P = 1 nothing differs).
  const std::uint64_t fp = (c.rank() == c.size() - 1 && c.size() > 1) ? 2 : 1;
  if (c.size() > 1) {
    try {
      c.agree(fp, "mask");
      ADD_FAILURE() << "agree did not throw";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
      EXPECT_NE(e.message().find("mask differs between ranks"), std::string::npos);
    }
  }
  // High-half difference (values equal modulo 2^32 must still be told apart).
  const std::uint64_t fp2 = (c.rank() == 0 && c.size() > 1) ? (1ULL << 40) : 0;
  if (c.size() > 1) { EXPECT_THROW(c.agree(fp2, "x"), Error); }
}

TEST(Comm, AgreeVerdictBroadcastsLowestFailingMessage) {
  const Communicator c = Communicator::world();
  EXPECT_NO_THROW(c.agree_verdict(true, "", ErrorKind::Internal));
  const int bad = c.size() - 1;  // only the last rank fails locally
  try {
    c.agree_on([&] { BURST_CHECK(c.rank() != bad, Unsupported, "local check failed with value ", 42); });
    ADD_FAILURE() << "agree_on did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
    EXPECT_EQ(e.message(), "rank " + std::to_string(bad) + ": local check failed with value 42");
  }
}

TEST(Comm, NodeTopologyOverrideAndDiscovery) {
  const Communicator c = Communicator::world();
  const int P = c.size();
  const NodeTopology flat = c.node_topology(1);
  EXPECT_EQ(flat.nodes, P);
  EXPECT_EQ(flat.local_rank, 0);
  if (P % 2 == 0) {
    const NodeTopology t = c.node_topology(2);
    EXPECT_EQ(t.nodes, P / 2);
    EXPECT_EQ(t.node * 2 + t.local_rank, c.rank());
  } else if (P > 1) {
    EXPECT_THROW(c.node_topology(2), Error);
  }
  const NodeTopology d = c.node_topology(0);  // one machine: one node
  EXPECT_EQ(d.nodes, 1);
  EXPECT_EQ(d.ranks_per_node, P);
  EXPECT_EQ(c.split_shared().size(), P);
}

TEST(Comm, FromMpiAndFortranHandleDupTheCallersCommunicator) {
  MPI_Comm half = MPI_COMM_NULL;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
  {
    const Communicator a = from_mpi(half);
    int size = 0;
    MPI_Comm_size(half, &size);
    EXPECT_EQ(a.size(), size);
    EXPECT_EQ(a.rank(), rank / 2);
    // The dup is independent: a message on it is not seen on the caller's communicator.
    RequestSet set;
    set.add(a.isend(bytes_of({5.0f}), (a.rank() + 1) % a.size(), 3));
    const auto i = set.add(a.irecv(floats_buffer(1), (a.rank() + a.size() - 1) % a.size(), 3));
    set.wait_all();
    EXPECT_EQ(floats_of(set.take(i))[0], 5.0f);
    int flag = 1;
    MPI_Iprobe(MPI_ANY_SOURCE, 3, half, &flag, MPI_STATUS_IGNORE);
    EXPECT_EQ(flag, 0);
  }
  MPI_Comm_free(&half);
  EXPECT_THROW(Communicator::from_fortran(static_cast<std::int64_t>(MPI_Comm_c2f(MPI_COMM_NULL))), Error);
}

// The communication watchdog's setting (what it does when it fires — abort the job — is tested
// on the emulated cluster: tests/multinode_faults.sh).
TEST(Comm, WatchdogTimeoutIsSharedByChannelsAndCopiedBySplits) {
  const Communicator c = Communicator::world();
  EXPECT_EQ(c.timeout(), 300.0);  // the documented default
  const Communicator ch = c.channel();
  const Communicator sub = c.split_channel(0, c.rank());
  const Communicator own = c.split(0, c.rank());
  c.set_timeout(7.5);
  EXPECT_EQ(ch.timeout(), 7.5);  // one setting per logical communicator
  EXPECT_EQ(sub.timeout(), 7.5);
  EXPECT_EQ(own.timeout(), 300.0);  // split: a copy taken at the split
  EXPECT_EQ(c.split(0, c.rank()).timeout(), 7.5);
  EXPECT_EQ(c.split_shared().timeout(), 7.5);
  for (double bad : {-1.0, std::nan(""), HUGE_VAL}) {
    try {
      c.set_timeout(bad);
      ADD_FAILURE() << "timeout " << bad << " accepted";
    } catch (const Error& e) { EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument); }
  }
  EXPECT_EQ(c.timeout(), 7.5);
}

// A peer that is late (but within the timeout) is waited for, by the watched poll and by the
// unwatched MPI_Waitall (timeout 0), for point-to-point and for collectives.
TEST(Comm, WatchedWaitsCompleteWhenAPeerIsLate) {
  const Communicator c = Communicator::world();
  const int P = c.size(), r = c.rank();
  for (double timeout : {30.0, 0.0}) {
    c.set_timeout(timeout);
    c.set_activity("test late peer");
    c.set_step(1, 2);
    if (r == 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    RequestSet set;
    const std::size_t in = set.add(c.irecv(floats_buffer(5), (r + P - 1) % P, 3));
    set.add(c.isend(bytes_of(std::vector<float>(5, static_cast<float>(r))), (r + 1) % P, 3));
    set.wait_all();
    EXPECT_EQ(floats_of(set.take(in)), std::vector<float>(5, static_cast<float>((r + P - 1) % P)));
    if (r == P - 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_EQ(c.all_reduce_sum(std::int64_t{r}), std::int64_t{P} * (P - 1) / 2);
    Request single = c.irecv(floats_buffer(1), (r + P - 1) % P, 4);
    Request out = c.isend(bytes_of({2.0f}), (r + 1) % P, 4);
    EXPECT_EQ(floats_of(single.take()), std::vector<float>(1, 2.0f));
    out.wait();
    c.barrier();
  }
  c.set_timeout(300);
}

// Control exchanges (the watchdog can name the ranks that never arrive): every rank's values in
// rank order; a rank at another call makes every rank throw the same error naming each call,
// and the communicator stays usable.
TEST(Comm, ExchangeGathersValuesAndNamesRanksAtOtherCalls) {
  const Communicator c = Communicator::world();
  const int P = c.size(), r = c.rank();
  const auto all = c.exchange({r, 10 * r, -1}, "test exchange");
  ASSERT_EQ(all.size(), static_cast<std::size_t>(3 * P));
  for (int q = 0; q < P; ++q) {
    EXPECT_EQ(all[static_cast<std::size_t>(3 * q)], q);
    EXPECT_EQ(all[static_cast<std::size_t>(3 * q + 1)], 10 * q);
    EXPECT_EQ(all[static_cast<std::size_t>(3 * q + 2)], -1);
  }
  EXPECT_NO_THROW(c.roll_call("test roll call"));
  EXPECT_THROW(c.exchange(std::vector<std::int64_t>(7, 0), "too many"), Error);
  if (P > 1) {
    c.set_activity(r == P - 1 ? "decoding" : "forward");
    std::string first;
    for (int round = 0; round < 2; ++round) {  // another call name, then another value count
      try {
        if (round == 0)
          c.exchange({1}, r == P - 1 ? "kv decode agreement" : "forward agreement");
        else
          c.exchange(r == P - 1 ? std::vector<std::int64_t>{1, 2} : std::vector<std::int64_t>{1}, "counts");
        ADD_FAILURE() << "mismatched calls accepted";
      } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
        const std::string m = e.message();
        EXPECT_NE(m.find("ranks are in different collective calls"), std::string::npos) << m;
        if (round == 0) {
          EXPECT_NE(m.find("rank 0: 'forward agreement' during 'forward'"), std::string::npos) << m;
          EXPECT_NE(m.find("rank " + std::to_string(P - 1) + ": 'kv decode agreement' during 'decoding'"),
                    std::string::npos)
              << m;
        }
        const auto h = static_cast<std::int64_t>(std::hash<std::string>{}(m)&0x7fffffffffffffffULL);
        EXPECT_EQ(c.all_reduce_min(h), c.all_reduce_max(h)) << "ranks threw different messages: " << m;
      }
    }
  }
  EXPECT_EQ(c.all_reduce_sum(std::int64_t{1}), P);
  EXPECT_EQ(c.all_reduce_max(static_cast<double>(r) + 0.5), P - 0.5);
}

TEST(Comm, AllGatherBytesKeepsEveryRanksLength) {
  const Communicator c = Communicator::world();
  const std::string mine(static_cast<std::size_t>(3 * c.rank()), static_cast<char>('a' + c.rank()));
  const auto all = c.all_gather_bytes(mine, "test bytes");
  ASSERT_EQ(all.size(), static_cast<std::size_t>(c.size()));
  for (int q = 0; q < c.size(); ++q)
    EXPECT_EQ(all[static_cast<std::size_t>(q)],
              std::string(static_cast<std::size_t>(3 * q), static_cast<char>('a' + q)));
}

TEST(Comm, PayloadTagsStayBelowTheControlTag) {
  const Communicator c = Communicator::world();
  EXPECT_THROW(c.isend(ByteBuffer(1), 0, 32767), Error);
  EXPECT_THROW(c.irecv(ByteBuffer(1), 0, -1), Error);
}

TEST(Comm, AgreeNamesTheLowestRankThatDiffers) {
  const Communicator c = Communicator::world();
  if (c.size() < 2) return;
  try {
    c.agree(c.rank() == c.size() - 1 ? 5 : 4, "the problem shape");
    ADD_FAILURE() << "agree did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "the problem shape differs between ranks (rank " + std::to_string(c.size() - 1) +
                               " disagrees with rank 0); every rank must pass identical values");
  }
}

TEST(Comm, SplitGroups) {
  const Communicator c = Communicator::world();
  const Communicator half = c.split(c.rank() % 2, c.rank());
  EXPECT_EQ(half.size(), (c.size() + 1 - c.rank() % 2) / 2);
  EXPECT_EQ(half.rank(), c.rank() / 2);
}

}  // namespace
}  // namespace burst
