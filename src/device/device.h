// src/device/device.h — the device seam: everything a strategy does to tensor memory (internal).
//
// Owns: the Device interface (memory from a pool, strided copies, fill, add, rounding to and
// from the wire dtype, the online-softmax merge, delta, the step kernels, streams and events),
// Buffer (one block of a device's memory or of pinned host memory) and BufferPool (blocks
// recycled across passes). A strategy holds a `const Device&` and never touches tensor memory
// itself: no memcpy, no loop over elements, no #ifdef (docs/design.md § The device seam).
// Conventions: views are burst::TensorView (pointer + shape + strides in ELEMENTS, up to 4
// dims); every view an operation takes lives in the device's memory (a host-addressable device,
// the CPU, takes host views). Operations are enqueued on the device's stream in call order and
// may return before they finish; an Event recorded after them tells when they have. On the CPU
// every operation is complete on return and every event is complete when recorded.
// Staging: the communicator moves host bytes (ByteBuffer); a device whose memory is not host
// memory copies a message to and from pinned host memory (copy_to_host / copy_from_host). On a
// host-addressable device (host_memory() true) a message's device memory IS its wire buffer, so
// staging is the identity (Buffer(ByteBuffer) and Buffer::to_host move the storage, no copy;
// the step executor stages, src/strategies/staging.h).
// Does not: communicate, validate user input (the callers checked it once at the boundary),
// or choose what runs where.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "burst/comm.h"
#include "burst/tensor.h"
#include "kernels/kernels.h"

namespace burst::device {

/// Where a Buffer's bytes live: the device's own memory, or host memory pinned for fast copies
/// to and from it (the wire buffers MPI sends and receives).
enum class MemoryKind : std::uint8_t { Device, PinnedHost };

/// An opaque stream handle (a cudaStream_t on a GPU; nullptr on the CPU).
using StreamHandle = void*;

/// A point in a device's stream: complete once every operation enqueued before it is. Plain
/// data (an opaque handle owned by the Device that recorded it; nullptr = complete).
struct Event {
  void* handle = nullptr;
};

/// One owning block of memory: a host byte vector (the CPU's device memory; pinned host memory
/// on every device — a ByteBuffer the communicator can own while in flight), or an allocation
/// in a device's memory released through the function it was made with. Move-only; data() is
/// aligned to 16 bytes at least (operator new, or the device allocator's alignment).
class Buffer {
 public:
  /// Frees `data` (device memory of `bytes` bytes) on behalf of `owner`.
  using FreeFn = void (*)(const void* owner, void* data, std::int64_t bytes);

  Buffer() = default;
  /// Host memory: owns `bytes` (moved in).
  explicit Buffer(ByteBuffer bytes) : host_(std::move(bytes)) {}
  /// Device memory at `data`, `bytes` bytes, released by free(owner, data, bytes).
  Buffer(void* data, std::int64_t bytes, FreeFn free, const void* owner)
      : data_(data), bytes_(bytes), free_(free), owner_(owner) {}
  ~Buffer() { reset(); }
  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  std::byte* data() const;
  std::int64_t size() const;
  bool empty() const { return size() == 0; }
  /// True when the bytes are a host ByteBuffer (to_host moves them out without a copy).
  bool on_host() const { return data_ == nullptr; }
  /// The host bytes, moved out (the buffer is empty afterwards). Precondition: on_host().
  ByteBuffer to_host();
  /// The fp32 values of the block (size() / 4 of them).
  float* f32() const { return static_cast<float*>(static_cast<void*>(data())); }

 private:
  void reset();
  ByteBuffer host_;
  void* data_ = nullptr;
  std::int64_t bytes_ = 0;
  FreeFn free_ = nullptr;
  const void* owner_ = nullptr;
};

class Device;

/// Blocks of one memory kind of one device, recycled within a pass and kept across passes, so
/// that a model calling attention every step does not page-fault (or cudaMalloc) fresh message
/// and partial buffers on every call (docs/design.md § Memory reuse: without it, a third of a
/// 2-rank backward at S = 2048 was page faults). Blocks are matched by exact size (a pass asks
/// for the same few sizes every time); at most kMaxHeld free blocks are kept, the oldest
/// dropped. Counts the bytes the current pass holds at once (its peak), as
/// DistStats::peak_buffer_bytes reports. Not thread-safe: one pool per executor.
class BufferPool {
 public:
  static constexpr std::size_t kMaxHeld = 32;
  explicit BufferPool(const Device& device, MemoryKind kind = MemoryKind::Device)
      : device_(&device), kind_(kind) {}
  /// Drops the kept blocks (pinned host blocks through Device::release_pinned).
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;
  const Device& device() const { return *device_; }
  /// A block of exactly `bytes` bytes, contents unspecified.
  Buffer get(std::int64_t bytes);
  /// As get, every byte 0 (every fp32 value 0; a device fill, enqueued).
  Buffer get_zeroed(std::int64_t bytes);
  /// Hands a block back for reuse (any size; empty blocks are dropped).
  void put(Buffer buffer);
  /// Host blocks as ByteBuffers (the communicator's currency): get(bytes).to_host() and
  /// put(Buffer(bytes)). Precondition: the pool's blocks are host memory (PinnedHost, or a
  /// host-memory device).
  ByteBuffer get_host(std::int64_t bytes);
  void put_host(ByteBuffer bytes);
  /// Starts a pass's accounting: `held_bytes` already held (e.g. a payload packed before).
  void begin_pass(std::int64_t held_bytes = 0);
  /// Largest number of bytes handed out and not yet returned at once since begin_pass.
  std::int64_t peak_bytes() const { return peak_; }
  /// Bytes of the free blocks kept for the next pass.
  std::int64_t kept_bytes() const;

 private:
  void drop(Buffer& block) const;  // a block leaving the pool for good
  const Device* device_;
  MemoryKind kind_;
  std::vector<Buffer> free_;         // oldest first
  std::int64_t out_ = 0, peak_ = 0;  // bytes handed out and not returned; their maximum
};

/// What the strategies do to memory, on one device. Every view argument is in this device's
/// memory (Device kind) unless it says host. Not collective; never communicates. Operations on
/// one Device object are not thread-safe (one stream, used by one pass at a time).
/// Errors: Error(Internal) for shapes or dtypes the callers were supposed to have matched
/// (they validated once at the boundary); Error(Unsupported) for an operation a device lacks.
class Device {
 public:
  virtual ~Device() = default;

  /// "cpu", "cuda:0", ... — for error messages and logs.
  virtual std::string name() const = 0;
  /// True when device memory is host memory (the CPU): staging a message is the identity.
  virtual bool host_memory() const = 0;
  /// True when this device's fastest step kernel takes only steps whose visibility has one of a
  /// few whole shapes (a GPU's cuDNN: all keys, or causal): the ring's forward then cuts a step
  /// into query chunks, each over the key rows it sees (strategies/backward_spans.h:
  /// forward_spans), as its backward always does. False on the CPU, whose kernels skip invisible
  /// tiles themselves (its results stay those of one call per step).
  virtual bool prefers_shaped_steps() const { return false; }

  // ---- memory ------------------------------------------------------------------------------
  /// A fresh block of `bytes` bytes of `kind` (contents unspecified). Prefer a BufferPool.
  /// PinnedHost blocks are host ByteBuffers (the communicator's currency) that a GPU device
  /// page-locks for asynchronous copies; a pool hands each back through release_pinned before
  /// freeing it.
  virtual Buffer allocate(std::int64_t bytes, MemoryKind kind) const = 0;
  /// Undoes what allocate(…, PinnedHost) did to a host block's memory before it is freed (a GPU:
  /// unregisters the page-locked range; a no-op for host bytes it never pinned, and on the CPU).
  /// Never throws.
  virtual void release_pinned(ByteBuffer& bytes) const noexcept { (void)bytes; }

  // ---- streams and events ------------------------------------------------------------------
  /// The stream this device enqueues on (nullptr on the CPU).
  virtual StreamHandle stream() const = 0;
  /// An event complete once every operation enqueued so far is (CPU: complete at once).
  virtual Event record() const = 0;
  /// True when `e` is complete; never blocks.
  virtual bool ready(const Event& e) const = 0;
  /// Blocks the calling thread until `e` is complete; releases the event's resources.
  virtual void wait(const Event& e) const = 0;

  // ---- copies ------------------------------------------------------------------------------
  /// dst ← src, `bytes` bytes, device memory to pinned host memory (staging out). Enqueued.
  virtual void copy_to_host(const std::byte* src, std::byte* dst_host, std::int64_t bytes) const = 0;
  /// dst ← src, `bytes` bytes, pinned host memory to device memory (staging in). Enqueued.
  virtual void copy_from_host(const std::byte* src_host, std::byte* dst, std::int64_t bytes) const = 0;
  /// dst ← src: same shape and dtype, any strides (innermost stride 1, or size ≤ 1). Packs a
  /// strided tensor into a contiguous message field and unpacks it back (a view over a message
  /// is a contiguous view over its bytes). Cost: one read and one write of every element.
  virtual void copy(const TensorView& src, const TensorView& dst) const = 0;
  /// Index copy along dimension `dim` (any dim; the innermost one is copied element by
  /// element). scatter false: dst[.., i, ..] ← src[.., index[i], ..] for i < dst.shape[dim] (a
  /// gather); scatter true: dst[.., index[i], ..] ← src[.., i, ..] for i < src.shape[dim].
  /// index null: the identity (a plain copy). Same dtype; the other dims equal; `index` is
  /// host memory (checked against the bounds on the host). `index_twin`: null, or the same
  /// table in this device's memory, uploaded once by the caller (strategies/step_tables.h): a
  /// GPU reads it instead of copying `index` to its memory per call; a host-memory device reads
  /// `index`. accumulate (fp32 only): += instead of ←. Ulysses' all-to-all segments and
  /// head-parallel blocks are gathered from and scattered to position order with it.
  virtual void index_copy(const TensorView& src, const TensorView& dst, int dim, const std::int64_t* index,
                          const std::int64_t* index_twin, bool scatter, bool accumulate) const = 0;
  /// Every element of dst (fp32, or 16-bit: value rounded once) ← value.
  virtual void fill(const TensorView& dst, float value) const = 0;
  /// acc ← acc + widen(x) element-wise: acc fp32, x fp32 / bf16 / f16, same shape, any strides.
  virtual void add(const TensorView& x, const TensorView& acc) const = 0;
  /// dst ← src with dtype conversion: rounding to the wire dtype (fp32 → bf16 / f16, round to
  /// nearest even, bitwise as burst/tensor.h's scalar rules) and widening back (exact). Same
  /// shape, any strides.
  virtual void convert(const TensorView& src, const TensorView& dst) const = 0;

  // ---- attention math ----------------------------------------------------------------------
  /// merge_forward (burst/softmax_merge.h, merge form B): out, out_part [B,S,H,D] fp32, lse,
  /// lse_part [B,H,S] fp32, in place into (out, lse).
  virtual void merge_forward(const TensorView& out, const TensorView& lse, const TensorView& out_part,
                             const TensorView& lse_part) const = 0;
  /// attention_delta (burst/attention.h): delta [B,H,S] fp32 ← rowsum(dout ∘ out).
  virtual void attention_delta(const TensorView& dout, const TensorView& out,
                               const TensorView& delta) const = 0;
  /// kernels::step_forward / step_backward (kernels/step.h) on this device's memory; the
  /// params' positions and mask table are host memory on the CPU, device memory on a GPU (with
  /// their host copies in KernelArgs::host_*, where the caller has them). step_backward's `out`,
  /// when given, is the global out [B,S_q,H,D] (any dtype) that delta came from, for a kernel that
  /// reads O instead of delta (cuDNN's); a device whose kernels read delta ignores it (the CPU).
  virtual void step_forward(const TensorView& q, const TensorView& k, const TensorView& v,
                            const TensorView& out, const TensorView& lse,
                            const kernels::KernelParams& p) const = 0;
  virtual void step_backward(const TensorView& dout, const TensorView& q, const TensorView& k,
                             const TensorView& v, const TensorView& lse, const TensorView& delta,
                             const TensorView& dq, const TensorView& dk, const TensorView& dv,
                             const kernels::KernelParams& p, bool accumulate,
                             const TensorView* out = nullptr) const = 0;

  // ---- host-only checks ----------------------------------------------------------------------
  /// 64-bit content fingerprint of `views` (shapes, dtypes, contents; FNV-1a over 32-bit words
  /// in four lanes, 16-bit views as their bytes): the same value for the same contents on every
  /// device (a GPU reads a host copy). Not cryptographic. Cost: one read of every element.
  virtual std::uint64_t fingerprint(std::initializer_list<TensorView> views) const = 0;
  /// The first NaN or infinity of `t` (fp32 / bf16 / f16, 4 dims, any strides): its index in
  /// row-major order over t's shape, or -1 when every element is finite. Blocks until the answer
  /// is on the host (it waits for the operations enqueued before). Bits only: exponent all ones.
  /// Cost: one read of every element (a GPU reads a host copy).
  virtual std::int64_t first_nonfinite(const TensorView& t) const = 0;
};

/// The CPU device (src/device/cpu/): today's host code behind the seam. Immutable, stateless:
/// one per DistAttention (Setup::device) or per caller.
std::shared_ptr<const Device> make_cpu_device();

}  // namespace burst::device
