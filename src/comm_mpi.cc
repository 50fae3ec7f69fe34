// The only translation unit that includes <mpi.h> (docs/style.md layers): Communicator, Request
// and RequestSet over MPI. Every MPI return code is checked and turned into
// Error(Communication) naming the call. Every wait is the watchdog's (wait_watched below); the
// control exchanges (control_exchange) let it name the ranks that never arrived. Longer than the
// ~500-line aim because it is the one file allowed to include <mpi.h>.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <thread>
#include <utility>

#include "burst/comm.h"
#include "burst/error.h"
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

namespace {

void check_mpi(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  MPI_Error_string(rc, text, &len);
  BURST_FAIL(Communication, call, " failed: ", std::string(text, static_cast<std::size_t>(len)));
}

void require_initialized() {
  int init = 0, finalized = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&finalized);
  BURST_CHECK(init && !finalized, Communication,
              "MPI is not initialised (or already finalised): burst never calls MPI_Init; call "
              "MPI_Init_thread before creating a Communicator");
}

int to_int_count(std::int64_t count, const char* what) {
  BURST_CHECK(count >= 0 && count <= INT_MAX, Unsupported, what, ": count ", count,
              " exceeds MPI's int count limit ", INT_MAX);
  return static_cast<int>(count);
}

std::shared_ptr<Communicator::Impl> adopt(MPI_Comm comm) {
  auto impl = std::make_shared<Communicator::Impl>();
  impl->comm = comm;
  check_mpi(MPI_Comm_set_errhandler(impl->comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  MPI_Comm_rank(impl->comm, &impl->rank);
  MPI_Comm_size(impl->comm, &impl->size);
  return impl;
}

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

bool off_node(const Communicator::Impl& c, int peer) {
  return c.node_of &&
         (*c.node_of)[static_cast<std::size_t>(peer)] != (*c.node_of)[static_cast<std::size_t>(c.rank)];
}

int off_node_peers(const Communicator::Impl& c) {
  int n = 0;
  for (int r = 0; r < c.size; ++r) n += off_node(c, r) ? 1 : 0;
  return n;
}

std::string describe(const Request::State& r) {
  const Communicator::Impl& c = *r.owner;
  return std::string(r.send ? "send to" : "recv from") + " rank " + std::to_string(r.peer) + " (world " +
         std::to_string(world_rank_of(c, r.peer)) + "), tag " + std::to_string(r.tag) + ", " +
         std::to_string(r.buffer.size()) + " B";
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

// Waits for one request state under its owner's watchdog (never throws: destructors use it).
int wait_state(Request::State& r, const char* call) {
  if (r.request == MPI_REQUEST_NULL) return MPI_SUCCESS;
  if (!r.owner) return MPI_Wait(&r.request, MPI_STATUS_IGNORE);
  return wait_watched(*r.owner, &r.request, 1, call, [&](int) { return describe(r); });
}

std::string others(int P) {
  return P == 2 ? std::string("the other rank") : "the other " + std::to_string(P - 1) + " ranks";
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

// Control exchanges (comm_shared.h): P − 1 records of ~250 B per rank on a reserved tag, where
// MPI_Iallreduce would send log P; a pending receive names a rank that never arrived.
using control::ControlRecord;
using control::kControlTag;
using control::kControlValues;
constexpr const char* kCreating =
    "creating a Communicator (MPI_Comm_idup)";  // payload tags are below it (isend / irecv check)

std::string rank_name(const Communicator::Impl& c, int r) {
  return std::to_string(r) + " (world " + std::to_string(world_rank_of(c, r)) + ")";
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

// ---------------------------------------------------------------- Request / RequestSet

Request::Request() : state_(std::make_unique<State>()) {}
namespace {
// A transport request's description for the watchdog (as describe() for MPI's).
std::string describe_pending(const Request::State& r) {
  return std::string(r.send ? "send to" : "recv from") + " rank " +
         transport::rank_name(*r.pending.owner, r.peer) + ", tag " + std::to_string(r.tag) + ", " +
         std::to_string(r.buffer.size()) + " B";
}
void wait_pending(Request::State& r, const char* call) {
  transport::wait(r.pending, call, [&] { return describe_pending(r); });
}
}  // namespace

Request::~Request() {
  if (state_ && state_->pending.op) wait_pending(*state_, "wait (request destructor)");
  if (state_ && state_->request != MPI_REQUEST_NULL) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) wait_state(*state_, "MPI_Wait (request destructor)");
  }
}
Request::Request(Request&&) noexcept = default;
Request& Request::operator=(Request&& other) noexcept {
  if (this != &other) {
    if (state_ && state_->pending.op) wait_pending(*state_, "wait (request assignment)");
    if (state_ && state_->request != MPI_REQUEST_NULL) wait_state(*state_, "MPI_Wait (request assignment)");
    state_ = std::move(other.state_);
  }
  return *this;
}

bool Request::done() const { return !state_ || (state_->request == MPI_REQUEST_NULL && !state_->pending.op); }

bool Request::test() {
  if (done()) return true;
  if (state_->pending.op) return false;  // a Transport cannot poll (comm.h)
  int flag = 0;
  check_mpi(MPI_Test(&state_->request, &flag, MPI_STATUS_IGNORE), "MPI_Test");
  return flag != 0;
}

void Request::wait() {
  if (done()) return;
  if (state_->pending.op) return wait_pending(*state_, "wait");
  check_mpi(wait_state(*state_, "MPI_Wait"), "MPI_Wait");
}

ByteBuffer Request::take() {
  wait();
  BURST_CHECK(state_ != nullptr, Internal, "Request::take on a moved-from request");
  return std::move(state_->buffer);
}

const std::byte* Request::data() const { return state_ ? state_->buffer.data() : nullptr; }

std::size_t RequestSet::add(Request&& request) {
  requests_.push_back(std::move(request));
  return requests_.size() - 1;
}

bool RequestSet::progress() {
  std::vector<MPI_Request> handles;
  std::vector<std::size_t> index;
  for (std::size_t i = 0; i < requests_.size(); ++i) {
    // A Transport's requests progress on its own threads and cannot be polled (comm.h).
    if (!requests_[i].done() && requests_[i].state_->pending.op) return false;
    if (!requests_[i].done()) {
      handles.push_back(requests_[i].state_->request);
      index.push_back(i);
    }
  }
  if (handles.empty()) return true;
  int flag = 0;
  check_mpi(MPI_Testall(static_cast<int>(handles.size()), handles.data(), &flag, MPI_STATUSES_IGNORE),
            "MPI_Testall");
  // MPI_Testall sets completed handles to MPI_REQUEST_NULL only when all complete; copy back.
  for (std::size_t j = 0; j < index.size(); ++j) requests_[index[j]].state_->request = handles[j];
  return flag != 0;
}

double RequestSet::wait_all() {
  const auto t0 = std::chrono::steady_clock::now();
  for (Request& r : requests_)
    if (!r.done() && r.state_->pending.op) wait_pending(*r.state_, "wait_all");
  std::vector<MPI_Request> handles;
  std::vector<std::size_t> index;
  for (std::size_t i = 0; i < requests_.size(); ++i) {
    if (!requests_[i].done()) {
      handles.push_back(requests_[i].state_->request);
      index.push_back(i);
    }
  }
  if (!handles.empty()) {
    // Every request of a set comes from one logical communicator (its channels share the watch).
    const Request::State& first = *requests_[index[0]].state_;
    const int rc =
        first.owner
            ? wait_watched(
                  *first.owner, handles.data(), static_cast<int>(handles.size()), "MPI_Waitall",
                  [&](int j) { return describe(*requests_[index[static_cast<std::size_t>(j)]].state_); })
            : MPI_Waitall(static_cast<int>(handles.size()), handles.data(), MPI_STATUSES_IGNORE);
    for (std::size_t j = 0; j < index.size(); ++j) requests_[index[j]].state_->request = handles[j];
    check_mpi(rc, "MPI_Waitall");
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

ByteBuffer RequestSet::take(std::size_t i) {
  BURST_CHECK(i < requests_.size(), Internal, "RequestSet::take(", i, ") of ", requests_.size());
  return requests_[i].take();
}

void RequestSet::clear() {
  wait_all();
  requests_.clear();
}

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
