// Communicator over MPI (burst/comm.h): creation (world, from_fortran, from_transport), channels
// and splits, node topology, isend / irecv, and what every MPI wait of comm_mpi_*.cc shares
// (comm_mpi_internal.h): MPI return codes turned into Error(Communication) naming the call, the
// watchdog (wait_watched below) and the control exchanges (control_exchange) that let it name
// the ranks that never arrived. Request / RequestSet: comm_mpi_requests.cc; the collectives and
// agreements: comm_mpi_collectives.cc.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <numeric>
#include <thread>
#include <utility>

#include "burst/comm.h"
#include "burst/error.h"
#include "comm_mpi_internal.h"

namespace burst {

namespace {

void require_initialized() {
  int init = 0, finalized = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&finalized);
  BURST_CHECK(init && !finalized, Communication,
              "MPI is not initialised (or already finalised): burst never calls MPI_Init; call "
              "MPI_Init_thread before creating a Communicator");
}

std::shared_ptr<Communicator::Impl> adopt(MPI_Comm comm) {
  auto impl = std::make_shared<Communicator::Impl>();
  impl->comm = comm;
  check_mpi(MPI_Comm_set_errhandler(impl->comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  MPI_Comm_rank(impl->comm, &impl->rank);
  MPI_Comm_size(impl->comm, &impl->size);
  return impl;
}

// Node ids of a sub-communicator's ranks from its parent's map (MPI_Group_translate_ranks; local).
std::shared_ptr<const std::vector<int>> translate_nodes(const Communicator::Impl& parent, MPI_Comm child) {
  if (!parent.node_of) return nullptr;
  MPI_Group pg = MPI_GROUP_NULL, cg = MPI_GROUP_NULL;
  MPI_Comm_group(parent.comm, &pg);
  MPI_Comm_group(child, &cg);
  int n = 0;
  MPI_Group_size(cg, &n);
  std::vector<int> mine(static_cast<std::size_t>(n)), theirs(static_cast<std::size_t>(n));
  std::iota(mine.begin(), mine.end(), 0);
  MPI_Group_translate_ranks(cg, n, mine.data(), pg, theirs.data());
  MPI_Group_free(&pg);
  MPI_Group_free(&cg);
  auto out = std::make_shared<std::vector<int>>(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i)
    (*out)[static_cast<std::size_t>(i)] =
        (*parent.node_of)[static_cast<std::size_t>(theirs[static_cast<std::size_t>(i)])];
  return out;
}

// The watchdog fired: say which operation, which ranks never arrived (or that a collective cannot
// tell), during what, and the timeout; then end the job (docs/multinode.md § No hang). MPI_Abort
// reaches the other ranks through mpirun; ranks it cannot reach (a cut link) fire their own
// watchdog.
[[noreturn]] void watchdog_abort(const Communicator::Impl& c, const char* call, double seconds,
                                 const std::string& waiting_on) {
  char host[MPI_MAX_PROCESSOR_NAME] = {};
  int len = 0;
  MPI_Get_processor_name(host, &len);
  const Watch& w = *c.watch;
  const std::string during = w.during();
  std::fprintf(stderr,
               "[rank %d/%d (world %d) on host %s] burst comm watchdog: %s did not complete within the "
               "timeout of %g s (no progress for %.1f s), waiting on %s; during %s. Aborting the job "
               "(a rank that is only slow needs a longer timeout: DistConfig::comm_timeout_seconds, "
               "comm_timeout= in Python, BURST_COMM_TIMEOUT).\n",
               c.rank, c.size, world_rank_of(c, c.rank), host, call, w.timeout_seconds, seconds,
               waiting_on.c_str(), during.c_str());
  std::fflush(stderr);
  MPI_Abort(c.comm, 5);
  std::abort();
}

// Control exchanges (comm_shared.h): P − 1 records of ~250 B per rank on a reserved tag, where
// MPI_Iallreduce would send log P; a pending receive names a rank that never arrived.
using control::ControlRecord;
using control::kControlTag;
constexpr const char* kCreating =
    "creating a Communicator (MPI_Comm_idup)";  // payload tags are below it (isend / irecv check)

std::string rank_name(const Communicator::Impl& c, int r) {
  return std::to_string(r) + " (world " + std::to_string(world_rank_of(c, r)) + ")";
}

}  // namespace

// ---------------------------------------------------------------- shared (comm_mpi_internal.h)

namespace mpi {

void check_mpi(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  MPI_Error_string(rc, text, &len);
  BURST_FAIL(Communication, call, " failed: ", std::string(text, static_cast<std::size_t>(len)));
}

int to_int_count(std::int64_t count, const char* what) {
  BURST_CHECK(count >= 0 && count <= INT_MAX, Unsupported, what, ": count ", count,
              " exceeds MPI's int count limit ", INT_MAX);
  return static_cast<int>(count);
}

int world_rank_of(const Communicator::Impl& c, int rank) {
  MPI_Group group = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
  int out = MPI_UNDEFINED;
  MPI_Comm_group(c.comm, &group);
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  MPI_Group_translate_ranks(group, 1, &rank, world, &out);
  MPI_Group_free(&group);
  MPI_Group_free(&world);
  return out;
}

bool off_node(const Communicator::Impl& c, int peer) {
  return c.node_of &&
         (*c.node_of)[static_cast<std::size_t>(peer)] != (*c.node_of)[static_cast<std::size_t>(c.rank)];
}

// Completes every request of handles[0, n) (MPI_REQUEST_NULL entries count as done) by polling
// MPI_Testsome; when none completes for the watchdog's timeout, aborts the job naming
// describe(i) of each pending one. Timeout 0: MPI_Waitall. Returns the MPI return code.
int wait_watched(const Communicator::Impl& c, MPI_Request* handles, int n, const char* call,
                 const std::function<std::string(int)>& describe_pending) {
  const double limit = c.watch->timeout_seconds;
  if (limit <= 0) return MPI_Waitall(n, handles, MPI_STATUSES_IGNORE);
  std::vector<int> completed(static_cast<std::size_t>(std::max(n, 1)));
  auto last = std::chrono::steady_clock::now();
  for (;;) {
    int count = 0;
    const int rc = MPI_Testsome(n, handles, &count, completed.data(), MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) return rc;
    if (count == MPI_UNDEFINED) return MPI_SUCCESS;  // no active request left
    const auto now = std::chrono::steady_clock::now();
    if (count > 0) {
      last = now;
      continue;
    }
    const double idle = std::chrono::duration<double>(now - last).count();
    if (idle > limit) {
      std::string pending;
      for (int i = 0; i < n; ++i) {
        const std::string d = handles[i] != MPI_REQUEST_NULL ? describe_pending(i) : std::string();
        if (!d.empty()) pending += (pending.empty() ? "" : "; ") + d;
      }
      watchdog_abort(c, call, idle, pending);
    }
    std::this_thread::yield();
  }
}

std::string others(int P) {
  return P == 2 ? std::string("the other rank") : "the other " + std::to_string(P - 1) + " ranks";
}

// Every rank's n values, rank-major [P·n]. Collective over c; every rank passes the same `what`
// and n, else every rank throws the same Error naming each rank's call (all hold all records).
std::vector<std::int64_t> control_exchange(const Communicator::Impl& c, const std::string& what,
                                           const std::int64_t* values, int n) {
  if (c.t) return transport::control_exchange(*c.t, what, values, n);
  const int P = c.size, me = c.rank;
  std::vector<ControlRecord> all(static_cast<std::size_t>(P));
  ControlRecord& mine = all[static_cast<std::size_t>(me)];
  mine = control::make_record(what, c.watch->activity, values, n);
  // Receives first (indices 0..P−2), then sends (P−1..2P−3), peer order.
  std::vector<MPI_Request> req(static_cast<std::size_t>(2 * (P - 1)), MPI_REQUEST_NULL);
  std::vector<int> peer;
  constexpr int kBytes = static_cast<int>(sizeof(ControlRecord));
  for (int r = 0; r < P; ++r) {
    if (r == me) continue;
    check_mpi(MPI_Irecv(&all[static_cast<std::size_t>(r)], kBytes, MPI_BYTE, r, kControlTag, c.comm,
                        &req[peer.size()]),
              "MPI_Irecv(control)");
    peer.push_back(r);
  }
  for (std::size_t i = 0; i < peer.size(); ++i)
    check_mpi(MPI_Isend(&mine, kBytes, MPI_BYTE, peer[i], kControlTag, c.comm, &req[peer.size() + i]),
              "MPI_Isend(control)");
  const std::size_t m = peer.size();
  const std::string call = "the control exchange '" + what + "'";
  check_mpi(wait_watched(c, req.data(), static_cast<int>(req.size()), call.c_str(),
                         [&](int i) {
                           // Each peer posts its receives before its sends: a peer that arrived has
                           // sent, so a pending receive names an absent rank and sends add nothing.
                           const auto k = static_cast<std::size_t>(i);
                           return k < m ? "rank " + rank_name(c, peer[k]) + " never arrived" : std::string();
                         }),
            "MPI_Waitall(control)");
  return control::unpack(all, me, n, what, *c.watch);
}

}  // namespace mpi

namespace {

// MPI_Comm_idup of `parent` completed under the watchdog of `watch` (MPI_Comm_dup cannot be
// interrupted); the result uses `watch`. Collective over parent. An MPI collective does not say
// which ranks have joined, so with `roll_call` a control exchange on the parent (kControlTag)
// comes first: a rank that never arrives is named there, and the idup then waits on no one.
// Without it (channel(): its caller has just held one) the ranks missing from a stuck idup are
// unknown to a rank waiting on it.
std::shared_ptr<Communicator::Impl> watched_dup(MPI_Comm parent, std::shared_ptr<Watch> watch,
                                                bool roll_call) {
  auto impl = std::make_shared<Communicator::Impl>();
  impl->watch = std::move(watch);
  // While the dup is pending, the watchdog reports and aborts on the parent.
  impl->comm = parent;
  MPI_Comm_rank(parent, &impl->rank);
  MPI_Comm_size(parent, &impl->size);
  if (roll_call) {
    try {
      control_exchange(*impl, kCreating, nullptr, 0);
    } catch (...) {
      impl->comm = MPI_COMM_NULL;  // never free the parent
      throw;
    }
  }
  MPI_Comm out = MPI_COMM_NULL;
  MPI_Request request = MPI_REQUEST_NULL;
  int rc = MPI_Comm_idup(parent, &out, &request);
  if (rc == MPI_SUCCESS)
    rc = wait_watched(*impl, &request, 1, "MPI_Comm_idup", [&](int) {
      return others(impl->size) + "; which of them never arrived is unknown (MPI_Comm_idup does not tell)";
    });
  impl->comm = MPI_COMM_NULL;  // never free the parent
  check_mpi(rc, "MPI_Comm_idup");
  impl->comm = out;
  if (impl->watch->activity == kCreating) impl->watch->activity.clear();
  // Errors come back as return codes so they become burst::Error instead of aborting.
  check_mpi(MPI_Comm_set_errhandler(impl->comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  return impl;
}

}  // namespace

// ---------------------------------------------------------------- Communicator

Communicator::Communicator(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

namespace {
std::shared_ptr<Watch> watch_of(double timeout_seconds) {
  BURST_CHECK(std::isfinite(timeout_seconds) && timeout_seconds >= 0, InvalidArgument,
              "communication timeout ", timeout_seconds, " s must be finite and >= 0 (0: wait forever)");
  auto w = std::make_shared<Watch>();
  w->timeout_seconds = timeout_seconds;
  w->activity = kCreating;
  return w;
}
}  // namespace

Communicator Communicator::world(double timeout_seconds) {
  require_initialized();
  return Communicator(watched_dup(MPI_COMM_WORLD, watch_of(timeout_seconds), true));
}

namespace {
std::shared_ptr<Communicator::Impl> adopt_transport(std::shared_ptr<transport::Comm> t) {
  auto impl = std::make_shared<Communicator::Impl>();
  impl->rank = t->rank;
  impl->size = t->size;
  impl->counters = t->counters;
  impl->watch = t->watch;
  impl->t = std::move(t);
  return impl;
}
}  // namespace

Communicator Communicator::from_transport(std::shared_ptr<Transport> group, double timeout_seconds) {
  BURST_CHECK(group != nullptr, InvalidArgument, "Communicator::from_transport: no transport");
  return Communicator(adopt_transport(transport::create(std::move(group), watch_of(timeout_seconds))));
}

Communicator Communicator::from_fortran(std::int64_t handle, double timeout_seconds) {
  require_initialized();
  const MPI_Comm comm = MPI_Comm_f2c(static_cast<MPI_Fint>(handle));
  BURST_CHECK(comm != MPI_COMM_NULL, Communication, "Fortran handle ", handle, " is MPI_COMM_NULL");
  return Communicator(watched_dup(comm, watch_of(timeout_seconds), true));
}

int Communicator::rank() const { return impl_->rank; }
int Communicator::size() const { return impl_->size; }

Communicator Communicator::channel() const {
  if (impl_->t) {
    auto t = transport::derive(*impl_->t, 0, rank(), "channel");
    t->counters = impl_->t->counters;
    t->watch = impl_->t->watch;
    t->node_of = impl_->t->node_of;
    return Communicator(adopt_transport(std::move(t)));
  }
  control_exchange(*impl_, "channel (MPI_Comm_idup)", nullptr, 0);
  auto impl = watched_dup(impl_->comm, impl_->watch, false);
  impl->counters = impl_->counters;
  impl->watch = impl_->watch;
  impl->node_of = impl_->node_of;
  return Communicator(std::move(impl));
}

// MPI_Comm_split has no non-blocking form: a control exchange first makes sure every rank has
// arrived (or names those that have not), then the split completes without waiting on anyone.
Communicator Communicator::split(int color, int key) const {
  if (impl_->t) {
    auto t = transport::derive(*impl_->t, color, key, "split");
    t->watch = std::make_shared<Watch>(*impl_->t->watch);
    return Communicator(adopt_transport(std::move(t)));
  }
  control_exchange(*impl_, "split (MPI_Comm_split)", nullptr, 0);
  MPI_Comm out = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split(impl_->comm, color, key, &out), "MPI_Comm_split");
  auto impl = adopt(out);
  impl->watch = std::make_shared<Watch>(*impl_->watch);
  impl->node_of = translate_nodes(*impl_, out);
  return Communicator(std::move(impl));
}

Communicator Communicator::split_channel(int color, int key) const {
  if (impl_->t) {
    auto t = transport::derive(*impl_->t, color, key, "split_channel");
    t->counters = impl_->t->counters;
    t->watch = impl_->t->watch;
    return Communicator(adopt_transport(std::move(t)));
  }
  control_exchange(*impl_, "split_channel (MPI_Comm_split)", nullptr, 0);
  MPI_Comm out = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split(impl_->comm, color, key, &out), "MPI_Comm_split");
  auto impl = adopt(out);
  impl->counters = impl_->counters;
  impl->watch = impl_->watch;
  impl->node_of = translate_nodes(*impl_, out);
  return Communicator(std::move(impl));
}

void Communicator::learn_nodes() const {
  if (impl_->t) return transport::learn_nodes(*impl_->t);
  const Communicator shared = split_shared();
  // A node's id: the lowest rank of this communicator on it (rank order is the caller's).
  const std::int64_t lowest = shared.all_reduce_min(std::int64_t{rank()});
  const auto all = control_exchange(*impl_, "learn_nodes (node ids)", &lowest, 1);
  const std::vector<int> ids(all.begin(), all.end());
  impl_->node_of = std::make_shared<const std::vector<int>>(std::move(ids));
}

Communicator Communicator::split_shared() const {
  if (impl_->t) return Communicator(adopt_transport(transport::split_shared(*impl_->t)));
  control_exchange(*impl_, "split_shared (MPI_Comm_split_type)", nullptr, 0);
  MPI_Comm out = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split_type(impl_->comm, MPI_COMM_TYPE_SHARED, impl_->rank, MPI_INFO_NULL, &out),
            "MPI_Comm_split_type(SHARED)");
  auto impl = adopt(out);
  impl->watch = std::make_shared<Watch>(*impl_->watch);
  return Communicator(std::move(impl));
}

NodeTopology Communicator::node_topology(int ranks_per_node) const {
  const int P = size();
  agree(static_cast<std::uint64_t>(static_cast<std::int64_t>(ranks_per_node)), "ranks_per_node");
  NodeTopology t;
  if (ranks_per_node > 0) {
    BURST_CHECK(P % ranks_per_node == 0, InvalidArgument, "ranks_per_node=", ranks_per_node,
                " does not divide the ", P, " ranks");
    t.ranks_per_node = ranks_per_node;
    t.nodes = P / ranks_per_node;
    t.node = rank() / ranks_per_node;
    t.local_rank = rank() % ranks_per_node;
    return t;
  }
  const Communicator shared = split_shared();
  const std::int64_t L = shared.size();
  const std::int64_t lo = all_reduce_min(L), hi = all_reduce_max(L);
  BURST_CHECK(lo == hi, InvalidArgument, "nodes have unequal rank counts (min ", lo, ", max ", hi,
              "); the double ring needs the same ranks per node");
  // Node-contiguous: rank = node·L + local, i.e. the shared communicator's lowest world rank is
  // rank − local_rank on every rank.
  const std::int64_t contiguous = (rank() % L == shared.rank()) ? 1 : 0;
  BURST_CHECK(all_reduce_min(contiguous) == 1, InvalidArgument, "ranks are not node-contiguous (rank = node*",
              L,
              " + local_rank); reorder the "
              "launch (e.g. mpirun --map-by node:PE=...) or pass ranks_per_node");
  t.ranks_per_node = static_cast<int>(L);
  t.nodes = P / static_cast<int>(L);
  t.node = rank() / static_cast<int>(L);
  t.local_rank = shared.rank();
  return t;
}

Request Communicator::isend(ByteBuffer buffer, int dest, int tag) const {
  BURST_CHECK(dest >= 0 && dest < size(), InvalidArgument, "isend to rank ", dest, " of ", size());
  BURST_CHECK(tag >= 0 && tag < kControlTag, InvalidArgument, "isend tag ", tag, " outside [0, ", kControlTag,
              ")");
  const int count = to_int_count(static_cast<std::int64_t>(buffer.size()), "isend");
  Request r;
  r.state_->buffer = std::move(buffer);
  r.state_->owner = impl_;
  r.state_->peer = dest;
  r.state_->tag = tag;
  r.state_->send = true;
  if (impl_->t) {
    r.state_->pending = transport::isend(impl_->t, r.state_->buffer, dest, tag);
    return r;
  }
  check_mpi(MPI_Isend(r.state_->buffer.data(), count, MPI_BYTE, dest, tag, impl_->comm, &r.state_->request),
            "MPI_Isend");
  impl_->counters->bytes_sent += count;
  if (off_node(*impl_, dest)) impl_->counters->bytes_sent_inter_node += count;
  impl_->counters->messages_sent += 1;
  return r;
}

Request Communicator::irecv(ByteBuffer buffer, int source, int tag) const {
  BURST_CHECK(source >= 0 && source < size(), InvalidArgument, "irecv from rank ", source, " of ", size());
  BURST_CHECK(tag >= 0 && tag < kControlTag, InvalidArgument, "irecv tag ", tag, " outside [0, ", kControlTag,
              ")");
  const int count = to_int_count(static_cast<std::int64_t>(buffer.size()), "irecv");
  Request r;
  r.state_->buffer = std::move(buffer);
  r.state_->owner = impl_;
  r.state_->peer = source;
  r.state_->tag = tag;
  if (impl_->t) {
    r.state_->pending = transport::irecv(impl_->t, r.state_->buffer, source, tag);
    return r;
  }
  check_mpi(MPI_Irecv(r.state_->buffer.data(), count, MPI_BYTE, source, tag, impl_->comm, &r.state_->request),
            "MPI_Irecv");
  impl_->counters->bytes_received += count;
  return r;
}

void Communicator::set_timeout(double seconds) const {
  BURST_CHECK(std::isfinite(seconds) && seconds >= 0, InvalidArgument, "communication timeout ", seconds,
              " s must be finite and >= 0 (0: wait forever)");
  impl_->watch->timeout_seconds = seconds;
}
double Communicator::timeout() const { return impl_->watch->timeout_seconds; }
void Communicator::set_activity(const std::string& activity) const {
  impl_->watch->activity = activity;
  impl_->watch->step = -1;
}
const std::string& Communicator::activity() const { return impl_->watch->activity; }
void Communicator::set_step(int step, int steps) const {
  impl_->watch->step = step;
  impl_->watch->steps = steps;
}

const CommCounters& Communicator::counters() const { return *impl_->counters; }
void Communicator::reset_counters() const { *impl_->counters = CommCounters{}; }

std::string mpi_library_version() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int len = 0;
  MPI_Get_library_version(text, &len);
  std::string out(text, static_cast<std::size_t>(std::max(len, 0)));
  const std::size_t eol = out.find_first_of("\r\n");
  if (eol != std::string::npos) out.resize(eol);
  while (!out.empty() && (out.back() == ' ' || out.back() == '\0')) out.pop_back();
  return out;
}

std::string mpi_standard_version() {
  int major = 0, minor = 0;
  MPI_Get_version(&major, &minor);
  return std::to_string(major) + "." + std::to_string(minor);
}

}  // namespace burst
