// burst/comm_transport.h — the message layer under a Communicator that is not MPI.
//
// Owns: Transport, the few operations a Communicator needs from a process group it does not
// own (a torch.distributed ProcessGroup in the Python module: python/torch_transport.cc), and
// TransportOp, one started operation. Communicator::from_transport wraps a Transport; every
// Communicator operation then runs on it with MPI's semantics kept: channels and splits are tag
// namespaces and member lists on the same group, control exchanges are point-to-point records
// (a rank that never arrives is named), every wait is under the watchdog (comm.h), and a
// watchdog timeout prints the same message as over MPI and ends this process (Transport::abort).
// Invariants: a Transport's operations are issued by one thread at a time, in the same order on
// every rank for collectives; buffers passed to an operation stay valid until it completed.
// Does not: include <mpi.h>; know about attention.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace burst {

/// One started operation (a send, a receive or a collective) of a Transport.
class TransportOp {
 public:
  virtual ~TransportOp() = default;
  /// Blocks until the operation completed or `seconds` passed (0: no limit). Returns true when
  /// complete, false when the time ran out (the transport may then be unusable: the caller ends
  /// the process). Throws Error(Communication) when the operation failed (e.g. a peer's
  /// connection closed).
  virtual bool wait_for(double seconds) = 0;
};

/// A process group burst can run on: ranks [0, size()), tagged point-to-point messages and two
/// collectives over all of its ranks. Counts are bytes. Collectives: every rank of the group
/// calls them in the same order with matching sizes.
class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// The launcher's global rank of group rank `rank` (for messages only).
  virtual int world_rank(int rank) const = 0;
  /// What the group is, for messages (e.g. "torch.distributed gloo group").
  virtual std::string name() const = 0;
  /// Non-blocking send of data to group rank `dest` with `tag` ≥ 0 (sends to one peer with one
  /// tag arrive in order). The bytes are read until the operation completed.
  virtual std::unique_ptr<TransportOp> isend(std::span<std::byte> data, int dest, std::int64_t tag) = 0;
  /// Non-blocking receive of exactly data.size() bytes from `source` with `tag`.
  virtual std::unique_ptr<TransportOp> irecv(std::span<std::byte> data, int source, std::int64_t tag) = 0;
  /// recv [size() · send.size()] ← every rank's send, in rank order. Collective.
  virtual std::unique_ptr<TransportOp> all_gather(std::span<const std::byte> send,
                                                  std::span<std::byte> recv) = 0;
  /// send_bytes[r] consecutive bytes of send go to rank r; recv_bytes[r] from rank r land
  /// consecutively in recv. Collective.
  virtual std::unique_ptr<TransportOp> all_to_all_v(std::span<const std::byte> send,
                                                    const std::vector<std::int64_t>& send_bytes,
                                                    std::span<std::byte> recv,
                                                    const std::vector<std::int64_t>& recv_bytes) = 0;
  /// Ends this process with exit status `code` after the caller printed why (the watchdog, or
  /// Communicator::abort). Over a group there is no job-wide abort: the peers end by their own
  /// watchdogs or when their connections to this process close; the launcher (torchrun) ends
  /// the rest.
  [[noreturn]] virtual void abort(int code) = 0;

  /// Tag namespaces handed out on this group (Communicator bookkeeping: one per channel or
  /// split, agreed by the ranks that make it). Not for implementations to touch.
  std::int64_t next_namespace = 1;
};

}  // namespace burst
