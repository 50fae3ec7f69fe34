// Helpers shared by the strategy files (see common.h).
#include "strategies/common.h"

#include <omp.h>
#include <time.h>

#include <algorithm>
#include <array>
#include <cstring>

#include "burst/dispatch.h"
#include "burst/error.h"
#include "plan_strategies.h"

namespace burst::strategies {

TensorView bshd_view(const float* data, std::int64_t B, std::int64_t S, std::int64_t H, std::int64_t D) {
  return make_view(data, {B, S, H, D});
}

TensorView narrow(const TensorView& t, int dim, std::int64_t begin, std::int64_t end) {
  const auto d = static_cast<std::size_t>(dim);
  BURST_CHECK(dim >= 0 && dim < t.ndim && 0 <= begin && begin <= end && end <= t.shape[d], Internal,
              "narrow [", begin, ", ", end, ") of dim ", dim, " of ", t.describe());
  TensorView v = t;
  v.shape[d] = end - begin;
  v.data = static_cast<char*>(t.data) + begin * t.stride[d] * static_cast<std::int64_t>(dtype_size(t.dtype));
  return v;
}

const std::vector<std::int64_t>& rank_positions(const Setup& setup, int rank) {
  return setup.plan->layout().positions[static_cast<std::size_t>(rank)];
}

std::int64_t block_pairs(const Setup& setup, int q_rank, int kv_rank) {
  return setup.plan->block_pairs()[static_cast<std::size_t>(q_rank)][static_cast<std::size_t>(kv_rank)];
}

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

void record_timeline(const Setup& setup, const char* pass, const std::vector<StepTimes>& steps,
                     bool whole_pass) {
  if (!setup.cfg.timeline) return;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const StepTimes& s = steps[i];
    StepRecord r;
    r.pass = pass;
    r.rank = setup.rank;
    r.step = static_cast<int>(i);
    r.whole_pass = whole_pass;
    r.compute_seconds = s.compute;
    r.compute_cpu_seconds = s.compute_cpu;
    r.wait_seconds = s.wait;
    r.copy_seconds = s.copy;
    r.bytes_sent = s.sent;
    r.bytes_received = s.received;
    setup.cfg.timeline->add(std::move(r));
  }
}

namespace {

/// Row starts of the runs of consecutive positions in pos[0, n), then n.
std::vector<std::int64_t> position_runs(const std::int64_t* pos, std::int64_t n) {
  std::vector<std::int64_t> starts = {0};
  for (std::int64_t i = 1; i < n; ++i)
    if (pos[i] != pos[i - 1] + 1) starts.push_back(i);
  starts.push_back(n);
  return starts;
}

/// runs (≤ 2, from position_runs) cut at n/2 too: every piece holds at most half the rows, so a
/// rank whose zigzag chunks are adjacent (rank P − 1: chunks P − 1 and P) is cut like the others.
std::vector<std::int64_t> halves(std::vector<std::int64_t> runs, std::int64_t n) {
  const std::int64_t mid = n / 2;
  if (mid > 0 && std::find(runs.begin(), runs.end(), mid) == runs.end()) {
    runs.push_back(mid);
    std::sort(runs.begin(), runs.end());
  }
  return runs;
}

}  // namespace

std::vector<KernelSpan> backward_spans(const ResolvedMask& mask, const std::int64_t* q_pos, std::int64_t n_q,
                                       const std::int64_t* kv_pos, std::int64_t n_kv) {
  const std::vector<KernelSpan> whole = {{0, n_q, 0, n_kv}};
  if (n_q == 0 || n_kv == 0) return whole;
  std::vector<std::int64_t> qr = position_runs(q_pos, n_q), kr = position_runs(kv_pos, n_kv);
  if (qr.size() > 3 || kr.size() > 3) return whole;  // at most two runs each
  qr = halves(std::move(qr), n_q);
  kr = halves(std::move(kr), n_kv);
  std::vector<KernelSpan> out;
  for (std::size_t b = 0; b + 1 < kr.size(); ++b) {
    const std::int64_t k0 = kr[b], k1 = kr[b + 1];
    std::int64_t q0 = -1, q1 = -1;
    for (std::size_t a = 0; a + 1 < qr.size(); ++a) {
      if (mask.classify(q_pos[qr[a]], q_pos[qr[a + 1] - 1], kv_pos[k0], kv_pos[k1 - 1]) == TileClass::Empty)
        continue;
      if (q0 < 0) q0 = qr[a];
      q1 = qr[a + 1];
    }
    if (q0 >= 0) out.push_back({q0, q1, k0, k1});
  }
  return out;
}

TensorView rows_view(const float* data, std::int64_t B, std::int64_t H, std::int64_t S) {
  return make_view(data, {B, H, S});
}

namespace {

/// Calls fn(pointer to a contiguous innermost run, run length) for every innermost run of view.
template <typename F>
void for_each_run(const TensorView& view, F&& fn) {
  BURST_CHECK(view.ndim >= 1 && view.ndim <= 4, Internal, "view with ndim ", view.ndim);
  std::array<std::int64_t, 4> shape{1, 1, 1, 1}, stride{0, 0, 0, 0};
  const int off = 4 - view.ndim;
  for (int i = 0; i < view.ndim; ++i) {
    shape[static_cast<std::size_t>(off + i)] = view.shape[static_cast<std::size_t>(i)];
    stride[static_cast<std::size_t>(off + i)] = view.stride[static_cast<std::size_t>(i)];
  }
  BURST_CHECK(stride[3] == 1 || shape[3] <= 1, Internal, "innermost stride must be 1: ", view.describe());
  for (std::int64_t a = 0; a < shape[0]; ++a)
    for (std::int64_t b = 0; b < shape[1]; ++b)
      for (std::int64_t c = 0; c < shape[2]; ++c)
        fn(view.f32() + a * stride[0] + b * stride[1] + c * stride[2], shape[3]);
}

}  // namespace

void unpack_into(const float* src, const TensorView& view) {
  for_each_run(view, [&](float* p, std::int64_t n) {
    std::memcpy(p, src, static_cast<std::size_t>(n) * sizeof(float));
    src += n;
  });
}

void fill_view(const TensorView& view, float value) {
  for_each_run(view, [&](float* p, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) p[i] = value;
  });
}

namespace {

/// Calls fn(byte pointer, bytes) for every innermost run of view, any dtype.
template <typename F>
void for_each_byte_run(const TensorView& view, F&& fn) {
  const auto es = static_cast<std::int64_t>(dtype_size(view.dtype));
  TensorView as_f32 = view;  // walk the index space with f32 pointer arithmetic, then rescale
  as_f32.dtype = DType::F32;
  const char* base = static_cast<const char*>(view.data);
  const auto* fbase = static_cast<const float*>(view.data);
  for_each_run(as_f32, [&](const float* p, std::int64_t n) { fn(base + (p - fbase) * es, n * es); });
}

}  // namespace

void pack_field(const WireLayout& layout, std::size_t i, const TensorView& src, std::byte* base) {
  const WireField& f = layout[i];
  BURST_CHECK(src.dtype == f.dtype && src.numel() == f.count, Internal, "wire field '", f.name, "' (",
              to_string(f.dtype), " x ", f.count, ") packed from ", src.describe());
  std::byte* dst = base + f.offset;
  for_each_byte_run(src, [&](const char* p, std::int64_t bytes) {
    std::memcpy(dst, p, static_cast<std::size_t>(bytes));
    dst += bytes;
  });
}

TensorView field_view(const WireLayout& layout, std::size_t i, const std::byte* base,
                      std::vector<std::int64_t> shape) {
  const WireField& f = layout[i];
  std::int64_t n = 1;
  for (const std::int64_t x : shape) n *= x;
  BURST_CHECK(n == f.count, Internal, "view of ", n, " elements over wire field '", f.name, "' of ", f.count);
  return make_view(static_cast<const void*>(base + f.offset), f.dtype, shape);
}

float* f32_data(ByteBuffer& buffer) { return static_cast<float*>(static_cast<void*>(buffer.data())); }
const float* f32_data(const ByteBuffer& buffer) {
  return static_cast<const float*>(static_cast<const void*>(buffer.data()));
}

TypedTensor::TypedTensor(std::vector<std::int64_t> shape, DType dtype)
    : shape_(std::move(shape)), dtype_(dtype) {
  std::int64_t n = 1;
  for (const std::int64_t x : shape_) n *= x;
  bytes_.assign(static_cast<std::size_t>(n) * dtype_size(dtype_), std::byte{0});
}

TensorView TypedTensor::view() const {
  return make_view(static_cast<const void*>(bytes_.data()), dtype_, shape_);
}

ByteBuffer TypedTensor::release() {
  ByteBuffer b = std::move(bytes_);
  bytes_.clear();
  shape_.clear();
  return b;
}

TypedTensor pooled_tensor(BufferPool& pool, std::vector<std::int64_t> shape, DType dtype) {
  std::int64_t n = 1;
  for (const std::int64_t x : shape) n *= x;
  TypedTensor t;
  t.bytes_ = pool.get(n * static_cast<std::int64_t>(dtype_size(dtype)));
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  return t;
}

ByteBuffer BufferPool::get(std::int64_t bytes) {
  BURST_CHECK(bytes >= 0, Internal, "buffer of ", bytes, " bytes");
  out_ += bytes;
  peak_ = std::max(peak_, out_);
  for (std::size_t i = free_.size(); i-- > 0;) {
    if (static_cast<std::int64_t>(free_[i].size()) == bytes) {
      ByteBuffer v = std::move(free_[i]);
      free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(i));
      return v;
    }
  }
  return ByteBuffer(static_cast<std::size_t>(bytes));
}

ByteBuffer BufferPool::get_zeroed(std::int64_t bytes) {
  ByteBuffer v = get(bytes);
  std::fill(v.begin(), v.end(), std::byte{0});
  return v;
}

void BufferPool::put(ByteBuffer buffer) {
  if (buffer.empty()) return;
  out_ = std::max<std::int64_t>(0, out_ - static_cast<std::int64_t>(buffer.size()));
  free_.push_back(std::move(buffer));
  if (free_.size() > kMaxHeld) free_.erase(free_.begin());
}

void BufferPool::begin_pass(std::int64_t held_bytes) {
  out_ = held_bytes;
  peak_ = held_bytes;
}

std::int64_t BufferPool::kept_bytes() const {
  std::int64_t n = 0;
  for (const auto& v : free_) n += static_cast<std::int64_t>(v.size());
  return n;
}

std::uint64_t content_fingerprint(std::initializer_list<TensorView> views) {
  constexpr std::uint64_t kPrime = 1099511628211ull;
  std::array<std::uint64_t, 4> lane{14695981039346656037ull, 1, 2, 3};
  for (const TensorView& v : views) {
    for (int i = 0; i < v.ndim; ++i)
      lane[0] = (lane[0] ^ static_cast<std::uint64_t>(v.shape[static_cast<std::size_t>(i)])) * kPrime;
    if (v.dtype != DType::F32) {  // 16-bit: the dtype, then the bytes of each run as words
      lane[0] = (lane[0] ^ (0x100u + static_cast<std::uint64_t>(v.dtype))) * kPrime;
      for_each_byte_run(v, [&](const char* p, std::int64_t bytes) {
        for (std::int64_t i = 0; i < bytes; i += 4) {
          std::uint32_t w = 0;
          std::memcpy(&w, p + i, static_cast<std::size_t>(std::min<std::int64_t>(4, bytes - i)));
          lane[static_cast<std::size_t>((i / 4) % 4)] =
              (lane[static_cast<std::size_t>((i / 4) % 4)] ^ w) * kPrime;
        }
      });
      continue;
    }
    for_each_run(v, [&](const float* p, std::int64_t n) {
      std::int64_t i = 0;
      for (; i + 4 <= n; i += 4) {
        for (std::size_t l = 0; l < 4; ++l) {
          std::uint32_t w = 0;
          std::memcpy(&w, p + i + static_cast<std::int64_t>(l), sizeof w);
          lane[l] = (lane[l] ^ w) * kPrime;
        }
      }
      for (; i < n; ++i) {
        std::uint32_t w = 0;
        std::memcpy(&w, p + i, sizeof w);
        lane[0] = (lane[0] ^ w) * kPrime;
      }
    });
  }
  std::uint64_t h = lane[0];
  for (std::size_t l = 1; l < 4; ++l) h = (h ^ lane[l]) * kPrime;
  return h;
}

kernels::KernelParams step_params(const Setup& setup, const std::int64_t* q_pos, const std::int64_t* kv_pos,
                                  const std::function<void()>* progress) {
  kernels::KernelParams p;
  p.mask = setup.resolved.get();
  p.q_pos = q_pos;
  p.kv_pos = kv_pos;
  p.scale = setup.softmax_scale;
  p.num_threads = setup.cfg.num_threads > 0 ? setup.cfg.num_threads : std::max(1, omp_get_max_threads());
  p.impl = setup.cfg.kernel;
  // One resolution per DistAttention pass set-up; both passes follow the same rule today
  // (burst/dispatch.h), so the forward's key stands for both.
  p.isa = resolve_isa(setup.cfg.isa, setup.shape.dtype, KernelPass::Forward);
  if (setup.cfg.overlap) p.progress = progress;  // the caller's hook outlives its steps
  return p;
}

PlannedStrategy::PlannedStrategy(const Setup& setup) : comm_(setup.comm) {
  const StrategyPlan plan = strategy_plan(setup.cfg, setup.shape, setup.plan->layout(), *setup.resolved,
                                          setup.plan->ranks_per_node());
  BURST_CHECK(!plan.empty(), Internal, to_string(setup.cfg.strategy),
              ": no strategy plan for a validated configuration");
  const auto r = static_cast<std::size_t>(setup.rank);
  pairs_ = plan.visible_pairs[r];
  peak_fwd_ = plan.forward_peak[r];
  peak_bwd_ = plan.backward_peak[r];
  peak_bwd_stateless_ = plan.backward_stateless_peak.empty() ? peak_bwd_ : plan.backward_stateless_peak[r];
}

}  // namespace burst::strategies
