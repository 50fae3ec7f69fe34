// DistAttention on a device whose memory the host cannot touch, under mpiexec -n 1..4: a CPU
// device whose "device" blocks are pages the host may not read or write (mprotect PROT_NONE)
// except inside the device's own operations, as a GPU's memory is to the host (an access to
// cudaMalloc'd memory from host code is a SIGSEGV). Every operand and result is in that memory,
// as a GPU caller's are. A host read or write of device memory anywhere else — the façade, a
// strategy, the staging, the communicator — is a segmentation fault here instead of on a GPU
// host: every strategy and layout, the double ring, GQA, fp32 and bf16, forward and backward,
// and the results bitwise those of the host constructor on the same shards. Every step's
// tables in device memory come with host mirrors holding the same values (what a GPU reads to
// choose a step's kernel: a mirror in device memory faults there, a missing one costs a copy
// back and a wait). A NaN in q is refused with the host's message (its index: batch, row, head,
// dimension).
#include <gtest/gtest.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "burst/comm.h"
#include "burst/error.h"
#include "burst/mask.h"
#include "burst/strategy.h"
#include "burst/tensor.h"
#include "device/cpu/cpu_device.h"
#include "kernels/kernels.h"
#include "strategy_device.h"

namespace burst {
namespace {

/// The CPU device with its Device blocks behind PROT_NONE pages outside its own operations.
/// Pinned host memory stays host memory (the wire buffers the communicator reads).
class GuardedDevice final : public device::CpuDevice {
 public:
  /// shaped: the device says it prefers whole-shaped steps (as a GPU does: the ring's forward is
  /// then cut into query-chunk calls, strategies/backward_spans.h).
  explicit GuardedDevice(bool shaped = false) : shaped_(shaped) {}
  bool host_memory() const override { return false; }
  bool prefers_shaped_steps() const override { return shaped_; }
  device::Buffer allocate(std::int64_t bytes, device::MemoryKind kind) const override {
    if (kind == device::MemoryKind::PinnedHost) return CpuDevice::allocate(bytes, kind);
    if (bytes == 0) return device::Buffer();
    const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    const std::size_t len = (static_cast<std::size_t>(bytes) + page - 1) / page * page;
    void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    BURST_CHECK(p != MAP_FAILED, Internal, "mmap of ", len, " bytes");
    std::memset(p, 0xFF, len);  // fresh device memory is NaN: a read of unwritten memory shows
    if (open_ == 0) mprotect(p, len, PROT_NONE);
    blocks_.emplace_back(p, len);
    return device::Buffer(
        p, bytes,
        [](const void* owner, void* data, std::int64_t) {
          auto& live = static_cast<const GuardedDevice*>(owner)->blocks_;
          for (std::size_t i = 0; i < live.size(); ++i)
            if (live[i].first == data) {
              munmap(data, live[i].second);
              live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
              return;
            }
        },
        this);
  }
  // Each operation opens every live block for its duration (nested calls keep them open).
  void copy_to_host(const std::byte* src, std::byte* dst, std::int64_t bytes) const override {
    const Open o(*this);
    CpuDevice::copy_to_host(src, dst, bytes);
  }
  void copy_from_host(const std::byte* src, std::byte* dst, std::int64_t bytes) const override {
    const Open o(*this);
    CpuDevice::copy_from_host(src, dst, bytes);
  }
  void copy(const TensorView& src, const TensorView& dst) const override {
    const Open o(*this);
    CpuDevice::copy(src, dst);
  }
  void index_copy(const TensorView& src, const TensorView& dst, int dim, const std::int64_t* index,
                  const std::int64_t* index_twin, bool scatter, bool accumulate) const override {
    const Open o(*this);
    CpuDevice::index_copy(src, dst, dim, index, index_twin, scatter, accumulate);
  }
  void fill(const TensorView& dst, float value) const override {
    const Open o(*this);
    CpuDevice::fill(dst, value);
  }
  void add(const TensorView& x, const TensorView& acc) const override {
    const Open o(*this);
    CpuDevice::add(x, acc);
  }
  void convert(const TensorView& src, const TensorView& dst) const override {
    const Open o(*this);
    CpuDevice::convert(src, dst);
  }
  void merge_forward(const TensorView& out, const TensorView& lse, const TensorView& out_part,
                     const TensorView& lse_part) const override {
    const Open o(*this);
    CpuDevice::merge_forward(out, lse, out_part, lse_part);
  }
  void attention_delta(const TensorView& dout, const TensorView& out,
                       const TensorView& delta) const override {
    const Open o(*this);
    CpuDevice::attention_delta(dout, out, delta);
  }
  void step_forward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                    const TensorView& lse, const kernels::KernelParams& p) const override {
    const Open o(*this);
    check_mirrors(q, k, p);
    ++forward_calls;
    CpuDevice::step_forward(q, k, v, out, lse, p);
  }
  void step_backward(const TensorView& dout, const TensorView& q, const TensorView& k, const TensorView& v,
                     const TensorView& lse, const TensorView& delta, const TensorView& dq,
                     const TensorView& dk, const TensorView& dv, const kernels::KernelParams& p,
                     bool accumulate, const TensorView* out) const override {
    const Open o(*this);
    check_mirrors(q, k, p);
    CpuDevice::step_backward(dout, q, k, v, lse, delta, dq, dk, dv, p, accumulate, out);
  }
  std::uint64_t fingerprint(std::initializer_list<TensorView> views) const override {
    const Open o(*this);
    return CpuDevice::fingerprint(views);
  }
  std::int64_t first_nonfinite(const TensorView& t) const override {
    const Open o(*this);
    return CpuDevice::first_nonfinite(t);
  }

  /// A GPU decides about a step (cuDNN's mask class) from the host mirrors of its tables
  /// (kernels.h: KernelArgs::host_*): counted here, a table in device memory without a mirror
  /// (the GPU would copy it back, waiting for its stream), a mirror in device memory (a host
  /// read of it faults on a GPU) and a mirror whose values differ from the table's.
  mutable std::int64_t missing_mirrors = 0, mirrors_in_device_memory = 0, wrong_mirrors = 0;
  mutable std::int64_t forward_calls = 0;  ///< step_forward calls

 private:
  bool owns(const void* p) const {
    const auto* c = static_cast<const char*>(p);
    for (const auto& [base, len] : blocks_) {
      const auto* b = static_cast<const char*>(base);
      if (!std::less<>{}(c, b) && std::less<>{}(c, b + len)) return true;
    }
    return false;
  }
  void check_mirror(const void* host, const void* table, std::size_t bytes) const {
    if (table == nullptr || bytes == 0) return;
    if (host == nullptr) {
      missing_mirrors += owns(table) ? 1 : 0;
    } else if (owns(host)) {
      ++mirrors_in_device_memory;
    } else if (std::memcmp(host, table, bytes) != 0) {
      ++wrong_mirrors;
    }
  }
  void check_mirrors(const TensorView& q, const TensorView& k, const kernels::KernelParams& p) const {
    check_mirror(p.host_q_pos, p.q_pos, static_cast<std::size_t>(q.size(1)) * sizeof(std::int64_t));
    check_mirror(p.host_kv_pos, p.kv_pos, static_cast<std::size_t>(k.size(1)) * sizeof(std::int64_t));
    check_mirror(p.host_mask_slices, p.mask_slices,
                 static_cast<std::size_t>(p.mask_slice_count) * sizeof(MaskSlice));
  }
  struct Open {
    explicit Open(const GuardedDevice& device) : d(device) {
      if (d.open_++ == 0) d.protect(PROT_READ | PROT_WRITE);
    }
    ~Open() {
      if (--d.open_ == 0) d.protect(PROT_NONE);
    }
    Open(const Open&) = delete;
    Open& operator=(const Open&) = delete;
    const GuardedDevice& d;
  };
  void protect(int prot) const {
    for (const auto& [p, len] : blocks_) mprotect(p, len, prot);
  }
  bool shaped_;
  mutable int open_ = 0;
  mutable std::vector<std::pair<void*, std::size_t>> blocks_;  // the live Device blocks
};

/// A host tensor's copy in the guarded device's memory (or NaN bytes of its shape), and back.
struct GuardedTensor {
  device::Buffer buffer;
  TensorView view;
  GuardedTensor(const GuardedDevice& dev, const TensorView& host, bool copy) {
    const std::int64_t bytes = host.numel() * static_cast<std::int64_t>(dtype_size(host.dtype));
    buffer = dev.allocate(bytes, device::MemoryKind::Device);
    view = make_view(static_cast<const void*>(buffer.data()), host.dtype,
                     std::vector<std::int64_t>(host.shape.begin(), host.shape.begin() + host.ndim));
    if (copy) dev.copy_from_host(static_cast<const std::byte*>(host.data), buffer.data(), bytes);
  }
  std::vector<std::byte> bytes(const GuardedDevice& dev) const {
    std::vector<std::byte> b(static_cast<std::size_t>(buffer.size()));
    dev.copy_to_host(buffer.data(), b.data(), buffer.size());
    return b;
  }
};

/// One rank's operands of a seeded problem in the problem's dtype (fp32 values or bf16 bits).
struct Operand {
  std::vector<std::int64_t> shape;
  std::vector<float> f;
  std::vector<std::uint16_t> h;
  TensorView view(bool half) {
    return half ? make_view(static_cast<const void*>(h.data()), DType::BF16, shape)
                : make_view(f.data(), shape);
  }
  std::vector<std::byte> bytes(bool half) const {
    const void* p = half ? static_cast<const void*>(h.data()) : static_cast<const void*>(f.data());
    const std::size_t n = half ? 2 * h.size() : 4 * f.size();
    std::vector<std::byte> b(n);
    std::memcpy(b.data(), p, n);
    return b;
  }
};

Operand make(const std::vector<std::int64_t>& pos, std::int64_t S, std::int64_t heads, std::int64_t D,
             double freq) {
  Operand t{{1, S, heads, D}, std::vector<float>(static_cast<std::size_t>(S * heads * D)), {}};
  for (std::int64_t i = 0; i < S; ++i)
    for (std::int64_t j = 0; j < heads * D; ++j)
      t.f[static_cast<std::size_t>(i * heads * D + j)] =
          static_cast<float>(std::sin(freq * static_cast<double>(pos[static_cast<std::size_t>(i)] * 97 + j)));
  for (const float x : t.f) t.h.push_back(bf16_from_float(x));
  return t;
}

sigjmp_buf g_fault;
void on_fault(int) { siglongjmp(g_fault, 1); }

/// True when a host write to p faults (SIGSEGV caught here, the previous handler restored).
bool host_write_faults(void* p) {
  struct sigaction catcher {
  }, old{};
  catcher.sa_handler = on_fault;
  sigemptyset(&catcher.sa_mask);
  sigaction(SIGSEGV, &catcher, &old);
  volatile bool faulted = true;  // volatile: kept across the siglongjmp
  if (sigsetjmp(g_fault, 1) == 0) {
    *static_cast<volatile char*>(p) = 0;
    faulted = false;
  }
  sigaction(SIGSEGV, &old, nullptr);
  return faulted;
}

// The guard itself: a host write faults, the device's copies pass.
/// The largest |a − b| of two arrays of fp32 values (half: bf16 values).
double max_diff(const std::vector<std::byte>& a, const std::vector<std::byte>& b, bool half) {
  const std::size_t e = half ? 2 : 4, n = std::min(a.size(), b.size()) / e;
  double m = a.size() == b.size() ? 0 : 1e30;
  for (std::size_t i = 0; i < n; ++i) {
    float x = 0, y = 0;
    if (half) {
      std::uint16_t u = 0, w = 0;
      std::memcpy(&u, &a[i * 2], 2);
      std::memcpy(&w, &b[i * 2], 2);
      x = bf16_to_float(u);
      y = bf16_to_float(w);
    } else {
      std::memcpy(&x, &a[i * 4], 4);
      std::memcpy(&y, &b[i * 4], 4);
    }
    m = std::max(m, static_cast<double>(std::fabs(x - y)));
  }
  return m;
}

TEST(GuardedDevice, HostCodeCannotTouchItsMemory) {
  const GuardedDevice dev;
  const device::Buffer b = dev.allocate(64, device::MemoryKind::Device);
  EXPECT_TRUE(host_write_faults(b.data()));
  std::vector<std::byte> pinned(64);
  EXPECT_FALSE(host_write_faults(pinned.data()));
  float x = 1.5f;
  dev.copy_from_host(reinterpret_cast<const std::byte*>(&x), b.data(), 4);
  float y = 0;
  dev.copy_to_host(b.data(), reinterpret_cast<std::byte*>(&y), 4);
  EXPECT_EQ(y, 1.5f);
}

TEST(GuardedDevice, DistAttentionTouchesDeviceMemoryOnlyThroughTheDevice) {
  const Communicator world = Communicator::world();
  const int P = world.size(), rank = world.rank();
  struct Case {
    StrategyKind strategy;
    LayoutKind layout;
    int ranks_per_node = 0;
  };
  const std::vector<Case> cases = {
      {StrategyKind::Burst, LayoutKind::Zigzag},         {StrategyKind::Burst, LayoutKind::Contiguous},
      {StrategyKind::Burst, LayoutKind::Striped},        {StrategyKind::Burst, LayoutKind::Balanced},
      {StrategyKind::Burst, LayoutKind::Zigzag, 2},      {StrategyKind::Ring, LayoutKind::Zigzag},
      {StrategyKind::Ring, LayoutKind::Contiguous},      {StrategyKind::AllGather, LayoutKind::Zigzag},
      {StrategyKind::Ulysses, LayoutKind::Zigzag},       {StrategyKind::Usp, LayoutKind::Zigzag},
      {StrategyKind::DistFlash, LayoutKind::Contiguous}, {StrategyKind::HeadParallel, LayoutKind::Zigzag}};
  const auto plain = std::make_shared<const GuardedDevice>(),
             shaped = std::make_shared<const GuardedDevice>(true);
  // Causal, and a sliding window of 20 (under which the cut drops the rows of a step's spans that
  // see none of their keys, and on the shaped device shaped_spans cuts them further).
  for (const bool windowed : {false, true}) {
    const Mask mask = windowed ? Mask::sliding_window(20, 0, true) : Mask::causal_mask();
    std::vector<std::int64_t> plain_calls(2 * cases.size(), 0);
    for (const bool cut : {false, true})
      for (const DType dtype : {DType::F32, DType::BF16})
        for (const Case& c : cases) {
          const auto& dev = cut ? shaped : plain;
          const DistAttention::OnDevice on{dev, kHost};
          if (c.ranks_per_node > 0 && P % c.ranks_per_node != 0) continue;
          const ProblemShape shape{1, 96, 4, c.strategy == StrategyKind::HeadParallel ? 4 : 2, 8, dtype};
          DistConfig cfg;
          cfg.strategy = c.strategy;
          cfg.layout = c.layout;
          if (c.ranks_per_node > 0) cfg.ranks_per_node = c.ranks_per_node;
          if (c.strategy == StrategyKind::Usp) cfg.ulysses_degree = P == 4 ? 2 : 1;
          const std::string name = std::string(to_string(c.strategy)) + " " + to_string(c.layout) +
                                   " L=" + std::to_string(c.ranks_per_node) + " " + to_string(dtype) +
                                   " P=" + std::to_string(P) + (cut ? " forward cut by query chunk" : "") +
                                   (windowed ? " window 20" : " causal");
          SCOPED_TRACE(name);
          std::unique_ptr<DistAttention> host, gpu;
          try {
            host = std::make_unique<DistAttention>(world, cfg, shape, mask);
            gpu = std::make_unique<DistAttention>(world, cfg, shape, mask, on);
          } catch (const Error& e) {  // e.g. Ulysses with H_kv < P: refused on every rank
            ASSERT_EQ(e.kind(), ErrorKind::Unsupported) << e.what();
            continue;
          }
          const auto& pos = host->positions();
          const std::int64_t S = host->local_length(), H = shape.H, Hk = shape.H_kv, D = shape.D;
          const bool half = dtype == DType::BF16;
          Operand q = make(pos, S, H, D, 0.31), k = make(pos, S, Hk, D, 0.57), v = make(pos, S, Hk, D, 0.73),
                  dout = make(pos, S, H, D, 0.19), out = make(pos, S, H, D, 0), dq = make(pos, S, H, D, 0),
                  dk = make(pos, S, Hk, D, 0), dv = make(pos, S, Hk, D, 0);
          Tensor lse({1, H, S});
          // The guarded run first (its operands copied in before the host run writes its results).
          const GuardedTensor gq(*dev, q.view(half), true), gk(*dev, k.view(half), true),
              gv(*dev, v.view(half), true), gdout(*dev, dout.view(half), true),
              gout(*dev, out.view(half), false), glse(*dev, lse.view(), false),
              gdq(*dev, dq.view(half), false), gdk(*dev, dk.view(half), false),
              gdv(*dev, dv.view(half), false);
          dev->forward_calls = 0;
          gpu->forward(gq.view, gk.view, gv.view, gout.view, glse.view);
          // The forward's calls: the ring family's zigzag steps between ranks (usp's between its
          // groups; all-gather's rows against the whole sequence) are cut when the device prefers
          // shaped steps (one call per query chunk that sees keys), else one a step.
          const std::size_t at = static_cast<std::size_t>(&c - cases.data()) * 2 + (half ? 1 : 0);
          if (!cut) plain_calls[at] = dev->forward_calls;
          const bool ring_zigzag =
              (c.strategy == StrategyKind::Burst || c.strategy == StrategyKind::Ring ||
               c.strategy == StrategyKind::Usp || c.strategy == StrategyKind::AllGather) &&
              c.layout == LayoutKind::Zigzag && P > 1;
          if (cut && ring_zigzag && !windowed) {
            EXPECT_GT(dev->forward_calls, plain_calls[at]) << "the forward was not cut";
          }
          gpu->backward(gdout.view, gq.view, gk.view, gv.view, gout.view, glse.view, gdq.view, gdk.view,
                        gdv.view);
          host->forward(q.view(half), k.view(half), v.view(half), out.view(half), lse.view());
          host->backward(dout.view(half), q.view(half), k.view(half), v.view(half), out.view(half),
                         lse.view(), dq.view(half), dk.view(half), dv.view(half));
          std::vector<std::byte> lse_bytes(4 * lse.vec().size());
          std::memcpy(lse_bytes.data(), lse.vec().data(), lse_bytes.size());
          if (!cut) {  // the same calls as the host's: bit for bit
            EXPECT_TRUE(gout.bytes(*dev) == out.bytes(half)) << "out";
            EXPECT_TRUE(glse.bytes(*dev) == lse_bytes) << "lse";
            EXPECT_TRUE(gdq.bytes(*dev) == dq.bytes(half)) << "dq";
            EXPECT_TRUE(gdk.bytes(*dev) == dk.bytes(half)) << "dk";
            EXPECT_TRUE(gdv.bytes(*dev) == dv.bytes(half)) << "dv";
          } else {  // the forward's calls over fewer keys: the same values up to fp32 rounding (out
                    // and the gradients then one rounding to bf16 apart at most; |values| < 4)
            const double tol = half ? 4 * 0x1p-8 * 4 : 1e-5;
            EXPECT_LE(max_diff(gout.bytes(*dev), out.bytes(half), half), tol) << "out";
            EXPECT_LE(max_diff(glse.bytes(*dev), lse_bytes, false), 1e-5) << "lse";
            EXPECT_LE(max_diff(gdq.bytes(*dev), dq.bytes(half), half), tol) << "dq";
            EXPECT_LE(max_diff(gdk.bytes(*dev), dk.bytes(half), half), tol) << "dk";
            EXPECT_LE(max_diff(gdv.bytes(*dev), dv.bytes(half), half), tol) << "dv";
          }
          EXPECT_EQ(dev->missing_mirrors, 0) << "steps whose device tables had no host mirror";
          EXPECT_EQ(dev->mirrors_in_device_memory, 0) << "host mirrors in device memory";
          EXPECT_EQ(dev->wrong_mirrors, 0) << "host mirrors that differ from the tables";
          dev->missing_mirrors = dev->mirrors_in_device_memory = dev->wrong_mirrors = 0;
        }
  }
  // A NaN in q (rank 0, row 1, head 3, dimension 5) is refused on every rank with its index.
  const ProblemShape shape{1, 96, 4, 2, 8, DType::F32};
  const auto& dev = plain;
  DistAttention attn(world, DistConfig{}, shape, Mask::causal_mask(), DistAttention::OnDevice{dev, kHost});
  const std::int64_t S = attn.local_length();
  Tensor qh({1, S, 4, 8}), kh({1, S, 2, 8});
  if (rank == 0) qh.vec()[static_cast<std::size_t>((1 * 4 + 3) * 8 + 5)] = std::nanf("");
  const GuardedTensor q(*dev, qh.view(), true), k(*dev, kh.view(), true), v(*dev, kh.view(), true),
      out(*dev, qh.view(), false), lse(*dev, Tensor({1, 4, S}).view(), false);
  try {
    attn.forward(q.view, k.view, v.view, out.view, lse.view);
    ADD_FAILURE() << "a NaN in q was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("q holds a NaN or infinity at [0,1,3,5]"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace burst
