// src/comm_mpi_internal.h — what the three files of the MPI Communicator share: comm_mpi.cc
// (creation, splits, isend / irecv, the watchdog and the control exchange), comm_mpi_requests.cc
// (Request, RequestSet) and comm_mpi_collectives.cc (collectives, scalar reductions, agreements).
// They and this header are the only library files that include <mpi.h> (docs/style.md layers).
// Not installed.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "burst/comm.h"
#include "comm_shared.h"
#include "comm_transport.h"

namespace burst {

struct Communicator::Impl {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, size = 1;
  std::shared_ptr<CommCounters> counters = std::make_shared<CommCounters>();
  std::shared_ptr<Watch> watch = std::make_shared<Watch>();
  std::shared_ptr<const std::vector<int>> node_of;  // node id per rank; null until learn_nodes()
  std::vector<float> reduce_scratch;                // reduce_scatter's P received blocks, reused across calls
  // Set for a Communicator over a Transport (from_transport; comm stays MPI_COMM_NULL): every
  // operation goes to comm_transport.cc; rank, size, counters and watch mirror it.
  std::shared_ptr<transport::Comm> t;

  Impl() = default;
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  ~Impl() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
  }
};

struct Request::State {
  MPI_Request request = MPI_REQUEST_NULL;
  ByteBuffer buffer;
  std::shared_ptr<const Communicator::Impl> owner;  // for the watchdog's message and abort
  int peer = -1, tag = 0;
  bool send = false;
  transport::Pending pending;  // an isend / irecv over a Transport instead of `request`
};

namespace mpi {

/// Throws Error(Communication) naming `call` and MPI's error string unless rc is MPI_SUCCESS.
void check_mpi(int rc, const char* call);
/// `count` as an MPI int count; Error(Unsupported) past INT_MAX.
int to_int_count(std::int64_t count, const char* what);
/// The MPI_COMM_WORLD rank of `rank` of c (for messages).
int world_rank_of(const Communicator::Impl& c, int rank);
/// Whether `peer` is on another node than this rank (false until learn_nodes()).
bool off_node(const Communicator::Impl& c, int peer);
/// Completes handles[0, n) under c's watchdog, naming describe_pending(i) of each pending one
/// when it fires (comm_mpi.cc). Returns the MPI return code.
int wait_watched(const Communicator::Impl& c, MPI_Request* handles, int n, const char* call,
                 const std::function<std::string(int)>& describe_pending);
/// "the other rank" / "the other N ranks" (for the watchdog's message).
std::string others(int P);
/// Every rank's n values, rank-major [P·n] (comm_mpi.cc). Collective over c.
std::vector<std::int64_t> control_exchange(const Communicator::Impl& c, const std::string& what,
                                           const std::int64_t* values, int n);

}  // namespace mpi

using mpi::check_mpi;
using mpi::control_exchange;
using mpi::off_node;
using mpi::others;
using mpi::to_int_count;
using mpi::wait_watched;
using mpi::world_rank_of;

}  // namespace burst
