// Communicator collectives over MPI (burst/comm.h): all-gather, all-to-all, reduce-scatter,
// all-reduce, the scalar reductions and exchanges (control exchanges, comm_mpi.cc), barrier,
// agree / agree_verdict and abort. Each MPI collective is non-blocking and completed under the
// watchdog (collective below); a Communicator over a Transport forwards to comm_transport.cc.
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "burst/comm.h"
#include "burst/error.h"
#include "comm_mpi_internal.h"

namespace burst {

using control::kControlValues;

namespace {

std::vector<int> displacements(const std::vector<int>& counts) {
  std::vector<int> displ(counts.size(), 0);
  long long acc = 0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    BURST_CHECK(acc <= INT_MAX, Unsupported, "total element count ", acc, " exceeds MPI's int limit");
    displ[i] = static_cast<int>(acc);
    acc += counts[i];
  }
  return displ;
}

std::vector<int> int_counts(const std::vector<std::int64_t>& counts, int P, const char* what) {
  BURST_CHECK(static_cast<int>(counts.size()) == P, InvalidArgument, what, ": ", counts.size(),
              " counts for ", P, " ranks");
  std::vector<int> out(counts.size());
  for (std::size_t i = 0; i < counts.size(); ++i) out[i] = to_int_count(counts[i], what);
  return out;
}

constexpr std::int64_t kF32 = 4;

int off_node_peers(const Communicator::Impl& c) {
  int n = 0;
  for (int r = 0; r < c.size; ++r) n += off_node(c, r) ? 1 : 0;
  return n;
}

// A non-blocking collective started by `start` (its MPI return code), completed under the
// watchdog: every rank of the communicator must join it.
template <typename Start>
void collective(const Communicator::Impl& c, const char* call, Start&& start) {
  MPI_Request request = MPI_REQUEST_NULL;
  check_mpi(start(&request), call);
  check_mpi(wait_watched(c, &request, 1, call,
                         [&](int) {
                           return others(c.size) +
                                  "; which of them never arrived is unknown (an MPI collective does "
                                  "not tell; the last exchange every rank joined: " +
                                  (c.watch->last_roll_call.empty() ? std::string("none")
                                                                   : c.watch->last_roll_call) +
                                  ")";
                         }),
            call);
}

}  // namespace

void Communicator::all_gather(std::span<const std::byte> send, std::span<std::byte> recv) const {
  const auto bytes = static_cast<std::int64_t>(send.size());
  BURST_CHECK(static_cast<std::int64_t>(recv.size()) == bytes * size(), Internal, "all_gather: ", recv.size(),
              " B to receive ", size(), " blocks of ", bytes, " B");
  const int n = to_int_count(bytes, "all_gather");
  if (impl_->t)
    return transport::all_gather_v(
        *impl_->t, send, std::vector<std::int64_t>(static_cast<std::size_t>(size()), bytes), recv, true);
  collective(*impl_, "MPI_Allgather", [&](MPI_Request* rq) {
    return MPI_Iallgather(send.data(), n, MPI_BYTE, recv.data(), n, MPI_BYTE, impl_->comm, rq);
  });
  impl_->counters->bytes_sent += bytes * (size() - 1);
  impl_->counters->bytes_sent_inter_node += bytes * off_node_peers(*impl_);
  impl_->counters->messages_sent += size() - 1;
}

void Communicator::all_gather_v(std::span<const std::byte> send, const std::vector<std::int64_t>& bytes,
                                std::span<std::byte> recv) const {
  const auto n = int_counts(bytes, size(), "all_gather_v");
  const auto displ = displacements(n);
  const std::int64_t mine = bytes[static_cast<std::size_t>(rank())];
  BURST_CHECK(static_cast<std::int64_t>(send.size()) == mine &&
                  static_cast<std::int64_t>(recv.size()) ==
                      std::accumulate(bytes.begin(), bytes.end(), std::int64_t{0}),
              Internal, "all_gather_v: send ", send.size(), " B / recv ", recv.size(),
              " B do not match the sizes");
  if (impl_->t) return transport::all_gather_v(*impl_->t, send, bytes, recv, false);
  collective(*impl_, "MPI_Allgatherv", [&](MPI_Request* rq) {
    return MPI_Iallgatherv(send.data(), n[static_cast<std::size_t>(rank())], MPI_BYTE, recv.data(), n.data(),
                           displ.data(), MPI_BYTE, impl_->comm, rq);
  });
  impl_->counters->bytes_sent += mine * (size() - 1);
  impl_->counters->bytes_sent_inter_node += mine * off_node_peers(*impl_);
  impl_->counters->messages_sent += size() - 1;
}

void Communicator::all_to_all(std::span<const std::byte> send, std::span<std::byte> recv) const {
  const auto total = static_cast<std::int64_t>(send.size());
  BURST_CHECK(total % size() == 0 && recv.size() == send.size(), Internal, "all_to_all: send ", send.size(),
              " B / recv ", recv.size(), " B for ", size(), " equal blocks");
  const std::int64_t block = total / size();
  const int n = to_int_count(block, "all_to_all");
  if (impl_->t) {
    const std::vector<std::int64_t> blocks(static_cast<std::size_t>(size()), block);
    return transport::all_to_all_v(*impl_->t, send, blocks, recv, blocks);
  }
  collective(*impl_, "MPI_Alltoall", [&](MPI_Request* rq) {
    return MPI_Ialltoall(send.data(), n, MPI_BYTE, recv.data(), n, MPI_BYTE, impl_->comm, rq);
  });
  impl_->counters->bytes_sent += block * (size() - 1);
  impl_->counters->bytes_sent_inter_node += block * off_node_peers(*impl_);
  impl_->counters->messages_sent += size() - 1;
}

void Communicator::all_to_all_v(std::span<const std::byte> send, const std::vector<std::int64_t>& send_bytes,
                                std::span<std::byte> recv,
                                const std::vector<std::int64_t>& recv_bytes) const {
  const auto sn = int_counts(send_bytes, size(), "all_to_all_v send");
  const auto rn = int_counts(recv_bytes, size(), "all_to_all_v recv");
  const auto sd = displacements(sn), rd = displacements(rn);
  BURST_CHECK(static_cast<std::int64_t>(send.size()) ==
                      std::accumulate(send_bytes.begin(), send_bytes.end(), std::int64_t{0}) &&
                  static_cast<std::int64_t>(recv.size()) ==
                      std::accumulate(recv_bytes.begin(), recv_bytes.end(), std::int64_t{0}),
              Internal, "all_to_all_v: send ", send.size(), " B / recv ", recv.size(),
              " B do not match the sizes");
  if (impl_->t) return transport::all_to_all_v(*impl_->t, send, send_bytes, recv, recv_bytes);
  collective(*impl_, "MPI_Alltoallv", [&](MPI_Request* rq) {
    return MPI_Ialltoallv(send.data(), sn.data(), sd.data(), MPI_BYTE, recv.data(), rn.data(), rd.data(),
                          MPI_BYTE, impl_->comm, rq);
  });
  for (int r = 0; r < size(); ++r) {
    const std::int64_t b = send_bytes[static_cast<std::size_t>(r)];
    if (r == rank() || b == 0) continue;
    impl_->counters->bytes_sent += b;
    if (off_node(*impl_, r)) impl_->counters->bytes_sent_inter_node += b;
    impl_->counters->messages_sent += 1;
  }
}

void Communicator::reduce_scatter(const float* send, const std::vector<std::int64_t>& counts,
                                  float* recv) const {
  // An all-to-all of the blocks, then each rank sums the P blocks it received in rank order:
  // the bandwidth-optimal volume ((P−1)/P of the buffer leaves each rank), a result independent
  // of arrival order, and the reduction spread over all ranks. Open MPI's MPI_Ireduce_scatter
  // (libnbc) instead reduces whole buffers up a binomial tree to rank 0 and scatters from there:
  // 4 MiB blocks on 4 ranks of one node took 33 ms that way (docs/cost_model.md § Calibration).
  const auto sn = int_counts(counts, size(), "reduce_scatter");
  if (impl_->t) return transport::reduce_scatter(*impl_->t, send, counts, recv);
  const int me = rank(), P = size();
  const std::int64_t mine = counts[static_cast<std::size_t>(me)];
  std::vector<int> rn(static_cast<std::size_t>(P), to_int_count(mine, "reduce_scatter"));
  to_int_count(mine * P, "reduce_scatter (received blocks)");
  const auto sd = displacements(sn), rd = displacements(rn);
  std::vector<float>& got = impl_->reduce_scratch;
  if (static_cast<std::int64_t>(got.size()) < mine * P) got.resize(static_cast<std::size_t>(mine * P));
  collective(*impl_, "MPI_Reduce_scatter (MPI_Alltoallv)", [&](MPI_Request* rq) {
    return MPI_Ialltoallv(send, sn.data(), sd.data(), MPI_FLOAT, got.data(), rn.data(), rd.data(), MPI_FLOAT,
                          impl_->comm, rq);
  });
  std::copy(got.data(), got.data() + mine, recv);
  for (int r = 1; r < P; ++r) {
    const float* block = got.data() + static_cast<std::ptrdiff_t>(r) * mine;
    for (std::int64_t i = 0; i < mine; ++i) recv[i] += block[i];
  }
  const std::int64_t total = std::accumulate(counts.begin(), counts.end(), std::int64_t{0});
  impl_->counters->bytes_sent += kF32 * (total - mine);
  for (int r = 0; r < size(); ++r)
    if (off_node(*impl_, r))
      impl_->counters->bytes_sent_inter_node += kF32 * counts[static_cast<std::size_t>(r)];
  impl_->counters->messages_sent += size() - 1;
}

void Communicator::all_reduce_sum(float* data, std::int64_t count) const {
  const int n = to_int_count(count, "all_reduce_sum");
  if (impl_->t) return transport::all_reduce_sum(*impl_->t, data, count);
  collective(*impl_, "MPI_Allreduce", [&](MPI_Request* rq) {
    return MPI_Iallreduce(MPI_IN_PLACE, data, n, MPI_FLOAT, MPI_SUM, impl_->comm, rq);
  });
  impl_->counters->bytes_sent += kF32 * 2 * count * (size() - 1) / size();
  impl_->counters->bytes_sent_inter_node += kF32 * 2 * count * off_node_peers(*impl_) / size();
  impl_->counters->messages_sent += 2 * (size() - 1);
}

double Communicator::all_reduce_max(double value) const {
  std::int64_t bits = 0;
  static_assert(sizeof(bits) == sizeof(value));
  std::memcpy(&bits, &value, sizeof(bits));
  const auto all = control_exchange(*impl_, "all_reduce_max(double)", &bits, 1);
  double out = -HUGE_VAL;
  for (const std::int64_t b : all) {
    double x = 0;
    std::memcpy(&x, &b, sizeof(x));
    out = std::max(out, x);
  }
  return out;
}

std::int64_t Communicator::all_reduce_max(std::int64_t value) const {
  const auto all = control_exchange(*impl_, "all_reduce_max", &value, 1);
  return *std::max_element(all.begin(), all.end());
}

std::int64_t Communicator::all_reduce_min(std::int64_t value) const {
  const auto all = control_exchange(*impl_, "all_reduce_min", &value, 1);
  return *std::min_element(all.begin(), all.end());
}

std::int64_t Communicator::all_reduce_sum(std::int64_t value) const {
  const auto all = control_exchange(*impl_, "all_reduce_sum", &value, 1);
  return std::accumulate(all.begin(), all.end(), std::int64_t{0});
}

std::vector<std::int64_t> Communicator::exchange(const std::vector<std::int64_t>& values,
                                                 const std::string& what) const {
  BURST_CHECK(values.size() <= static_cast<std::size_t>(kControlValues), InvalidArgument, "exchange '", what,
              "': ", values.size(), " values, at most ", kControlValues);
  return control_exchange(*impl_, what, values.data(), static_cast<int>(values.size()));
}

void Communicator::roll_call(const std::string& what) const { control_exchange(*impl_, what, nullptr, 0); }

std::vector<std::string> Communicator::all_gather_bytes(const std::string& mine,
                                                        const std::string& what) const {
  const int n = to_int_count(static_cast<std::int64_t>(mine.size()), "all_gather_bytes");
  if (impl_->t) return transport::all_gather_bytes(*impl_->t, mine, what);
  const auto sizes = control_exchange(*impl_, what, std::vector<std::int64_t>{n}.data(), 1);
  std::vector<int> counts(sizes.size());
  for (std::size_t r = 0; r < sizes.size(); ++r) counts[r] = to_int_count(sizes[r], "all_gather_bytes");
  const auto displ = displacements(counts);
  std::string all(static_cast<std::size_t>(displ.back()) + static_cast<std::size_t>(counts.back()), '\0');
  collective(*impl_, "MPI_Allgatherv(bytes)", [&](MPI_Request* rq) {
    return MPI_Iallgatherv(mine.data(), n, MPI_CHAR, all.data(), counts.data(), displ.data(), MPI_CHAR,
                           impl_->comm, rq);
  });
  std::vector<std::string> out;
  for (std::size_t r = 0; r < counts.size(); ++r)
    out.push_back(all.substr(static_cast<std::size_t>(displ[r]), static_cast<std::size_t>(counts[r])));
  return out;
}

void Communicator::barrier() const {
  if (impl_->t) return roll_call("barrier");
  collective(*impl_, "MPI_Barrier", [&](MPI_Request* rq) { return MPI_Ibarrier(impl_->comm, rq); });
}

void Communicator::agree(std::uint64_t fingerprint, const std::string& what) const {
  // The fingerprint in two non-negative halves (int64 control values); every rank sees every
  // rank's, so the lowest rank that differs from rank 0 is named identically everywhere.
  const std::int64_t halves[2] = {static_cast<std::int64_t>(fingerprint >> 32),
                                  static_cast<std::int64_t>(fingerprint & 0xffffffffu)};
  const auto all = control_exchange(*impl_, "agree: " + what, halves, 2);
  for (int r = 1; r < size(); ++r)
    if (all[static_cast<std::size_t>(2 * r)] != all[0] || all[static_cast<std::size_t>(2 * r + 1)] != all[1])
      BURST_FAIL(InvalidArgument, what, " differs between ranks (rank ", r,
                 " disagrees with rank 0); every rank must pass identical values");
}

void Communicator::agree_verdict(bool ok, const std::string& message, ErrorKind kind) const {
  const std::int64_t mine[3] = {ok ? 1 : 0, static_cast<std::int64_t>(kind),
                                static_cast<std::int64_t>(message.size())};
  const auto all = control_exchange(*impl_, "agree_verdict", mine, 3);
  int first = -1;
  for (int r = 0; r < size() && first < 0; ++r)
    if (all[static_cast<std::size_t>(3 * r)] == 0) first = r;
  if (first < 0) return;
  // Ship the lowest failing rank's message so every rank throws the same Error.
  const auto f = static_cast<std::size_t>(3 * first);
  const int len = to_int_count(all[f + 2], "agree_verdict message");
  std::string text = (rank() == first) ? message : std::string(static_cast<std::size_t>(len), ' ');
  if (impl_->t)
    transport::broadcast(*impl_->t, text, first);
  else
    collective(*impl_, "MPI_Bcast(verdict)", [&](MPI_Request* rq) {
      return MPI_Ibcast(text.data(), len, MPI_CHAR, first, impl_->comm, rq);
    });
  throw Error(static_cast<ErrorKind>(all[f + 1]), "rank " + std::to_string(first) + ": " + text);
}

void Communicator::abort(const std::string& message) const {
  if (impl_->t) transport::abort(*impl_->t, message);
  std::fprintf(stderr, "[rank %d/%d] burst abort: %s\n", rank(), size(), message.c_str());
  std::fflush(stderr);
  MPI_Abort(impl_->comm, 4);
  std::abort();  // MPI_Abort does not return; keeps [[noreturn]] honest
}

}  // namespace burst
