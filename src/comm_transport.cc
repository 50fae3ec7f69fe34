// Communicator operations over a Transport (comm_transport.h): the same contracts, counters and
// watchdog messages as comm_mpi.cc, on a group burst does not own (a torch.distributed group).
#include "comm_transport.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <utility>

#include "burst/error.h"

namespace burst::transport {
namespace {

// Tags of one namespace: payload [0, 32767) (comm.h), control records 32767, the point-to-point
// messages of collectives over a subset 32768.
constexpr std::int64_t kNamespaceTags = 1 << 16;
constexpr std::int64_t kCollectiveTag = control::kControlTag + 1;
constexpr std::int64_t kF32 = 4;

std::string host_name() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) return "?";
  return host;
}

bool off_node(const Comm& c, int peer) {
  return c.node_of &&
         (*c.node_of)[static_cast<std::size_t>(peer)] != (*c.node_of)[static_cast<std::size_t>(c.rank)];
}

int off_node_peers(const Comm& c) {
  int n = 0;
  for (int r = 0; r < c.size; ++r) n += off_node(c, r) ? 1 : 0;
  return n;
}

// The watchdog fired or an operation failed: the message comm_mpi.cc prints, then the end of this
// process (there is no job-wide abort over a group; the peers' connections to it close).
[[noreturn]] void watchdog_end(const Comm& c, const char* call, const std::string& what_happened,
                               const std::string& waiting_on) {
  const std::string during = c.watch->during();
  std::fprintf(stderr,
               "[rank %d/%d (world %d) on host %s] burst comm watchdog: %s %s over the %s, waiting on %s; "
               "during %s. Ending this process (a rank that is only slow needs a longer timeout: "
               "DistConfig::comm_timeout_seconds, comm_timeout= in Python, BURST_COMM_TIMEOUT).\n",
               c.rank, c.size, c.group->world_rank(c.members[static_cast<std::size_t>(c.rank)]),
               host_name().c_str(), call, what_happened.c_str(), c.group->name().c_str(), waiting_on.c_str(),
               during.c_str());
  std::fflush(stderr);
  c.group->abort(5);
  std::abort();  // an implementation that returned broke Transport::abort's contract
}

void wait_op(const Comm& c, TransportOp& op, const char* call, const std::function<std::string()>& describe) {
  const double limit = c.watch->timeout_seconds;
  const auto t0 = std::chrono::steady_clock::now();
  bool done = false;
  try {
    done = op.wait_for(limit);
  } catch (const Error& e) { watchdog_end(c, call, std::string("failed (") + e.message() + ")", describe()); }
  if (!done) {
    const double idle = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    char text[160];
    std::snprintf(text, sizeof(text), "did not complete within the timeout of %g s (no progress for %.1f s)",
                  limit, idle);
    watchdog_end(c, call, text, describe());
  }
}

// Starts an operation; a failure to start one (e.g. a peer's connection already closed) ends the
// process like a failed wait, since the operations started before it may still be in flight.
template <typename Start>
std::unique_ptr<TransportOp> start(const Comm& c, const char* call, Start&& start_op) {
  try {
    return start_op();
  } catch (const Error& e) {
    watchdog_end(c, call, std::string("could not start (") + e.message() + ")", "the group");
  }
}

std::string collective_peers(const Comm& c) {
  return (c.size == 2 ? std::string("the other rank")
                      : "the other " + std::to_string(c.size - 1) + " ranks") +
         "; which of them never arrived is unknown (a collective does not tell; the last exchange every "
         "rank joined: " +
         (c.watch->last_roll_call.empty() ? std::string("none") : c.watch->last_roll_call) + ")";
}

void collective(const Comm& c, const char* call, std::unique_ptr<TransportOp> op) {
  wait_op(c, *op, call, [&] { return collective_peers(c); });
}

// A collective over a subset of the group: block r of `send` to rank r, block r of `recv` from it
// (own block copied), point-to-point on the namespace's collective tag.
void p2p_exchange(const Comm& c, const char* call, const std::vector<std::span<const std::byte>>& send,
                  const std::vector<std::span<std::byte>>& recv) {
  std::vector<std::unique_ptr<TransportOp>> ops;
  std::vector<int> peer;
  const std::int64_t tag = c.tag_base + kCollectiveTag;
  for (int r = 0; r < c.size; ++r) {
    if (r == c.rank) continue;
    ops.push_back(start(c, call, [&] {
      return c.group->irecv(recv[static_cast<std::size_t>(r)], c.members[static_cast<std::size_t>(r)], tag);
    }));
    peer.push_back(r);
  }
  for (int r = 0; r < c.size; ++r) {
    if (r == c.rank) continue;
    const auto s = send[static_cast<std::size_t>(r)];
    // The transport only reads a send's bytes; its interface takes them writable (torch.frombuffer).
    ops.push_back(start(c, call, [&] {
      return c.group->isend({const_cast<std::byte*>(s.data()), s.size()},
                            c.members[static_cast<std::size_t>(r)], tag);
    }));
  }
  const auto me = static_cast<std::size_t>(c.rank);
  std::copy(send[me].begin(), send[me].end(), recv[me].begin());
  for (std::size_t i = 0; i < ops.size(); ++i)
    wait_op(c, *ops[i], call, [&] {
      return i < peer.size() ? "rank " + rank_name(c, peer[i]) + " (its block of the collective)"
                             : collective_peers(c);
    });
}

std::vector<std::int64_t> offsets(const std::vector<std::int64_t>& bytes) {
  std::vector<std::int64_t> out(bytes.size() + 1, 0);
  std::partial_sum(bytes.begin(), bytes.end(), out.begin() + 1);
  return out;
}

}  // namespace

std::string rank_name(const Comm& c, int r) {
  return std::to_string(r) + " (world " +
         std::to_string(c.group->world_rank(c.members[static_cast<std::size_t>(r)])) + ")";
}

std::vector<std::int64_t> control_exchange(const Comm& c, const std::string& what, const std::int64_t* values,
                                           int n) {
  const int P = c.size, me = c.rank;
  std::vector<control::ControlRecord> all(static_cast<std::size_t>(P));
  control::ControlRecord& mine = all[static_cast<std::size_t>(me)];
  mine = control::make_record(what, c.watch->activity, values, n);
  const std::int64_t tag = c.tag_base + control::kControlTag;
  constexpr std::size_t kBytes = sizeof(control::ControlRecord);
  const std::string call = "the control exchange '" + what + "'";
  std::vector<std::unique_ptr<TransportOp>> recvs, sends;
  std::vector<int> peer;
  for (int r = 0; r < P; ++r) {
    if (r == me) continue;
    recvs.push_back(start(c, call.c_str(), [&] {
      return c.group->irecv({reinterpret_cast<std::byte*>(&all[static_cast<std::size_t>(r)]), kBytes},
                            c.members[static_cast<std::size_t>(r)], tag);
    }));
    peer.push_back(r);
  }
  for (const int r : peer)
    sends.push_back(start(c, call.c_str(), [&] {
      return c.group->isend({reinterpret_cast<std::byte*>(&mine), kBytes},
                            c.members[static_cast<std::size_t>(r)], tag);
    }));
  // A peer that arrived has sent its record: a receive that does not complete names a rank that
  // never arrived (receives are waited in rank order; a later absent rank is named by the next
  // timeout, if this rank's message has not ended the job first).
  for (std::size_t i = 0; i < recvs.size(); ++i)
    wait_op(c, *recvs[i], call.c_str(), [&] { return "rank " + rank_name(c, peer[i]) + " never arrived"; });
  for (std::size_t i = 0; i < sends.size(); ++i)
    wait_op(c, *sends[i], call.c_str(), [&] { return "rank " + rank_name(c, peer[i]) + " (its record)"; });
  return control::unpack(all, me, n, what, *c.watch);
}

std::shared_ptr<Comm> create(std::shared_ptr<Transport> group, std::shared_ptr<Watch> watch) {
  auto c = std::make_shared<Comm>();
  c->group = std::move(group);
  c->rank = c->group->rank();
  c->size = c->group->size();
  c->members.resize(static_cast<std::size_t>(c->size));
  std::iota(c->members.begin(), c->members.end(), 0);
  c->whole = true;
  c->watch = std::move(watch);
  c->tag_base = 0;  // namespace 0: the creations' roll calls, in the same order on every rank
  const std::int64_t next = c->group->next_namespace;
  const auto all = control_exchange(*c, "creating a Communicator", &next, 1);
  const std::int64_t ns = *std::max_element(all.begin(), all.end());
  BURST_CHECK(ns < (std::int64_t{1} << 31) / kNamespaceTags, Unsupported, "the group's ", ns,
              " tag namespaces are used up (one per channel or split)");
  c->group->next_namespace = ns + 1;
  c->tag_base = ns * kNamespaceTags;
  if (c->watch->activity.starts_with("creating a Communicator")) c->watch->activity.clear();
  return c;
}

std::shared_ptr<Comm> derive(const Comm& parent, int color, int key, const std::string& what) {
  const std::int64_t mine[3] = {color, key, parent.group->next_namespace};
  const auto all = control_exchange(parent, what, mine, 3);
  std::int64_t ns = 0;
  std::vector<std::pair<std::int64_t, int>> order;  // (key, rank) of this color
  for (int r = 0; r < parent.size; ++r) {
    const auto k = static_cast<std::size_t>(3 * r);
    ns = std::max(ns, all[k + 2]);
    if (all[k] == color) order.emplace_back(all[k + 1], r);
  }
  BURST_CHECK(ns < (std::int64_t{1} << 31) / kNamespaceTags, Unsupported, "the group's ", ns,
              " tag namespaces are used up (one per channel or split)");
  parent.group->next_namespace = ns + 1;
  std::sort(order.begin(), order.end());
  auto c = std::make_shared<Comm>();
  c->group = parent.group;
  c->size = static_cast<int>(order.size());
  std::vector<int> node_ids;
  for (std::size_t i = 0; i < order.size(); ++i) {
    const int r = order[i].second;
    if (r == parent.rank) c->rank = static_cast<int>(i);
    c->members.push_back(parent.members[static_cast<std::size_t>(r)]);
    if (parent.node_of) node_ids.push_back((*parent.node_of)[static_cast<std::size_t>(r)]);
  }
  std::vector<int> all_ranks(static_cast<std::size_t>(c->group->size()));
  std::iota(all_ranks.begin(), all_ranks.end(), 0);
  c->whole = c->members == all_ranks;
  c->tag_base = ns * kNamespaceTags;
  if (parent.node_of) c->node_of = std::make_shared<const std::vector<int>>(std::move(node_ids));
  return c;
}

std::shared_ptr<Comm> split_shared(const Comm& parent) {
  const std::int64_t host = static_cast<std::int64_t>(control::fnv1a(host_name()) >> 1);
  const auto all = control_exchange(parent, "split_shared (host names)", &host, 1);
  int color = parent.rank;
  for (int r = parent.size - 1; r >= 0; --r)
    if (all[static_cast<std::size_t>(r)] == host) color = r;  // the lowest rank on this host
  auto c = derive(parent, color, parent.rank, "split_shared");
  c->watch = std::make_shared<Watch>(*parent.watch);
  return c;
}

void learn_nodes(Comm& c) {
  // A node's id: the lowest rank of this communicator on the same host.
  const std::int64_t host = static_cast<std::int64_t>(control::fnv1a(host_name()) >> 1);
  const auto all = control_exchange(c, "learn_nodes (host names)", &host, 1);
  std::vector<int> ids(all.size());
  for (std::size_t r = 0; r < all.size(); ++r)
    ids[r] = static_cast<int>(std::find(all.begin(), all.end(), all[r]) - all.begin());
  c.node_of = std::make_shared<const std::vector<int>>(std::move(ids));
}

Pending isend(const std::shared_ptr<Comm>& c, ByteBuffer& buffer, int dest, int tag) {
  Pending p{start(*c, "isend",
                  [&] {
                    return c->group->isend(buffer, c->members[static_cast<std::size_t>(dest)],
                                           c->tag_base + tag);
                  }),
            c};
  const auto bytes = static_cast<std::int64_t>(buffer.size());
  c->counters->bytes_sent += bytes;
  if (off_node(*c, dest)) c->counters->bytes_sent_inter_node += bytes;
  c->counters->messages_sent += 1;
  return p;
}

Pending irecv(const std::shared_ptr<Comm>& c, ByteBuffer& buffer, int source, int tag) {
  Pending p{start(*c, "irecv",
                  [&] {
                    return c->group->irecv(buffer, c->members[static_cast<std::size_t>(source)],
                                           c->tag_base + tag);
                  }),
            c};
  c->counters->bytes_received += static_cast<std::int64_t>(buffer.size());
  return p;
}

void wait(Pending& p, const char* call, const std::function<std::string()>& describe) {
  if (!p.op) return;
  wait_op(*p.owner, *p.op, call, describe);
  p.op.reset();
}

void all_gather_v(Comm& c, std::span<const std::byte> send, const std::vector<std::int64_t>& bytes,
                  std::span<std::byte> recv, bool equal_blocks) {
  const std::int64_t mine = bytes[static_cast<std::size_t>(c.rank)];
  if (c.whole && equal_blocks) {
    collective(c, "all_gather", start(c, "all_gather", [&] { return c.group->all_gather(send, recv); }));
  } else {
    const auto off = offsets(bytes);
    std::vector<std::span<const std::byte>> s(static_cast<std::size_t>(c.size), send);
    std::vector<std::span<std::byte>> r;
    for (int i = 0; i < c.size; ++i)
      r.push_back(recv.subspan(static_cast<std::size_t>(off[static_cast<std::size_t>(i)]),
                               static_cast<std::size_t>(bytes[static_cast<std::size_t>(i)])));
    p2p_exchange(c, "all_gather (point-to-point)", s, r);
  }
  c.counters->bytes_sent += mine * (c.size - 1);
  c.counters->bytes_sent_inter_node += mine * off_node_peers(c);
  c.counters->messages_sent += c.size - 1;
}

void all_to_all_v(Comm& c, std::span<const std::byte> send, const std::vector<std::int64_t>& send_bytes,
                  std::span<std::byte> recv, const std::vector<std::int64_t>& recv_bytes) {
  if (c.whole) {
    collective(c, "all_to_all", start(c, "all_to_all", [&] {
                 return c.group->all_to_all_v(send, send_bytes, recv, recv_bytes);
               }));
  } else {
    const auto so = offsets(send_bytes), ro = offsets(recv_bytes);
    std::vector<std::span<const std::byte>> s;
    std::vector<std::span<std::byte>> r;
    for (std::size_t i = 0; i < send_bytes.size(); ++i) {
      s.push_back(send.subspan(static_cast<std::size_t>(so[i]), static_cast<std::size_t>(send_bytes[i])));
      r.push_back(recv.subspan(static_cast<std::size_t>(ro[i]), static_cast<std::size_t>(recv_bytes[i])));
    }
    p2p_exchange(c, "all_to_all (point-to-point)", s, r);
  }
  for (int r = 0; r < c.size; ++r) {
    const std::int64_t b = send_bytes[static_cast<std::size_t>(r)];
    if (r == c.rank || b == 0) continue;
    c.counters->bytes_sent += b;
    if (off_node(c, r)) c.counters->bytes_sent_inter_node += b;
    c.counters->messages_sent += 1;
  }
}

void reduce_scatter(Comm& c, const float* send, const std::vector<std::int64_t>& counts, float* recv) {
  // As comm_mpi_collectives.cc: an all-to-all of the blocks, then the P received blocks summed in
  // rank order (the same bits as over MPI).
  const int P = c.size;
  const std::int64_t mine = counts[static_cast<std::size_t>(c.rank)];
  const std::int64_t total = std::accumulate(counts.begin(), counts.end(), std::int64_t{0});
  std::vector<float>& got = c.reduce_scratch;
  if (static_cast<std::int64_t>(got.size()) < mine * P) got.resize(static_cast<std::size_t>(mine * P));
  std::vector<std::int64_t> sb(counts.size()), rb(counts.size(), kF32 * mine);
  for (std::size_t i = 0; i < counts.size(); ++i) sb[i] = kF32 * counts[i];
  const CommCounters before = *c.counters;
  all_to_all_v(c, std::as_bytes(std::span(send, static_cast<std::size_t>(total))), sb,
               std::as_writable_bytes(std::span(got.data(), static_cast<std::size_t>(mine * P))), rb);
  *c.counters = before;
  std::copy(got.data(), got.data() + mine, recv);
  for (int r = 1; r < P; ++r) {
    const float* block = got.data() + static_cast<std::ptrdiff_t>(r) * mine;
    for (std::int64_t i = 0; i < mine; ++i) recv[i] += block[i];
  }
  c.counters->bytes_sent += kF32 * (total - mine);
  for (int r = 0; r < P; ++r)
    if (off_node(c, r)) c.counters->bytes_sent_inter_node += kF32 * counts[static_cast<std::size_t>(r)];
  c.counters->messages_sent += P - 1;
}

void all_reduce_sum(Comm& c, float* data, std::int64_t count) {
  // Every rank's values gathered, then summed in rank order (the same bits on every rank and run).
  const int P = c.size;
  std::vector<float> all(static_cast<std::size_t>(count * P));
  const CommCounters before = *c.counters;
  all_gather_v(c, std::as_bytes(std::span(data, static_cast<std::size_t>(count))),
               std::vector<std::int64_t>(static_cast<std::size_t>(P), kF32 * count),
               std::as_writable_bytes(std::span(all)), true);
  *c.counters = before;
  std::copy(all.begin(), all.begin() + count, data);
  for (int r = 1; r < P; ++r)
    for (std::int64_t i = 0; i < count; ++i) data[i] += all[static_cast<std::size_t>(r * count + i)];
  c.counters->bytes_sent += kF32 * 2 * count * (P - 1) / P;
  c.counters->bytes_sent_inter_node += kF32 * 2 * count * off_node_peers(c) / P;
  c.counters->messages_sent += 2 * (P - 1);
}

std::vector<std::string> all_gather_bytes(Comm& c, const std::string& mine, const std::string& what) {
  const auto n = static_cast<std::int64_t>(mine.size());
  const auto sizes = control_exchange(c, what, &n, 1);
  const auto off = offsets(sizes);
  std::string all(static_cast<std::size_t>(off.back()), '\0');
  const CommCounters before = *c.counters;  // control data: not counted as payload
  all_gather_v(c, std::as_bytes(std::span(mine)), sizes, std::as_writable_bytes(std::span(all)), false);
  *c.counters = before;
  std::vector<std::string> out;
  for (std::size_t r = 0; r < sizes.size(); ++r)
    out.push_back(all.substr(static_cast<std::size_t>(off[r]), static_cast<std::size_t>(sizes[r])));
  return out;
}

void broadcast(const Comm& c, std::string& text, int root) {
  const std::int64_t tag = c.tag_base + kCollectiveTag;
  std::span<std::byte> bytes = std::as_writable_bytes(std::span(text));
  if (c.rank != root) {
    auto op = start(c, "broadcast(verdict)",
                    [&] { return c.group->irecv(bytes, c.members[static_cast<std::size_t>(root)], tag); });
    wait_op(c, *op, "broadcast(verdict)", [&] { return "rank " + rank_name(c, root); });
    return;
  }
  for (int r = 0; r < c.size; ++r) {
    if (r == root) continue;
    auto op = start(c, "broadcast(verdict)",
                    [&] { return c.group->isend(bytes, c.members[static_cast<std::size_t>(r)], tag); });
    wait_op(c, *op, "broadcast(verdict)", [&] { return "rank " + rank_name(c, r); });
  }
}

void abort(const Comm& c, const std::string& message) {
  std::fprintf(stderr, "[rank %d/%d] burst abort: %s\n", c.rank, c.size, message.c_str());
  std::fflush(stderr);
  c.group->abort(4);
  std::abort();  // as above
}

}  // namespace burst::transport
