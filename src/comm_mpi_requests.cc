// Request and RequestSet over MPI or a Transport (burst/comm.h): waits under the owner's watchdog
// (comm_mpi.cc wait_watched), naming each pending send or receive when it fires.
#include <mpi.h>

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "burst/comm.h"
#include "burst/error.h"
#include "comm_mpi_internal.h"

namespace burst {

namespace {

std::string describe(const Request::State& r) {
  const Communicator::Impl& c = *r.owner;
  return std::string(r.send ? "send to" : "recv from") + " rank " + std::to_string(r.peer) + " (world " +
         std::to_string(world_rank_of(c, r.peer)) + "), tag " + std::to_string(r.tag) + ", " +
         std::to_string(r.buffer.size()) + " B";
}

// Waits for one request state under its owner's watchdog (never throws: destructors use it).
int wait_state(Request::State& r, const char* call) {
  if (r.request == MPI_REQUEST_NULL) return MPI_SUCCESS;
  if (!r.owner) return MPI_Wait(&r.request, MPI_STATUS_IGNORE);
  return wait_watched(*r.owner, &r.request, 1, call, [&](int) { return describe(r); });
}

}  // namespace

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

}  // namespace burst
