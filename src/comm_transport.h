// src/comm_transport.h — burst::Communicator over a Transport (burst/comm_transport.h): the
// non-MPI half of the Communicator. comm_mpi*.cc forward every operation of a Communicator made by
// Communicator::from_transport here; the semantics, byte counters and watchdog messages are those
// of burst/comm.h. A channel or split is a tag namespace (kNamespaceTags tags) and a member list on
// the same group: channels made by the same ranks in the same order agree on it (each rank takes
// the largest next namespace any member offers, so no rank reuses one). Collectives over the whole
// group use the group's own collectives; over a subset (usp's groups, a node), point-to-point.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "burst/comm.h"
#include "burst/comm_transport.h"
#include "comm_shared.h"

namespace burst::transport {

/// One communicator's view of a group.
struct Comm {
  std::shared_ptr<Transport> group;
  std::vector<int> members;  // the group rank of each of this communicator's ranks, rank order
  bool whole = false;        // members are all of the group in order: the group's collectives
  int rank = 0, size = 1;
  std::int64_t tag_base = 0;  // namespace · kNamespaceTags
  std::shared_ptr<CommCounters> counters = std::make_shared<CommCounters>();
  std::shared_ptr<Watch> watch = std::make_shared<Watch>();
  std::shared_ptr<const std::vector<int>> node_of;  // node id per rank; null until learn_nodes()
  std::vector<float> reduce_scratch;
};

/// An in-flight isend / irecv (inside a Request).
struct Pending {
  std::unique_ptr<TransportOp> op;
  std::shared_ptr<const Comm> owner;
};

/// The root communicator of `group` (a roll call naming absent ranks, then an agreed namespace).
/// Collective over the group.
std::shared_ptr<Comm> create(std::shared_ptr<Transport> group, std::shared_ptr<Watch> watch);
/// The sub-communicator of the ranks with this rank's color, ordered by (key, rank), on a fresh
/// namespace; counters and watch are the caller's to set. Collective over parent.
std::shared_ptr<Comm> derive(const Comm& parent, int color, int key, const std::string& what);
/// The ranks on this rank's host (by host name). Collective.
std::shared_ptr<Comm> split_shared(const Comm& parent);
void learn_nodes(Comm& c);

/// "r (world w)" for messages.
std::string rank_name(const Comm& c, int r);

Pending isend(const std::shared_ptr<Comm>& c, ByteBuffer& buffer, int dest, int tag);
Pending irecv(const std::shared_ptr<Comm>& c, ByteBuffer& buffer, int source, int tag);
/// Waits under the owner's watchdog; on a timeout or a failure prints the watchdog's message
/// (naming describe()) and ends the process. Returns only once complete.
void wait(Pending& p, const char* call, const std::function<std::string()>& describe);

void all_gather_v(Comm& c, std::span<const std::byte> send, const std::vector<std::int64_t>& bytes,
                  std::span<std::byte> recv, bool equal_blocks);
void all_to_all_v(Comm& c, std::span<const std::byte> send, const std::vector<std::int64_t>& send_bytes,
                  std::span<std::byte> recv, const std::vector<std::int64_t>& recv_bytes);
void reduce_scatter(Comm& c, const float* send, const std::vector<std::int64_t>& counts, float* recv);
void all_reduce_sum(Comm& c, float* data, std::int64_t count);
std::vector<std::int64_t> control_exchange(const Comm& c, const std::string& what, const std::int64_t* values,
                                           int n);
std::vector<std::string> all_gather_bytes(Comm& c, const std::string& mine, const std::string& what);
/// The bytes of rank `root` on every rank (text.size() already agreed). Collective.
void broadcast(const Comm& c, std::string& text, int root);
[[noreturn]] void abort(const Comm& c, const std::string& message);

}  // namespace burst::transport
