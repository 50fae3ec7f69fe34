// The cuDNN backend of the attention step (attention_cudnn.h): graphs of the cuDNN frontend
// built once per key and cached in the CudnnState, executed on the caller's stream.
#include "device/cuda/attention_cudnn.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "burst/error.h"
#include "device/cuda/cuda_memory.h"
#include "device/cuda/elementwise.h"
#include "device/lru_cache.h"
#include "strategies/views.h"

#if defined(BURST_HAVE_CUDNN)
#include <cudnn.h>
#include <cudnn_frontend.h>
#endif

namespace burst::cuda {
namespace {

bool in_device_memory(const void* p) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
}

/// n elements of a host or device array, as a host vector (a device array is copied on the
/// stream and waited for).
template <typename T>
std::vector<T> on_host(const T* p, std::int64_t n, cudaStream_t stream) {
  std::vector<T> h(static_cast<std::size_t>(n > 0 ? n : 0));
  if (n <= 0) return h;
  if (!in_device_memory(p)) {
    std::copy(p, p + n, h.begin());
    return h;
  }
  check(cudaMemcpyAsync(h.data(), p, h.size() * sizeof(T), cudaMemcpyDeviceToHost, stream),
        "cudaMemcpyAsync (positions for cuDNN)");
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize (positions for cuDNN)");
  return h;
}

bool aligned16(const TensorView& t) { return reinterpret_cast<std::uintptr_t>(t.data) % 16 == 0; }

std::string operand_problem(const char* name, const TensorView& t, DType dt) {
  if (t.dtype != dt) return std::string(name) + " is " + to_string(t.dtype) + ", q " + to_string(dt);
  if (t.ndim != 4 || (t.stride[3] != 1 && t.shape[3] > 1))
    return std::string(name) + " is not BSHD, D contiguous";
  if (!aligned16(t)) return std::string(name) + " does not start on 16 bytes";
  return "";
}

}  // namespace

bool cudnn_compiled() noexcept {
#if defined(BURST_HAVE_CUDNN)
  return true;
#else
  return false;
#endif
}

std::string cudnn_backward_defect(int sm_major, std::int64_t cudnn_version, std::int64_t S_kv) {
  if (sm_major == 9 && cudnn_version < 92600 && S_kv % 128 == 64)
    return "cuDNN " + std::to_string(cudnn_version) +
           " on SM90: its backward with S_kv = 64 (mod 128) gives NaN dQ for rows of lse below -88.7 "
           "(fixed in 9.26)";
  return "";
}

std::int64_t cudnn_library_version() noexcept {
#if defined(BURST_HAVE_CUDNN)
  return static_cast<std::int64_t>(cudnnGetVersion());
#else
  return 0;
#endif
}

namespace {

/// The GPU's compute capability major (0 when the runtime cannot say), for cudnn_backward_defect.
int sm_major_of(const Device& device) {
  int major = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device.index) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return major;
}

}  // namespace

bool cudnn_stats_packed(const TensorView& t) noexcept {
  return t.ndim == 3 && t.stride[2] == 1 && t.stride[1] == t.shape[2] &&
         t.stride[0] == t.shape[1] * t.shape[2];
}

std::string cudnn_unsupported(const TensorView& q, const TensorView& k, const TensorView& v,
                              const kernels::KernelArgs& args, cudaStream_t stream, CudnnMaskVerdict* mask,
                              const TensorView* dout, CudnnMaskCache* masks) {
  if (mask != nullptr) *mask = CudnnMaskVerdict{};
  if (!cudnn_compiled())
    return "burst_cuda was built without the cuDNN frontend headers (BURST_CUDNN_FRONTEND_DIR)";
  if (q.dtype != DType::BF16 && q.dtype != DType::F16)
    return std::string("cuDNN's SDPA takes bf16 or f16 here, not ") + to_string(q.dtype);
  for (const auto& [name, t] :
       {std::pair<const char*, const TensorView*>{"q", &q}, {"k", &k}, {"v", &v}, {"dout", dout}}) {
    if (t == nullptr) continue;
    const std::string why = operand_problem(name, *t, q.dtype);
    if (!why.empty()) return why;
  }
  // The host arrays: the caller's mirrors, else the arrays when in host memory, else copies.
  std::vector<std::int64_t> qp, kp;
  std::vector<MaskSlice> sl;
  // A mirror in device memory (a caller's mistake) is not read by the host: copied instead.
  const auto host_only = [](const auto* p) { return p != nullptr && !in_device_memory(p) ? p : nullptr; };
  const std::int64_t* hq = host_only(args.host_q_pos);
  const std::int64_t* hk = host_only(args.host_kv_pos);
  const MaskSlice* hs = host_only(args.host_mask_slices);
  if (hq == nullptr) hq = (qp = on_host(args.q_pos, q.shape[1], stream)).data();
  if (hk == nullptr) hk = (kp = on_host(args.kv_pos, k.shape[1], stream)).data();
  if (hs == nullptr) hs = (sl = on_host(args.mask_slices, args.mask_slice_count, stream)).data();
  const CudnnMaskVerdict verdict =
      masks != nullptr ? masks->classify(hq, q.shape[1], hk, k.shape[1], hs, args.mask_slice_count)
                       : classify_for_cudnn(hq, q.shape[1], hk, k.shape[1], hs, args.mask_slice_count);
  if (verdict.mask == CudnnMask::None) return "the mask: " + verdict.why_not;
  if (dout != nullptr) {
    std::string why = cudnn_backward_defect(sm_major_of(q.device), cudnn_library_version(), k.shape[1]);
    if (!why.empty()) return why;
  }
  if (mask != nullptr) *mask = verdict;
  return "";
}

#if !defined(BURST_HAVE_CUDNN)

struct CudnnState::Impl {};

// Without the frontend a state holds nothing: cudnn_unsupported names the reason, and the
// steps run on the own kernels.
CudnnState::CudnnState(int device) : device_(device) {}
CudnnState::~CudnnState() = default;
std::int64_t CudnnState::executed() const noexcept { return 0; }
std::int64_t CudnnState::built() const noexcept { return 0; }
std::string CudnnState::last_refusal() const { return ""; }
void CudnnState::plant_refusal_above_kv_heads(std::int64_t) {}
void CudnnState::set_graph_capacity(std::size_t) {}
std::int64_t CudnnState::evicted() const noexcept { return 0; }

bool cudnn_step_forward(CudnnState&, const CudnnMaskVerdict&, const TensorView&, const TensorView&,
                        const TensorView&, const TensorView&, const TensorView&, float, cudaStream_t) {
  BURST_FAIL(Unsupported, "cuDNN attention: built without the cuDNN frontend headers");
}
bool cudnn_step_backward(CudnnState&, const CudnnMaskVerdict&, const TensorView&, const TensorView&,
                         const TensorView&, const TensorView&, const TensorView*, const TensorView&,
                         const TensorView&, const TensorView&, const TensorView&, const TensorView&, float,
                         bool, cudaStream_t) {
  BURST_FAIL(Unsupported, "cuDNN attention: built without the cuDNN frontend headers");
}

#else

namespace fe = cudnn_frontend;
using GraphPtr = std::shared_ptr<fe::graph::Graph>;
using TensorPtr = std::shared_ptr<fe::graph::Tensor_attributes>;

/// Built graphs kept per state: enough for every step shape of several configurations (a ring
/// pass has a few), bounded so that a run of ever new shapes (varlen: one key per sequence
/// length) does not hold every graph it ever built. The least recently used go first.
constexpr std::size_t kMaxCachedGraphs = 128;

struct CudnnState::Impl {
  cudnnHandle_t handle = nullptr;
  device::LruCache<std::vector<std::int64_t>, GraphPtr> graphs{
      kMaxCachedGraphs};  ///< nullptr: cuDNN refused the key
  std::int64_t executed = 0, built = 0;
  std::string last_refusal;               ///< the frontend's stage and message of the last refused build
  std::int64_t planted_max_kv_heads = 0;  ///< plant_refusal_above_kv_heads
};

namespace {

enum Uid : std::int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };

void check_cudnn(cudnnStatus_t s, const char* what) {
  BURST_CHECK(s == CUDNN_STATUS_SUCCESS, Internal, "cuDNN ", what, ": ", cudnnGetErrorString(s));
}

/// A BSHD view's cuDNN dims [B,H,S,D] and strides, appended to a cache key.
void key_bshd(std::vector<std::int64_t>& key, const TensorView& t) {
  key.insert(key.end(),
             {t.shape[0], t.shape[2], t.shape[1], t.shape[3], t.stride[0], t.stride[2], t.stride[1]});
}
void key_rows(std::vector<std::int64_t>& key, const TensorView& t) {
  key.insert(key.end(), {t.shape[0], t.shape[1], t.shape[2], t.stride[0], t.stride[1], t.stride[2]});
}

fe::graph::Tensor_attributes bshd_attr(const char* name, Uid uid, const TensorView& t) {
  return fe::graph::Tensor_attributes()
      .set_name(name)
      .set_uid(uid)
      .set_dim({t.shape[0], t.shape[2], t.shape[1], t.shape[3]})
      .set_stride({t.stride[0], t.stride[2], t.stride[1], 1});
}
void as_bshd(const TensorPtr& p, const char* name, Uid uid, const TensorView& t) {
  p->set_name(name)
      .set_uid(uid)
      .set_output(true)
      .set_dim({t.shape[0], t.shape[2], t.shape[1], t.shape[3]})
      .set_stride({t.stride[0], t.stride[2], t.stride[1], 1});
}
fe::graph::Tensor_attributes rows_attr(const char* name, Uid uid, const TensorView& t) {
  return fe::graph::Tensor_attributes()
      .set_name(name)
      .set_uid(uid)
      .set_data_type(fe::DataType_t::FLOAT)
      .set_dim({t.shape[0], t.shape[1], t.shape[2], 1})
      .set_stride({t.stride[0], t.stride[1], t.stride[2], 1});
}

/// The verdict as SDPA attributes: the causal kinds as before bands, a band by its alignment and
/// bounds (cudnn_mask.h: the frontend's diagonal band, L and R as classify_for_cudnn read them).
template <typename Attributes>
void set_mask(Attributes& a, const CudnnMaskVerdict& m) {
  if (m.mask == CudnnMask::CausalTopLeft) a.set_causal_mask(true);
  if (m.mask == CudnnMask::CausalBottomRight) a.set_causal_mask_bottom_right(true);
  if (!m.band()) return;
  a.set_diagonal_alignment(m.mask == CudnnMask::BandTopLeft ? fe::DiagonalAlignment_t::TOP_LEFT
                                                            : fe::DiagonalAlignment_t::BOTTOM_RIGHT);
  if (m.left > 0) a.set_diagonal_band_left_bound(static_cast<int>(m.left));
  if (m.right >= 0) a.set_diagonal_band_right_bound(static_cast<int>(m.right));
}

GraphPtr new_graph(DType dt) {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(dt == DType::BF16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return g;
}

/// Frees graphs the cache evicted once the device has finished what is queued: an evicted
/// graph's kernels may still be on a stream. Only misses past the capacity get here (each a
/// build: milliseconds or more), so the wait is one device synchronisation among them.
/// Refused keys (nullptr: nothing was ever queued) need no wait.
void free_evicted(std::vector<std::pair<std::vector<std::int64_t>, GraphPtr> > evicted) {
  const bool any_graph =
      std::any_of(evicted.begin(), evicted.end(), [](const auto& e) { return e.second != nullptr; });
  if (any_graph)
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize (before freeing evicted cuDNN graphs)");
}  // evicted freed here, after the wait

/// The graph of `key` from the cache, or built by `make` (nullptr when cuDNN refuses it).
template <typename Make>
GraphPtr cached(CudnnState::Impl& s, const std::vector<std::int64_t>& key, Make&& make) {
  if (const GraphPtr* hit = s.graphs.find(key)) return *hit;
  GraphPtr g = make();
  ++s.built;
  std::string why;
  const auto stage = [&why](fe::error_t e, const char* name) {
    if (!e.is_good()) why = std::string(name) + ": " + e.get_message();
    return e.is_good();
  };
  const bool ok = stage(g->validate(), "validate") &&
                  stage(g->build_operation_graph(s.handle), "build_operation_graph") &&
                  stage(g->create_execution_plans({fe::HeurMode_t::A}), "create_execution_plans") &&
                  stage(g->check_support(s.handle), "check_support") &&
                  stage(g->build_plans(s.handle), "build_plans");
  if (!ok) {
    g = nullptr;
    s.last_refusal = why;
  }
  free_evicted(s.graphs.insert(key, g));
  return g;
}

/// Runs g on the stream with a stream-ordered workspace.
void execute(CudnnState::Impl& s, const GraphPtr& g, std::unordered_map<std::int64_t, void*>& pack,
             cudaStream_t stream) {
  std::int64_t ws_bytes = 0;
  BURST_CHECK(g->get_workspace_size(ws_bytes).is_good(), Internal, "cuDNN SDPA: the workspace size");
  void* ws = nullptr;
  if (ws_bytes > 0)
    check(cudaMallocAsync(&ws, static_cast<std::size_t>(ws_bytes), stream),
          "cudaMallocAsync (cuDNN workspace)");
  check_cudnn(cudnnSetStream(s.handle, stream), "cudnnSetStream");
  fe::error_t e = g->execute(s.handle, pack, ws);
  if (ws != nullptr) cudaFreeAsync(ws, stream);
  BURST_CHECK(e.is_good(), Internal, "cuDNN SDPA execute: ", e.get_message());
  ++s.executed;
}

/// A contiguous stream-ordered BSHD tensor of `like`'s shape in dtype dt, freed on the stream.
/// Its geometry (view's shape and strides: what a graph's key and attributes read) exists from
/// construction, its memory only after allocate(): a step allocates once cuDNN has taken its
/// graph, so a step refused whole and run as head halves holds no full-size scratch meanwhile.
class Scratch {
 public:
  Scratch(const TensorView& like, DType dt, cudaStream_t stream) : stream_(stream) {
    const std::vector<std::int64_t> shape(like.shape.begin(), like.shape.begin() + like.ndim);
    for (std::int64_t d : shape) elements_ *= d;
    view = make_view(static_cast<const void*>(nullptr), dt, shape);
    view.device = like.device;
  }
  ~Scratch() {
    if (data_ != nullptr) cudaFreeAsync(data_, stream_);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  /// Allocates the memory (stream-ordered; once) and points view at it.
  void allocate() {
    if (data_ != nullptr || elements_ == 0) return;
    check(cudaMallocAsync(&data_, static_cast<std::size_t>(elements_) * dtype_size(view.dtype), stream_),
          "cudaMallocAsync (cuDNN scratch)");
    view.data = data_;
  }
  TensorView view;

 private:
  cudaStream_t stream_;
  std::int64_t elements_ = 1;
  void* data_ = nullptr;
};

/// Allocates every scratch given (null ones skipped).
void allocate(std::initializer_list<Scratch*> scratch) {
  for (Scratch* s : scratch)
    if (s != nullptr) s->allocate();
}

std::vector<std::int64_t> key_head(int kind, DType dt, const CudnnMaskVerdict& m, float scale) {
  std::uint32_t bits = 0;
  std::memcpy(&bits, &scale, sizeof bits);
  return {kind,
          static_cast<std::int64_t>(dt),
          static_cast<std::int64_t>(m.mask),
          m.band() ? m.left : 0,
          m.band() ? m.right : -1,
          static_cast<std::int64_t>(bits)};
}

/// Key rows [0, first) and [last, S_kv) that no row of a band sees (a band's rows see one
/// range each, and the ranges' starts and ends grow with the row: cudnn_mask.h), as {first, last}.
std::pair<std::int64_t, std::int64_t> seen_keys(const CudnnMaskVerdict& m, std::int64_t S_q,
                                                std::int64_t S_kv) {
  const std::int64_t off = m.bottom_right() ? S_kv - S_q : 0;
  std::int64_t left = 0, right = -1;
  if (m.mask == CudnnMask::CausalTopLeft || m.mask == CudnnMask::CausalBottomRight) right = 0;
  if (m.band()) {
    left = m.left;
    right = m.right;
  }
  const std::int64_t first = left > 0 ? std::clamp<std::int64_t>(off - left + 1, 0, S_kv) : 0;
  const std::int64_t last = right >= 0 ? std::clamp<std::int64_t>(S_q - 1 + off + right + 1, 0, S_kv) : S_kv;
  return {first, std::max(first, last)};
}

/// t's heads [a, a + n) (dim: 2 for a BSHD view, 1 for [B,H,S] rows).
TensorView heads(const TensorView& t, int dim, std::int64_t a, std::int64_t n) {
  return strategies::narrow(t, dim, a, a + n);
}

/// True when a step on q (H heads) and k (H_kv) can be cut into two halves of its KV heads whose
/// BSHD views all start on 16 bytes, as the whole step's do: H_kv even, and the second half's
/// offset into every operand a multiple of 16 bytes (lse rows may start anywhere: cuDNN reads and
/// writes them through a packed buffer).
bool halves_fit(const TensorView& q, const TensorView& k, std::initializer_list<const TensorView*> bshd_q,
                std::initializer_list<const TensorView*> bshd_kv) {
  const std::int64_t H = q.shape[2], H_kv = k.shape[2];
  if (H_kv < 2 || H_kv % 2 != 0) return false;
  const auto at = [](const TensorView* t, int dim, std::int64_t h) {
    return t == nullptr || h * t->stride[static_cast<std::size_t>(dim)] *
                                   static_cast<std::int64_t>(dtype_size(t->dtype)) % 16 ==
                               0;
  };
  for (const TensorView* t : bshd_q)
    if (!at(t, 2, H / 2)) return false;
  for (const TensorView* t : bshd_kv)
    if (!at(t, 2, H_kv / 2)) return false;
  return true;
}

/// A step refused whole, run as two halves of its KV heads: run_half(a, h, a_kv, h_kv) runs
/// query heads [a, a + h) with KV heads [a_kv, a_kv + h_kv) and says whether cuDNN took them.
/// The halves share one graph, so the first is normally the only one refused, before any result
/// was written: false then (the caller's own kernel takes the whole step). The second can be
/// refused only when its graph was evicted meanwhile and a rebuild failed where the first build
/// did not (a transient failure): false too where the step overwrites its results (`rewritable`:
/// the caller's own kernel rewrites the first half's), an error where it accumulates into them.
template <typename RunHalf>
bool on_halves(const TensorView& q, const TensorView& k, bool rewritable, RunHalf&& run_half) {
  const std::int64_t h = q.shape[2] / 2, h_kv = k.shape[2] / 2;
  for (int half = 0; half < 2; ++half) {
    if (!run_half(half * h, h, half * h_kv, h_kv)) {
      BURST_CHECK(
          half == 0 || rewritable, Internal,
          "cuDNN SDPA: the second half of an accumulating step's heads was refused after the first ran");
      return false;
    }
  }
  return true;
}

/// cuDNN's Stats buffer for lse rows that are not packed [B,H,S_q] on 16 bytes (a step's rows of
/// a wider lse, a head half: cudnn_stats_packed), else null (cuDNN reads or writes lse itself).
std::unique_ptr<Scratch> stats_scratch(const TensorView& lse, cudaStream_t stream) {
  if (cudnn_stats_packed(lse) && aligned16(lse)) return nullptr;
  return std::make_unique<Scratch>(lse, DType::F32, stream);
}

}  // namespace

std::string CudnnState::last_refusal() const { return impl_->last_refusal; }
void CudnnState::plant_refusal_above_kv_heads(std::int64_t n) { impl_->planted_max_kv_heads = n; }
void CudnnState::set_graph_capacity(std::size_t n) {
  const DeviceScope scope(Device{DeviceKind::Cuda, device_});
  free_evicted(impl_->graphs.set_capacity(n));
}
std::int64_t CudnnState::evicted() const noexcept { return impl_->graphs.evictions(); }

namespace {

/// True (and the refusal recorded) when the planted limit refuses a graph of h_kv KV heads.
bool planted_refusal(CudnnState::Impl& s, std::int64_t h_kv) {
  if (s.planted_max_kv_heads <= 0 || h_kv <= s.planted_max_kv_heads) return false;
  s.last_refusal = "planted: more than " + std::to_string(s.planted_max_kv_heads) + " KV heads";
  return true;
}

}  // namespace

CudnnState::CudnnState(int device) : device_(device), impl_(std::make_unique<Impl>()) {
  const DeviceScope scope(Device{DeviceKind::Cuda, device});
  check_cudnn(cudnnCreate(&impl_->handle), "cudnnCreate");
}
CudnnState::~CudnnState() {
  if (impl_ && impl_->handle != nullptr) {
    const DeviceScope scope(Device{DeviceKind::Cuda, device_});
    // As free_evicted: no graph dies while its kernels may be queued (the owning CudaDevice
    // synchronises its stream first today; this does not rely on it). An error here is the
    // device's, reported by whoever waits next: a destructor does not throw.
    (void)cudaDeviceSynchronize();
    impl_->graphs.clear();
    cudnnDestroy(impl_->handle);
  }
}
std::int64_t CudnnState::executed() const noexcept { return impl_->executed; }
std::int64_t CudnnState::built() const noexcept { return impl_->built; }

bool cudnn_step_forward(CudnnState& state, const CudnnMaskVerdict& mask, const TensorView& q,
                        const TensorView& k, const TensorView& v, const TensorView& out,
                        const TensorView& lse_out, float scale, cudaStream_t stream) {
  const DeviceScope scope(q.device);
  // cuDNN writes its Stats into a packed [B,H,S_q] buffer where lse is a step's rows of a wider
  // lse (a query-chunk span, a head half), copied into lse afterwards, as the backward reads one.
  const std::unique_ptr<Scratch> lse32 = stats_scratch(lse_out, stream);
  const TensorView& lse = lse32 ? lse32->view : lse_out;
  const bool direct = out.dtype == q.dtype && out.stride[3] == 1 && aligned16(out);
  std::unique_ptr<Scratch> o16;
  if (!direct) o16 = std::make_unique<Scratch>(out, q.dtype, stream);
  const TensorView& o = direct ? out : o16->view;
  std::vector<std::int64_t> key = key_head(0, q.dtype, mask, scale);
  for (const TensorView* t : {&q, &k, &v, &o}) key_bshd(key, *t);
  key_rows(key, lse);
  GraphPtr g = planted_refusal(state.impl(), k.shape[2]) ? nullptr : cached(state.impl(), key, [&] {
    GraphPtr graph = new_graph(q.dtype);
    auto Q = graph->tensor(bshd_attr("Q", kQ, q)), K = graph->tensor(bshd_attr("K", kK, k)),
         V = graph->tensor(bshd_attr("V", kV, v));
    auto attrs =
        fe::graph::SDPA_attributes().set_name("burst_step").set_generate_stats(true).set_attn_scale(scale);
    set_mask(attrs, mask);
    auto [O, stats] = graph->sdpa(Q, K, V, attrs);
    as_bshd(O, "O", kO, o);
    stats->set_name("Stats")
        .set_uid(kStats)
        .set_output(true)
        .set_data_type(fe::DataType_t::FLOAT)
        .set_dim({lse.shape[0], lse.shape[1], lse.shape[2], 1})
        .set_stride({lse.stride[0], lse.stride[1], lse.stride[2], 1});
    return graph;
  });
  if (g == nullptr) {  // refused whole: two halves of the KV heads
    return halves_fit(q, k, {&q, &out}, {&k, &v}) &&
           on_halves(q, k, true, [&](std::int64_t a, std::int64_t h, std::int64_t a_kv, std::int64_t h_kv) {
             return cudnn_step_forward(state, mask, heads(q, 2, a, h), heads(k, 2, a_kv, h_kv),
                                       heads(v, 2, a_kv, h_kv), heads(out, 2, a, h), heads(lse_out, 1, a, h),
                                       scale, stream);
           });
  }
  allocate({lse32.get(), o16.get()});
  std::unordered_map<std::int64_t, void*> pack{
      {kQ, q.data}, {kK, k.data}, {kV, v.data}, {kO, o.data}, {kStats, lse.data}};
  execute(state.impl(), g, pack, stream);
  if (!direct) copy(o, out, stream);
  if (lse32) copy(lse, lse_out, stream);
  return true;
}

bool cudnn_step_backward(CudnnState& state, const CudnnMaskVerdict& mask, const TensorView& dout,
                         const TensorView& q, const TensorView& k, const TensorView& v, const TensorView* out,
                         const TensorView& lse_in, const TensorView& delta, const TensorView& dq,
                         const TensorView& dk, const TensorView& dv, float scale, bool accumulate,
                         cudaStream_t stream) {
  const DeviceScope scope(q.device);
  // cuDNN (before 9.26) reads the backward's Stats only as a packed [B,H,S_q] tensor; a step's
  // rows of a wider lse (a ring step's span, Auto's timing block, a head half) are copied into
  // one before the graph runs (4·B·H·S_q bytes, against the step's O(S_q·S_kv) work).
  const std::unique_ptr<Scratch> lse32 = stats_scratch(lse_in, stream);
  const TensorView& lse = lse32 ? lse32->view : lse_in;
  auto in_place = [&](const TensorView& t) {
    return !accumulate && t.dtype == q.dtype && t.stride[3] == 1 && aligned16(t);
  };
  // O as cuDNN reads it: the real out when it is already in q's dtype, else the stand-in O' made
  // from dout and delta (one pass, as a conversion of out would be, and never less accurate:
  // device/out_synth.h).
  const bool direct_out = out != nullptr && out->dtype == q.dtype && out->stride[3] == 1 && aligned16(*out);
  std::unique_ptr<Scratch> o16, dq16, dk16, dv16;
  if (!direct_out) o16 = std::make_unique<Scratch>(dout, q.dtype, stream);
  if (!in_place(dq)) dq16 = std::make_unique<Scratch>(dq, q.dtype, stream);
  if (!in_place(dk)) dk16 = std::make_unique<Scratch>(dk, q.dtype, stream);
  if (!in_place(dv)) dv16 = std::make_unique<Scratch>(dv, q.dtype, stream);
  const TensorView &o = o16 ? o16->view : *out, &gq = dq16 ? dq16->view : dq, &gk = dk16 ? dk16->view : dk,
                   &gv = dv16 ? dv16->view : dv;
  std::vector<std::int64_t> key = key_head(1, q.dtype, mask, scale);
  for (const TensorView* t : {&q, &k, &v, &o, &dout, &gq, &gk, &gv}) key_bshd(key, *t);
  key_rows(key, lse);
  GraphPtr g = planted_refusal(state.impl(), k.shape[2]) ? nullptr : cached(state.impl(), key, [&] {
    GraphPtr graph = new_graph(q.dtype);
    auto Q = graph->tensor(bshd_attr("Q", kQ, q)), K = graph->tensor(bshd_attr("K", kK, k)),
         V = graph->tensor(bshd_attr("V", kV, v)), O = graph->tensor(bshd_attr("O", kO, o)),
         dO = graph->tensor(bshd_attr("dO", kDO, dout)),
         stats = graph->tensor(rows_attr("Stats", kStats, lse));
    auto attrs = fe::graph::SDPA_backward_attributes().set_name("burst_step_backward").set_attn_scale(scale);
    set_mask(attrs, mask);
    auto [dQ, dK, dV] = graph->sdpa_backward(Q, K, V, O, dO, stats, attrs);
    as_bshd(dQ, "dQ", kDQ, gq);
    as_bshd(dK, "dK", kDK, gk);
    as_bshd(dV, "dV", kDV, gv);
    return graph;
  });
  if (g == nullptr) {  // refused whole: two halves of the KV heads
    return halves_fit(q, k, {&q, &dout, out, &dq}, {&k, &v, &dk, &dv}) &&
           on_halves(q, k, !accumulate,
                     [&](std::int64_t a, std::int64_t h, std::int64_t a_kv, std::int64_t h_kv) {
                       TensorView out_half;
                       if (out != nullptr) out_half = heads(*out, 2, a, h);
                       return cudnn_step_backward(
                           state, mask, heads(dout, 2, a, h), heads(q, 2, a, h), heads(k, 2, a_kv, h_kv),
                           heads(v, 2, a_kv, h_kv), out != nullptr ? &out_half : nullptr,
                           heads(lse_in, 1, a, h), heads(delta, 1, a, h), heads(dq, 2, a, h),
                           heads(dk, 2, a_kv, h_kv), heads(dv, 2, a_kv, h_kv), scale, accumulate, stream);
                     });
  }
  allocate({lse32.get(), o16.get(), dq16.get(), dk16.get(), dv16.get()});
  if (lse32) copy(lse_in, lse32->view, stream);
  if (o16) synthesize_out(dout, delta, o, stream);
  std::unordered_map<std::int64_t, void*> pack{{kQ, q.data},   {kK, k.data},     {kV, v.data},
                                               {kO, o.data},   {kDO, dout.data}, {kStats, lse.data},
                                               {kDQ, gq.data}, {kDK, gk.data},   {kDV, gv.data}};
  execute(state.impl(), g, pack, stream);
  // Keys no query sees (a top-left causal step with more keys than queries: keys S_q..S_kv − 1;
  // a band's keys before its first row's window or after its last row's) have zero gradients;
  // they are written after cuDNN's run, so the result does not depend on what cuDNN leaves in
  // the rows of key tiles it has no query for (skipped, or summed over the query heads of a GQA
  // group from a workspace it need not have written).
  const auto [first, last] = seen_keys(mask, q.shape[1], k.shape[1]);
  for (const auto& [a, b] : {std::pair<std::int64_t, std::int64_t>{0, first}, {last, k.shape[1]}}) {
    if (a >= b) continue;
    fill(strategies::narrow(gk, 1, a, b), 0.0f, stream);
    fill(strategies::narrow(gv, 1, a, b), 0.0f, stream);
  }
  const std::pair<const TensorView*, const TensorView*> results[] = {{&gq, &dq}, {&gk, &dk}, {&gv, &dv}};
  for (const auto& [from, to] : results) {
    if (from->data == to->data) continue;
    if (accumulate) {
      add(*to, *from, stream);
    } else {
      copy(*from, *to, stream);
    }
  }
  return true;
}

#endif

}  // namespace burst::cuda
