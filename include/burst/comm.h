// burst/comm.h — the communication layer over MPI (the only module that touches MPI).
//
// Owns: Communicator, an RAII handle on an MPI_Comm_dup of the caller's communicator, plus
// the point-to-point and collective operations the strategies need, with byte/message
// counters and a progress hook for overlapping transfers with kernel tiles.
// Invariants: never calls MPI_Init/MPI_Finalize; <mpi.h> is included only by src/comm_mpi*.cc
// (users holding an MPI_Comm use burst/comm_interop.h or pass MPI_Comm_c2f(comm)).
// Payloads are bytes (MPI_BYTE): a caller lays out its fields (any dtype, each at an offset
// aligned to its element size; src/wire_layout.h) and sends the buffer; counts are bytes, int64,
// and must fit MPI's int counts (≤ 2^31 − 1 bytes per message or block; checked,
// Error(Unsupported) otherwise). The reductions (reduce_scatter, all_reduce_sum) are fp32 sums
// and count fp32 values.
// Byte counting convention (CommCounters::bytes_sent, per rank, algorithm-independent so that
// it matches the formulas of docs/strategies.md): point-to-point = message size; all-gather(v)
// = own block × (P−1); reduce-scatter and all-to-all(v) = Σ blocks destined to other ranks;
// all-reduce = 2·(P−1)/P·count (ring); barrier / agreement traffic is not counted.
// Failure policy: agreement helpers let every rank reach the same verdict before any payload
// moves; once payload is in flight a failure should call abort() (rank-tagged, no hang).
// Watchdog: every wait (Request, RequestSet, each collective, communicator creation) polls its
// requests; when none completes for timeout() seconds (a dead or absent peer, a cut link) the
// rank prints the operation, the ranks that never arrived and the timeout, and aborts the job
// (docs/multinode.md § No hang). Nothing blocks outside it: payload collectives run as MPI-3
// non-blocking collectives (MPI_Iallreduce, ...), dups as MPI_Comm_idup, and the splits (which
// have no non-blocking form) only after a control exchange showed every rank present.
// Control exchanges (agree, agree_verdict, the scalar reductions, exchange, roll_call) are
// point-to-point on a reserved tag (32767), one fixed ~250 B record to every peer: a waiting
// rank knows exactly which peers have not arrived, and a peer that arrived at a different
// control exchange is recognised (every rank throws the same Error naming each rank's call).
// Payload collectives cannot tell which ranks are missing; their message says so.
// Over a Transport (burst/comm_transport.h, e.g. a torch.distributed gloo group;
// from_transport) every operation keeps these contracts; channels and splits are tag namespaces
// on the same group, Request::test() cannot poll (false until waited), and the watchdog ends
// this process (the group has no job-wide abort).
// Does not: know about attention, masks or layouts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "burst/error.h"

namespace burst {

class Transport;

/// Payload counters of one logical channel group (a Communicator and its channel() dups).
struct CommCounters {
  std::int64_t bytes_sent = 0;
  /// The part of bytes_sent addressed to ranks on other nodes (known after
  /// Communicator::learn_nodes(); 0 before). Collectives by the same convention, counting the
  /// blocks destined to other nodes (all-reduce: its bytes × the share of peers off-node).
  std::int64_t bytes_sent_inter_node = 0;
  std::int64_t messages_sent = 0;
  std::int64_t bytes_received = 0;
};

/// Node topology for the double ring: P = nodes · ranks_per_node, rank = node·L + local_rank.
struct NodeTopology {
  int nodes = 1, ranks_per_node = 1, node = 0, local_rank = 0;
};

/// A message's bytes: what isend/irecv own while in flight. operator new aligns the storage to
/// __STDCPP_DEFAULT_NEW_ALIGNMENT__ (16 B on x86-64), enough for every field a layout holds.
using ByteBuffer = std::vector<std::byte>;

/// One in-flight non-blocking send or receive. Owns its byte buffer while in flight (so the
/// memory cannot be freed or reused under MPI); take() hands it back once complete.
/// The destructor waits for completion (never leaves MPI writing into freed memory); on an
/// error path prefer Communicator::abort() so that no peer waits forever.
class Request {
 public:
  Request();
  ~Request();
  Request(Request&&) noexcept;
  Request& operator=(Request&&) noexcept;
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;

  /// True when no operation is pending (completed, taken, or never started).
  bool done() const;
  /// Non-blocking completion check (MPI_Test); advances the MPI progress engine.
  bool test();
  /// Blocks until complete (MPI_Wait). Throws Error(Communication) on MPI failure.
  void wait();
  /// Waits, then returns the buffer (for a receive: the received data).
  ByteBuffer take();
  /// The owned buffer, readable while a send is in flight (MPI ≥ 3.0 allows reading a send
  /// buffer; a receive buffer must not be read before completion). Null after take().
  const std::byte* data() const;

  struct State;

 private:
  friend class Communicator;
  friend class RequestSet;
  std::unique_ptr<State> state_;
};

/// A group of requests completed together (one ring step's send/recv pairs).
class RequestSet {
 public:
  /// Adds a request; returns its index for take().
  std::size_t add(Request&& request);
  /// MPI_Testall over the pending requests: the progress hook the kernels call between tiles.
  /// Returns true when all are complete.
  bool progress();
  /// Waits for all (MPI_Waitall); returns the seconds spent blocked.
  double wait_all();
  /// Buffer of request i after wait_all().
  ByteBuffer take(std::size_t i);
  Request& operator[](std::size_t i) { return requests_[i]; }
  std::size_t size() const { return requests_.size(); }
  bool empty() const { return requests_.empty(); }
  void clear();

 private:
  std::vector<Request> requests_;
};

class Communicator {
 public:
  /// Dup of MPI_COMM_WORLD (MPI_Comm_idup under the watchdog with `timeout_seconds`, which
  /// becomes the new communicator's timeout()), after a roll call on MPI_COMM_WORLD that names a
  /// rank that never comes (P − 1 records of ~250 B per rank, tag 32767: a receive with
  /// MPI_ANY_TAG posted on MPI_COMM_WORLD meanwhile could take one). Collective over
  /// MPI_COMM_WORLD. Throws Error(Communication) if MPI is not initialised,
  /// Error(InvalidArgument) for a negative or non-finite timeout.
  static Communicator world(double timeout_seconds = 300);
  /// Dup of the communicator whose Fortran handle is `handle` (MPI_Comm_c2f / mpi4py py2f()),
  /// watched like world() (the roll call runs on that communicator). Collective over that
  /// communicator. Throws Error(Communication) if MPI is not initialised or the handle is
  /// MPI_COMM_NULL.
  static Communicator from_fortran(std::int64_t handle, double timeout_seconds = 300);
  /// A Communicator over a process group burst does not own (burst/comm_transport.h), watched
  /// like world() (a roll call on the group names a rank that never comes). Collective over the
  /// group; MPI need not be initialised. Throws Error(InvalidArgument) for a null transport or a
  /// negative or non-finite timeout.
  static Communicator from_transport(std::shared_ptr<Transport> group, double timeout_seconds = 300);

  int rank() const;
  int size() const;

  /// A new logical channel: MPI_Comm_dup of this communicator (messages on different channels
  /// never match) that shares this communicator's counters. Collective.
  Communicator channel() const;
  /// MPI_Comm_split(color, key) with fresh counters. Collective.
  Communicator split(int color, int key) const;
  /// MPI_Comm_split(color, key) sharing this communicator's counters (a sub-group channel, e.g.
  /// usp's Ulysses and ring groups, whose traffic belongs to the same pass). Collective.
  Communicator split_channel(int color, int key) const;
  /// Ranks sharing this rank's node (MPI_Comm_split_type SHARED). Collective.
  Communicator split_shared() const;
  /// Learns which ranks share a node (MPI_Comm_split_type SHARED, then an all-gather of node
  /// ids), so that the counters split bytes_sent into intra- and inter-node. Channels made
  /// afterwards share the map; split_channel() / split() translate it. Collective.
  void learn_nodes() const;
  /// Node topology. ranks_per_node > 0 overrides discovery (emulated nodes: rank r is on node
  /// r / L); 0 discovers it with split_shared(). Collective; every rank passes the same value.
  /// Throws Error(InvalidArgument) (all ranks) if P % L ≠ 0, nodes have unequal rank counts,
  /// or ranks are not node-contiguous (rank = node·L + local_rank).
  NodeTopology node_topology(int ranks_per_node) const;

  /// Non-blocking point-to-point of buffer.size() bytes (MPI_BYTE); the request owns `buffer`
  /// until take(). Tags in [0, 32767) (32767 carries control exchanges). Throws
  /// Error(InvalidArgument) for a peer outside [0, P) or a tag outside that range,
  /// Error(Unsupported) past 2^31 − 1 bytes.
  Request isend(ByteBuffer buffer, int dest, int tag) const;
  /// Receives exactly buffer.size() bytes from `source` into `buffer`.
  Request irecv(ByteBuffer buffer, int source, int tag) const;

  /// recv [P · send.size() bytes] ← every rank's send, in rank order. Collective, equal sizes.
  /// Throws Error(Internal) when recv.size() ≠ P · send.size().
  void all_gather(std::span<const std::byte> send, std::span<std::byte> recv) const;
  /// recv [Σ bytes] ← rank r's send [bytes[r]] at byte offset Σ_{i<r} bytes[i]. Collective;
  /// `bytes` identical on all ranks, send.size() = bytes[rank()], recv.size() = Σ bytes.
  void all_gather_v(std::span<const std::byte> send, const std::vector<std::int64_t>& bytes,
                    std::span<std::byte> recv) const;
  /// send [P blocks of send.size()/P bytes]: block r goes to rank r; recv (same size): block r
  /// came from rank r. Collective, equal sizes.
  void all_to_all(std::span<const std::byte> send, std::span<std::byte> recv) const;
  /// Variable blocks: send_bytes[r] bytes to rank r (consecutive blocks), recv_bytes[r] from
  /// rank r. Collective; each pair's sizes must match; the spans hold Σ of their sizes.
  void all_to_all_v(std::span<const std::byte> send, const std::vector<std::int64_t>& send_bytes,
                    std::span<std::byte> recv, const std::vector<std::int64_t>& recv_bytes) const;
  /// Sum over ranks of send [Σ counts]; rank r receives block r (counts[r] floats) in recv,
  /// summed in rank order in fp32 (the same bits on every run): an all-to-all of the blocks and a
  /// local sum, not MPI_Ireduce_scatter (docs/cost_model.md § Calibration). Collective.
  void reduce_scatter(const float* send, const std::vector<std::int64_t>& counts, float* recv) const;
  /// In-place sum over ranks of data [count].
  void all_reduce_sum(float* data, std::int64_t count) const;
  /// Max / min / sum of a value over ranks (control data; not counted as payload; a control
  /// exchange, so a timeout names the absent ranks). Collective.
  double all_reduce_max(double value) const;
  std::int64_t all_reduce_max(std::int64_t value) const;
  std::int64_t all_reduce_min(std::int64_t value) const;
  std::int64_t all_reduce_sum(std::int64_t value) const;
  /// MPI_Ibarrier under the watchdog (tight synchronisation for timing; a timeout cannot name
  /// the absent ranks: use roll_call for that). Collective.
  void barrier() const;
  /// Control all-gather: every rank's `values` (at most 6 int64, the same count on every rank),
  /// rank-major [P·n]. `what` names the call site in the watchdog's message and must be the same
  /// on every rank. Collective. Throws Error(InvalidArgument) on every rank when ranks are at
  /// different calls (another `what` or count), naming each rank's call and activity.
  std::vector<std::int64_t> exchange(const std::vector<std::int64_t>& values, const std::string& what) const;
  /// An exchange of no values: returns once every rank has arrived at `what`; on a timeout the
  /// watchdog names those that did not. Collective.
  void roll_call(const std::string& what) const;
  /// Every rank's byte string, in rank order (sizes by exchange, then MPI_Iallgatherv; not
  /// counted as payload). For control data of any length (the Python module's agreement).
  /// Collective; throws like exchange.
  std::vector<std::string> all_gather_bytes(const std::string& mine, const std::string& what) const;

  /// Agreement: every rank passes a fingerprint of the arguments that must be identical; if
  /// any differs, every rank throws the same Error(InvalidArgument) naming `what` and the lowest
  /// rank that differs from rank 0 (one control exchange — never a hang). Collective.
  void agree(std::uint64_t fingerprint, const std::string& what) const;
  /// Verdict agreement: each rank reports whether its local checks passed and, if not, why.
  /// If any rank failed, every rank throws the same Error(kind, "rank R: <message of the lowest
  /// failing rank R>"). Collective.
  void agree_verdict(bool ok, const std::string& message, ErrorKind kind) const;
  /// Runs `check` locally, catching a burst::Error, then agree_verdict on its outcome.
  template <typename F>
  void agree_on(F&& check) const {
    bool ok = true;
    std::string msg;
    ErrorKind kind = ErrorKind::InvalidArgument;
    try {
      check();
    } catch (const Error& e) {
      ok = false;
      msg = e.message();
      kind = e.kind();
    }
    agree_verdict(ok, msg, kind);
  }

  /// Communication watchdog. A wait on this communicator (a Request's, a RequestSet's, any
  /// collective's) during which no request completes for `seconds` prints "[rank r/P (world w)
  /// on host H] burst comm watchdog: ..." naming the call, the peers it waits on (rank, tag,
  /// bytes), the activity and step set below, then aborts the job (MPI_Abort, error code 5).
  /// seconds = 0 waits forever; default 300 (tools read BURST_COMM_TIMEOUT, DistAttention takes
  /// DistConfig::comm_timeout_seconds). Shared with channel() / split_channel() dups (one
  /// setting per logical communicator); split() and split_shared() copy it. Not collective;
  /// ranks may differ. Throws Error(InvalidArgument) for a negative or non-finite value.
  void set_timeout(double seconds) const;
  double timeout() const;
  /// What the ranks of this communicator are doing, for the watchdog's message: `activity`
  /// (e.g. "burst forward"; resets the step) and the ring step in [0, steps) (steps: the end
  /// of the ring, e.g. the write accumulators' home hops; −1: none). Shared like set_timeout.
  /// Not collective.
  void set_activity(const std::string& activity) const;
  const std::string& activity() const;
  void set_step(int step, int steps) const;

  /// Aborts every rank of the communicator after printing "[rank r/P] message" to stderr.
  /// For failures after payload is in flight (docs/style.md rule 5). Does not return.
  [[noreturn]] void abort(const std::string& message) const;

  /// Counters shared by this communicator and its channel() dups.
  const CommCounters& counters() const;
  void reset_counters() const;

  struct Impl;
  explicit Communicator(std::shared_ptr<Impl> impl);
  Impl& impl() const { return *impl_; }

 private:
  std::shared_ptr<Impl> impl_;
};

/// The MPI library burst runs on: the first line of MPI_Get_library_version (e.g. "Open MPI
/// v4.1.4, ...") and the MPI standard version "major.minor". Callable before MPI_Init and after
/// MPI_Finalize. Not collective.
std::string mpi_library_version();
std::string mpi_standard_version();

}  // namespace burst
