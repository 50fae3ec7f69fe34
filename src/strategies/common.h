// src/strategies/common.h — small helpers shared by the strategy files: packing BSHD / row
// tensors into the fields of a message (a ByteBuffer laid out by a WireLayout, each tensor in
// its own dtype) and viewing them there, content fingerprints, the
// kernel parameters every step uses (mask, scale, global positions, threads, progress hook),
// the buffer pool that keeps message and partial buffers alive across passes, and the pass
// shell (times, abort on failure) of the strategies.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "burst/attention.h"
#include "burst/comm.h"
#include "burst/tensor.h"
#include "kernels/step.h"
#include "strategies/strategy_impl.h"
#include "wire_layout.h"

namespace burst::strategies {

/// Bytes of one fp32 value (partials, accumulators and row vectors are fp32).
constexpr std::int64_t kF32 = 4;

/// Elements [begin, end) of dimension `dim` of `t` (same strides, data moved to element begin).
TensorView narrow(const TensorView& t, int dim, std::int64_t begin, std::int64_t end);

/// The global positions of rank `rank`'s tokens in the plan's layout [S_local].
const std::vector<std::int64_t>& rank_positions(const Setup& setup, int rank);
/// Visible (q, k) pairs per (batch, head) between rank q_rank's queries and rank kv_rank's keys
/// (Plan::block_pairs).
std::int64_t block_pairs(const Setup& setup, int q_rank, int kv_rank);

/// Contiguous BSHD view [B, S, H, D] over `data`.
TensorView bshd_view(const float* data, std::int64_t B, std::int64_t S, std::int64_t H, std::int64_t D);
/// Contiguous row view [B, H, S] over `data`.
TensorView rows_view(const float* data, std::int64_t B, std::int64_t H, std::int64_t S);

/// Copies the elements of `src` (any strides, up to 4 dims) in row-major order into field i of
/// the message at `base` laid out by `layout`. Throws Error(Internal) when src's dtype or element
/// count is not the field's.
void pack_field(const WireLayout& layout, std::size_t i, const TensorView& src, std::byte* base);
/// Contiguous view of `shape` over field i of the message at `base` (the field's dtype; the
/// shape's element count must be the field's count, else Error(Internal)).
TensorView field_view(const WireLayout& layout, std::size_t i, const std::byte* base,
                      std::vector<std::int64_t> shape);
/// The fp32 values of a buffer that holds fp32 scratch (partials, accumulators): bytes / 4 of them.
float* f32_data(ByteBuffer& buffer);
const float* f32_data(const ByteBuffer& buffer);
class BufferPool;

/// Owning contiguous storage of `dtype` (f32, or bf16/f16 as their 16-bit patterns),
/// zero-initialised: burst::Tensor's twin for inputs a strategy keeps in their 16-bit dtype
/// (Ulysses' gathered and saved Q, K, V, dO). Not copyable (views point into it); movable.
class TypedTensor {
 public:
  TypedTensor() = default;
  TypedTensor(std::vector<std::int64_t> shape, DType dtype);
  TypedTensor(TypedTensor&&) noexcept = default;
  TypedTensor& operator=(TypedTensor&&) noexcept = default;
  TypedTensor(const TypedTensor&) = delete;
  TypedTensor& operator=(const TypedTensor&) = delete;
  TensorView view() const;
  bool empty() const { return shape_.empty(); }
  /// Hands the storage back (e.g. to a BufferPool); the tensor is empty afterwards.
  ByteBuffer release();

 private:
  friend TypedTensor pooled_tensor(BufferPool& pool, std::vector<std::int64_t> shape, DType dtype);
  ByteBuffer bytes_;
  std::vector<std::int64_t> shape_;
  DType dtype_ = DType::F32;
};

/// Copies row-major `src` (view.numel() values) into `view` (any strides).
void unpack_into(const float* src, const TensorView& view);
/// Sets every element of `view` to `value`.
void fill_view(const TensorView& view, float value);

/// Byte buffers (messages, fp32 partials and accumulators) recycled within a pass and kept across passes, so
/// that a model calling attention every step does not page-fault fresh message / partial buffers on every
/// call (the kernel's workspace does the same for tiles; docs/design.md § Memory reuse: without either, a
/// third of a 2-rank backward at S = 2048 was page faults). Buffers are matched by exact size (a pass asks
/// for the same few sizes every time); at most kMaxHeld free buffers are kept, the oldest dropped.
/// Counts the bytes the current pass holds at once (its peak), as DistStats::peak_buffer_bytes
/// reports. Not thread-safe: one pool per executor, used by one pass at a time.
class BufferPool {
 public:
  static constexpr std::size_t kMaxHeld = 32;
  /// A buffer of exactly `bytes` bytes, contents unspecified (a fresh one is zeroed).
  ByteBuffer get(std::int64_t bytes);
  /// As get, every byte 0 (every fp32 value 0).
  ByteBuffer get_zeroed(std::int64_t bytes);
  /// Hands a buffer back for reuse (any size; empty buffers are dropped).
  void put(ByteBuffer buffer);
  /// Starts a pass's accounting: `held_bytes` already held (e.g. a payload packed before).
  void begin_pass(std::int64_t held_bytes = 0);
  /// Largest number of bytes handed out and not yet returned at once since begin_pass.
  std::int64_t peak_bytes() const { return peak_; }
  /// Bytes of the free buffers kept for the next pass.
  std::int64_t kept_bytes() const;

 private:
  std::vector<ByteBuffer> free_;     // oldest first
  std::int64_t out_ = 0, peak_ = 0;  // bytes handed out and not returned; their maximum
};
/// A TypedTensor over a buffer of `pool` (no zeroing: contents unspecified, the caller overwrites
/// every element); give it back with pool.put(t.release()).
TypedTensor pooled_tensor(BufferPool& pool, std::vector<std::int64_t> shape, DType dtype);

/// 64-bit fingerprint of the shapes, dtypes and contents of `views` (any strides, up to 4 dims),
/// FNV-1a over 32-bit words in four interleaved lanes (16-bit views: their bytes as words). Not
/// cryptographic: it tells whether a backward's inputs are the ones a forward saw (ulysses' saved contexts).
/// Not collective. Cost: one read of every element (≈ 4 GB/s on one core).
std::uint64_t content_fingerprint(std::initializer_list<TensorView> views);

/// Kernel parameters of a step for the internal kernel entry (kernels/step.h): queries at q_pos,
/// keys at kv_pos (global, increasing), the mask resolved once per DistAttention
/// (setup.resolved, over (S_global, S_global)); the progress hook only when cfg.overlap (not
/// copied: it must outlive the kernel calls made with the result). Cheap: no validation, no
/// copy of the mask.
kernels::KernelParams step_params(const Setup& setup, const std::int64_t* q_pos, const std::int64_t* kv_pos,
                                  const std::function<void()>* progress);

/// Rows [q0, q1) × [k0, k1) of one kernel call (backward_spans).
struct KernelSpan {
  std::int64_t q0 = 0, q1 = 0, k0 = 0, k1 = 0;
};

/// How a backward step's kernel work is cut into calls: one call per piece of the key rows,
/// each on the query rows from the first to the last query piece that the mask does not leave
/// Empty against it (hull classification, ResolvedMask::classify); key pieces nobody sees are
/// dropped. Pieces: the runs of consecutive positions (a zigzag block's two chunks), cut at the
/// middle row too (so adjacent chunks, or a contiguous block, are halves as well). More than two
/// runs on either side (striped), or an empty side: the whole block in one call,
/// [0, n_q) × [0, n_kv).
/// Why: the backward kernel keeps the dK, dV accumulators and packed K, V of every kv tile of
/// its call live while it sweeps each q tile, so a call over both chunks of a zigzag block
/// streams twice the kv-side state per q tile of a call over one (past L2: a step with two
/// live key chunks ran slower than one with two live query chunks of the same work), and
/// query rows that see no key of the call cost packing and a zero dQ write. Pure; exact (only
/// the order of dQ's fp32 sums over the calls changes). The positions are increasing.
std::vector<KernelSpan> backward_spans(const ResolvedMask& mask, const std::int64_t* q_pos, std::int64_t n_q,
                                       const std::int64_t* kv_pos, std::int64_t n_kv);

/// Seconds a pass spent in kernels and blocked in communication (for DistStats).
struct PassTimes {
  double compute_seconds = 0, comm_seconds = 0;
};

/// Copies one pass's measurements into the DistStats fields a strategy owns.
inline void fill_stats(DistStats& stats, const PassTimes& t, std::int64_t visible_pairs,
                       std::int64_t peak_buffer_bytes) {
  stats.compute_seconds = t.compute_seconds;
  stats.exposed_comm_seconds = t.comm_seconds;
  stats.visible_pairs = visible_pairs;
  stats.peak_buffer_bytes = peak_buffer_bytes;
}

/// Adds the wall time of its scope to *sink (no-op for nullptr).
class Stopwatch {
 public:
  explicit Stopwatch(double* sink) : sink_(sink), t0_(std::chrono::steady_clock::now()) {}
  ~Stopwatch() {
    if (sink_) *sink_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  }
  Stopwatch(const Stopwatch&) = delete;
  Stopwatch& operator=(const Stopwatch&) = delete;

 private:
  double* sink_;
  std::chrono::steady_clock::time_point t0_;
};

/// One step's measurements on this rank (DistConfig::timeline; StepRecord gives the meaning of
/// each field): seconds in kernels (wall and thread CPU), blocked in waits, in copies; bytes.
struct StepTimes {
  double compute = 0, compute_cpu = 0, wait = 0, copy = 0;
  std::int64_t sent = 0, received = 0;
};

/// CPU seconds of the calling thread (CLOCK_THREAD_CPUTIME_ID).
double thread_cpu_seconds();

/// Where a pass writes its per-step measurements: `steps` (resized to n zeroed records) when the
/// caller records, else one scratch record, so that the step loop writes unconditionally and
/// only the thread CPU clock is read on request (on()).
class StepLog {
 public:
  StepLog(std::vector<StepTimes>* steps, int n) : steps_(steps) {
    if (steps_) steps_->assign(static_cast<std::size_t>(n), StepTimes{});
  }
  bool on() const { return steps_ != nullptr; }
  StepTimes& at(int t) { return steps_ ? (*steps_)[static_cast<std::size_t>(t)] : scratch_; }
  /// Runs fn() as step t's kernel work: its wall seconds go to the record and to *total.
  template <typename F>
  void compute(int t, double& total, F&& fn) {
    const double c0 = on() ? thread_cpu_seconds() : 0.0;
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    total += s;
    StepTimes& r = at(t);
    r.compute += s;
    if (on()) r.compute_cpu += thread_cpu_seconds() - c0;
  }

 private:
  std::vector<StepTimes>* steps_;
  StepTimes scratch_;
};

/// Appends `steps` to setup.cfg.timeline as pass `pass` ("fwd" / "bwd") of this rank, record i
/// being step i (no-op when the configuration has no timeline). whole_pass: one record that
/// stands for the whole pass (StepRecord::whole_pass).
void record_timeline(const Setup& setup, const char* pass, const std::vector<StepTimes>& steps,
                     bool whole_pass = false);

/// The shell the peer strategies share: the numbers they report come from their pure plan
/// (plan_strategies.h); a pass's times are measured here (the façade aborts on failure).
class PlannedStrategy : public Strategy {
 protected:
  /// Not collective. Throws Error(Internal) if the configuration has no strategy plan (it passed
  /// validation, so it must have one).
  explicit PlannedStrategy(const Setup& setup);
  /// Runs pass(PassTimes&) and fills the DistStats fields the strategy owns (peak: the plan's
  /// bound on the pass's buffers, peak_fwd_, peak_bwd_ or peak_bwd_stateless_).
  template <typename F>
  void run(std::int64_t peak, DistStats& stats, F&& pass) const {
    PassTimes t;
    pass(t);
    fill_stats(stats, t, pairs_, peak);
  }

  Communicator comm_;
  std::int64_t pairs_ = 0, peak_fwd_ = 0, peak_bwd_ = 0, peak_bwd_stateless_ = 0;
};

}  // namespace burst::strategies
