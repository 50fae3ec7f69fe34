// The attention steps of the device seam on one GPU (cuda_device.h): which kernel runs a step —
// forced by CudaDevice::Options, or chosen per step key by measured speed (KernelChooser,
// device/kernel_choice.h) — and the stream's life, which the step state shares.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "burst/error.h"
#include "device/cuda/attention_cuda.h"
#include "device/cuda/attention_cudnn.h"
#include "device/cuda/cuda_device.h"
#include "device/cuda/cuda_memory.h"
#include "strategies/views.h"

namespace burst::device {

using cuda::StepKernel;

struct CudaDevice::Steps {
  Options options;
  KernelChooser chooser;
  std::unique_ptr<cuda::CudnnState> cudnn;  // made at the first 16-bit step (cudnnCreate)
  bool cudnn_tried = false;
  std::string last[2];  // forward, backward
};

namespace {

const char* name_of(StepKernel k) {
  switch (k) {
    case StepKernel::Reference: return "reference";
    case StepKernel::Fast: return "fast";
    case StepKernel::FastMma: return "fast_mma";
    case StepKernel::Cudnn: return "cudnn";
    case StepKernel::Auto: return "auto";
  }
  return "?";
}

/// 1 when t's strides are those of a packed [B,S,H,D] (or [B,H,S] rows) tensor: the strides
/// class of a step key (a strided view can be slower than a packed one).
std::int64_t packed(const TensorView& t) {
  std::int64_t want = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    const auto d = static_cast<std::size_t>(i);
    if (t.shape[d] > 1 && t.stride[d] != want) return 0;
    want *= t.shape[d];
  }
  return 1;
}

/// The key's length class: n rounded up to a power of two, so that steps of similar lengths
/// (varlen's sequences, a ring's spans) share one measured choice instead of each being timed.
std::int64_t length_class(std::int64_t n) {
  std::int64_t c = 1;
  while (c < n) c *= 2;
  return c;
}

/// A timing event pair on a stream (cudaEvent with timing), freed on scope exit.
class EventPair {
 public:
  EventPair() {
    cuda::check(cudaEventCreate(&start), "cudaEventCreate");
    const cudaError_t e = cudaEventCreate(&stop);
    if (e != cudaSuccess) cudaEventDestroy(start);
    cuda::check(e, "cudaEventCreate");
  }
  ~EventPair() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
  EventPair(const EventPair&) = delete;
  EventPair& operator=(const EventPair&) = delete;
  cudaEvent_t start = nullptr, stop = nullptr;
};

/// Where Auto times a step's candidates: its query rows [q0, q0 + nq) and keys [k0, k0 + nk) —
/// the whole step, or for a step longer than Options::timing_max_rows a block of that many rows
/// and keys of the same cuDNN mask class (the leading block of a full or top-left causal step,
/// the trailing one of a bottom-right causal step), so that choosing for a million-token step
/// costs a few runs of a 32K block, not of the step.
struct Proxy {
  std::int64_t q0 = 0, nq = 0, k0 = 0, nk = 0;
};
Proxy proxy_of(std::int64_t S_q, std::int64_t S_kv, const cuda::CudnnMaskVerdict& verdict, std::int64_t cap) {
  if (S_q <= cap && S_kv <= cap) return {0, S_q, 0, S_kv};
  std::int64_t n = std::min(S_q, cap), m = std::min(S_kv, cap);
  if (verdict.mask != cuda::CudnnMask::Full && verdict.mask != cuda::CudnnMask::None) n = m = std::min(n, m);
  if (verdict.bottom_right()) return {S_q - n, n, S_kv - m, m};
  return {0, n, 0, m};
}

/// t's n entries of dimension `dim` from index a on.
TensorView part(const TensorView& t, int dim, std::int64_t a, std::int64_t n) {
  return strategies::narrow(t, dim, a, a + n);
}

/// p for the proxy block: positions (and their host twins) from the block's first row and key.
kernels::KernelParams part(kernels::KernelParams p, const Proxy& x) {
  p.q_pos += x.q0;
  p.kv_pos += x.k0;
  if (p.host_q_pos != nullptr) p.host_q_pos += x.q0;
  if (p.host_kv_pos != nullptr) p.host_kv_pos += x.k0;
  return p;
}

/// Median GPU milliseconds of `runs` runs of fn on `stream`, after one untimed run.
template <typename Fn>
double time_runs(cudaStream_t stream, int runs, Fn&& fn) {
  fn();
  std::vector<double> ms;
  EventPair ev;
  for (int i = 0; i < runs; ++i) {
    cuda::check(cudaEventRecord(ev.start, stream), "cudaEventRecord");
    fn();
    cuda::check(cudaEventRecord(ev.stop, stream), "cudaEventRecord");
    cuda::check(cudaEventSynchronize(ev.stop), "cudaEventSynchronize");
    float t = 0;
    cuda::check(cudaEventElapsedTime(&t, ev.start, ev.stop), "cudaEventElapsedTime");
    ms.push_back(t);
  }
  return median_of(std::move(ms));
}

/// time_runs for an Auto candidate `w`: nullopt when w is Cudnn and cuDNN did not take the step
/// (it refused the graph, so the own kernel ran, or it failed): then w is no candidate for the
/// key. Any other kernel's error propagates.
template <typename Fn>
std::optional<double> time_candidate_runs(cudaStream_t stream, int runs, StepKernel w,
                                          const cuda::CudnnState* cudnn, Fn&& fn) {
  const std::int64_t before = cudnn != nullptr ? cudnn->executed() : 0;
  try {
    const double ms = time_runs(stream, runs, std::forward<Fn>(fn));
    if (w == StepKernel::Cudnn && cudnn->executed() == before) return std::nullopt;  // refused: ran Fast
    return ms;
  } catch (const Error&) {
    if (w != StepKernel::Cudnn) throw;
    cudaGetLastError();
    return std::nullopt;  // cuDNN failed on this step
  }
}

/// A contiguous scratch tensor of `like`'s shape and dtype in this device's memory (the timed
/// runs' outputs: the real outputs are written once, by the chosen kernel).
struct Scratch {
  Buffer buffer;
  TensorView view;
  Scratch(const CudaDevice& dev, const TensorView& like) {
    std::int64_t n = 1;
    for (int i = 0; i < like.ndim; ++i) n *= like.shape[static_cast<std::size_t>(i)];
    buffer = dev.allocate(n * static_cast<std::int64_t>(dtype_size(like.dtype)), MemoryKind::Device);
    view = make_view(static_cast<const void*>(buffer.data()), like.dtype,
                     std::vector<std::int64_t>(like.shape.begin(), like.shape.begin() + like.ndim));
    view.data = buffer.data();
    view.device = like.device;
    if (n > 0)  // accumulating runs add into it: start from zeros, not from whatever was there
      cuda::check(cudaMemsetAsync(buffer.data(), 0, static_cast<std::size_t>(buffer.size()),
                                  static_cast<cudaStream_t>(dev.stream())),
                  "cudaMemsetAsync (step scratch)");
  }
};

}  // namespace

CudaDevice::CudaDevice(int index, Options options) : index_(index), steps_(std::make_unique<Steps>()) {
  BURST_CHECK(options.timing_runs >= 1 && options.timing_max_rows >= 1, InvalidArgument,
              "CudaDevice: timing_runs and timing_max_rows must be ≥ 1, got ", options.timing_runs, " and ",
              options.timing_max_rows);
  steps_->options = options;
  const cuda::DeviceScope scope(burst::Device{DeviceKind::Cuda, index});
  cuda::check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
}

CudaDevice::~CudaDevice() {
  if (stream_ != nullptr) {
    cudaStreamSynchronize(stream_);
    steps_->cudnn.reset();  // its handle is bound to the stream
    cudaStreamDestroy(stream_);
  }
}

bool CudaDevice::prefers_shaped_steps() const {
  const StepKernel k = steps_->options.kernel;
  return cuda::cudnn_compiled() && (k == StepKernel::Auto || k == StepKernel::Cudnn);
}

cuda::CudnnState* CudaDevice::cudnn_state() const {
  Steps& s = *steps_;
  if (!s.cudnn_tried) {
    s.cudnn_tried = true;
    if (cuda::cudnn_compiled()) {
      try {
        s.cudnn = std::make_unique<cuda::CudnnState>(index_);
        s.cudnn->masks().plant_wrong_verdicts(s.options.plant_wrong_cudnn_mask);
      } catch (const Error&) {
        s.cudnn.reset();  // no usable cuDNN here (its library, its version): the own kernels run
      }
    }
  }
  return s.cudnn.get();
}

std::string CudaDevice::last_kernel(bool backward) const { return steps_->last[backward ? 1 : 0]; }
const KernelChooser& CudaDevice::choices() const { return steps_->chooser; }
std::int64_t CudaDevice::cudnn_executed() const { return steps_->cudnn ? steps_->cudnn->executed() : 0; }
std::string CudaDevice::cudnn_refusal() const { return steps_->cudnn ? steps_->cudnn->last_refusal() : ""; }

std::string CudaDevice::choice_summary() const {
  std::string out;
  for (const auto& [k, n] : steps_->chooser.chosen_counts())
    out += (out.empty() ? "" : ", ") + std::string(name_of(static_cast<StepKernel>(k))) + ": " +
           std::to_string(n);
  return out;
}

std::string CudaDevice::choice_timings() const {
  std::string out;
  for (const auto& [key, c] : steps_->chooser.entries()) {
    if (!c.measured) continue;
    // key: pass, dtypes (2), accumulate, B, H, H_kv, S_q class, S_kv class, ... (choose_step)
    std::string line = std::string(key[0] != 0 ? "bwd " : "fwd ") + std::to_string(key[7]) + "x" +
                       std::to_string(key[8]) + ":";
    for (const auto& [k, ms] : c.timings) {
      char buf[32];
      std::snprintf(buf, sizeof buf, " %.3f ms,", ms ? *ms : 0.0);
      line += std::string(" ") + name_of(static_cast<StepKernel>(k)) + (ms ? buf : " refused,");
    }
    line.back() = ' ';
    out += (out.empty() ? "" : "; ") + line + "-> " + name_of(static_cast<StepKernel>(c.kernel));
  }
  return out;
}

namespace {

/// One step's operands, marked as this GPU's (backward: dout and the gradients set).
struct StepViews {
  TensorView q, k, v, out, lse;            // forward (out, lse: its outputs)
  const TensorView* dout = nullptr;        // backward
  TensorView lse_in, delta, dq, dk, dv;    // backward
  const TensorView* global_out = nullptr;  // backward, optional
  bool accumulate = false;
  bool backward() const { return dout != nullptr; }
};

// The kernel for one step: Options::kernel forced, or Auto's measured choice for its key. `run`
// runs the step on a given kernel into given outputs (the real ones, or scratch for timing).
template <typename Time>  // Time: std::optional<double>(StepKernel, const Proxy&)
StepKernel choose_step(cuda::CudnnState* cudnn, KernelChooser& chooser, const CudaDevice::Options& o,
                       const StepViews& s, const kernels::KernelParams& p, cudaStream_t stream,
                       Time&& time_candidate) {
  if (p.impl == KernelImpl::Reference || o.kernel == StepKernel::Reference) return StepKernel::Reference;
  const bool fast = cuda::fast_unsupported(s.q, s.k, s.v, s.dout).empty();
  switch (o.kernel) {
    case StepKernel::Fast: return StepKernel::Auto;  // cuda's static rule: Fast, else the twin
    case StepKernel::FastMma:
      return s.backward() ? StepKernel::Auto : fast ? StepKernel::FastMma : StepKernel::Reference;
    case StepKernel::Cudnn: return cudnn != nullptr ? StepKernel::Cudnn : StepKernel::Auto;
    default: break;
  }
  // Auto: the candidates in preference order (a tie goes to the first): the own kernels, cuDNN.
  std::vector<int> cands;
  if (fast) {
    cands.push_back(static_cast<int>(StepKernel::Fast));
    if (!s.backward()) cands.push_back(static_cast<int>(StepKernel::FastMma));
  }
  cuda::CudnnMaskVerdict verdict;
  if (cudnn != nullptr &&
      cuda::cudnn_unsupported(s.q, s.k, s.v, p, stream, &verdict, s.dout, &cudnn->masks()).empty())
    cands.push_back(static_cast<int>(StepKernel::Cudnn));
  const TensorView& o_or_dq = s.backward() ? s.dq : s.out;
  // choice_timings reads entries 0 (the pass), 7 and 8 (the length classes): keep them there.
  KernelChooser::Key key{s.backward() ? 1 : 0,
                         static_cast<std::int64_t>(s.q.dtype),
                         static_cast<std::int64_t>(o_or_dq.dtype),
                         s.accumulate ? 1 : 0,
                         s.q.shape[0],
                         s.q.shape[2],
                         s.k.shape[2],
                         length_class(s.q.shape[1]),
                         length_class(s.k.shape[1]),
                         s.q.shape[3],
                         packed(s.q) | packed(s.k) << 1 | packed(s.v) << 2 | packed(o_or_dq) << 3 |
                             (s.dout != nullptr ? packed(*s.dout) << 4 : 0) |
                             (s.global_out != nullptr ? (1 + packed(*s.global_out)) << 5 : 0),
                         static_cast<std::int64_t>(verdict.mask),
                         verdict.band() ? verdict.left : 0,
                         verdict.band() ? verdict.right : -1};
  for (const int c : cands) key.push_back(c);
  const Proxy px = proxy_of(s.q.shape[1], s.k.shape[1], verdict, o.timing_max_rows);
  const int chosen = chooser.choose(key, cands, static_cast<int>(StepKernel::Reference),
                                    [&](int c) { return time_candidate(static_cast<StepKernel>(c), px); });
  return static_cast<StepKernel>(chosen);
}

/// What ran a step on `which` (Cudnn falls back to Auto's kernel when cuDNN refused it).
std::string ran(StepKernel which, bool fast, std::int64_t cudnn_before, const cuda::CudnnState* cudnn) {
  if (which == StepKernel::Cudnn) {
    if (cudnn != nullptr && cudnn->executed() > cudnn_before) return "cudnn";
    which = StepKernel::Auto;
  }
  if (which == StepKernel::Auto) return fast ? "fast" : "reference";
  return name_of(which);
}

}  // namespace

void CudaDevice::step_forward(const TensorView& q, const TensorView& k, const TensorView& v,
                              const TensorView& out, const TensorView& lse,
                              const kernels::KernelParams& p) const {
  // This GPU current for the whole step: Auto's timing events, its scratch and the launches (a
  // rank's GPU need not be the thread's current device where a host has several).
  const cuda::DeviceScope scope(burst::Device{DeviceKind::Cuda, index_});
  StepViews s;
  s.q = here(q);
  s.k = here(k);
  s.v = here(v);
  s.out = here(out);
  s.lse = here(lse);
  cuda::CudnnState* cudnn = s.q.dtype == DType::BF16 || s.q.dtype == DType::F16 ? cudnn_state() : nullptr;
  const auto time = [&](StepKernel w, const Proxy& x) -> std::optional<double> {
    const TensorView q1 = part(s.q, 1, x.q0, x.nq), k1 = part(s.k, 1, x.k0, x.nk),
                     v1 = part(s.v, 1, x.k0, x.nk);
    const Scratch o(*this, part(s.out, 1, 0, x.nq)), l(*this, part(s.lse, 2, 0, x.nq));
    const kernels::KernelParams p1 = part(p, x);
    return time_candidate_runs(stream_, steps_->options.timing_runs, w, cudnn, [&] {
      cuda::step_forward(q1, k1, v1, o.view, l.view, p1, stream_, w, cudnn);
    });
  };
  const StepKernel which = choose_step(cudnn, steps_->chooser, steps_->options, s, p, stream_, time);
  const std::int64_t before = cudnn != nullptr ? cudnn->executed() : 0;
  cuda::step_forward(s.q, s.k, s.v, s.out, s.lse, p, stream_, which, cudnn);
  steps_->last[0] = ran(which, cuda::fast_unsupported(s.q, s.k, s.v).empty(), before, cudnn);
}

void CudaDevice::step_backward(const TensorView& dout, const TensorView& q, const TensorView& k,
                               const TensorView& v, const TensorView& lse, const TensorView& delta,
                               const TensorView& dq, const TensorView& dk, const TensorView& dv,
                               const kernels::KernelParams& p, bool accumulate, const TensorView* out) const {
  const cuda::DeviceScope scope(burst::Device{DeviceKind::Cuda, index_});  // as step_forward
  StepViews s;
  const TensorView g = here(dout);
  s.q = here(q);
  s.k = here(k);
  s.v = here(v);
  s.dout = &g;
  s.lse_in = here(lse);
  s.delta = here(delta);
  s.dq = here(dq);
  s.dk = here(dk);
  s.dv = here(dv);
  s.accumulate = accumulate;
  TensorView o;
  if (out != nullptr) {
    o = here(*out);
    s.global_out = &o;
  }
  cuda::CudnnState* cudnn = s.q.dtype == DType::BF16 || s.q.dtype == DType::F16 ? cudnn_state() : nullptr;
  const auto time = [&](StepKernel w, const Proxy& x) -> std::optional<double> {
    const TensorView g1 = part(g, 1, x.q0, x.nq), q1 = part(s.q, 1, x.q0, x.nq),
                     k1 = part(s.k, 1, x.k0, x.nk), v1 = part(s.v, 1, x.k0, x.nk),
                     l1 = part(s.lse_in, 2, x.q0, x.nq), d1 = part(s.delta, 2, x.q0, x.nq);
    TensorView o1;
    if (s.global_out != nullptr) o1 = part(*s.global_out, 1, x.q0, x.nq);
    const Scratch a(*this, part(s.dq, 1, 0, x.nq)), b(*this, part(s.dk, 1, 0, x.nk)),
        c(*this, part(s.dv, 1, 0, x.nk));
    const kernels::KernelParams p1 = part(p, x);
    return time_candidate_runs(stream_, steps_->options.timing_runs, w, cudnn, [&] {
      cuda::step_backward(g1, q1, k1, v1, l1, d1, a.view, b.view, c.view, p1, accumulate, stream_, w, cudnn,
                          s.global_out != nullptr ? &o1 : nullptr);
    });
  };
  const StepKernel which = choose_step(cudnn, steps_->chooser, steps_->options, s, p, stream_, time);
  const std::int64_t before = cudnn != nullptr ? cudnn->executed() : 0;
  cuda::step_backward(g, s.q, s.k, s.v, s.lse_in, s.delta, s.dq, s.dk, s.dv, p, accumulate, stream_, which,
                      cudnn, s.global_out);
  steps_->last[1] = ran(which, cuda::fast_unsupported(s.q, s.k, s.v, &g).empty(), before, cudnn);
}

}  // namespace burst::device
