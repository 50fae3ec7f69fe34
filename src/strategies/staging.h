// src/strategies/staging.h — messages between device memory and the communicator (internal).
//
// The communicator moves host bytes (ByteBuffer); a strategy's tensors live on its device
// (src/device/device.h). The step executor stages: a message is {pinned wire buffer, device
// copy, event}. A message this rank originates is packed in device memory and copied out once
// (out); a received one is copied in once (in) and read on the device after its event; a
// forwarded one is sent again from its pinned wire buffer (no copy). A collective (all-gather,
// all-to-all, reduce-scatter) is one message each way: its whole send buffer staged out once, its
// whole receive buffer staged in once (collective()). On a host-memory device (the CPU) the
// device copy IS the wire buffer: out, in and collective move storage and copy nothing.
// Does not: communicate (collective() runs the caller's communicator call on the wire buffers).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "burst/comm.h"
#include "device/device.h"

namespace burst::strategies {

/// One message: its wire bytes (what isend / irecv own while in flight), its device copy
/// (empty on a host-memory device, whose memory the wire bytes are) and the event after which
/// the device copy is complete.
struct Message {
  ByteBuffer wire;
  device::Buffer copy;
  device::Event ready;
  /// The message's bytes in device memory (its wire bytes on a host-memory device).
  const std::byte* device_data() const { return copy.empty() ? wire.data() : copy.data(); }
  std::byte* device_data() { return copy.empty() ? wire.data() : copy.data(); }
};

/// The device pool and the pinned wire pool of one executor, and the staging copies between
/// them. Not thread-safe (one executor, one pass at a time).
class Stager {
 public:
  explicit Stager(const device::Device& dev)
      : dev_(&dev), pool_(dev), wire_pool_(dev, device::MemoryKind::PinnedHost) {}
  const device::Device& device() const { return *dev_; }
  /// Device memory: payloads, partials, results.
  device::BufferPool& pool() { return pool_; }
  /// Pinned host memory for wire buffers; the device pool itself on a host-memory device (one
  /// pool, as before the seam: the same peak and the same reuse).
  device::BufferPool& wire_pool() { return dev_->host_memory() ? pool_ : wire_pool_; }
  /// Peak bytes held at once by both pools since begin_pass.
  std::int64_t peak_bytes() const;
  void begin_pass(std::int64_t held_bytes);

  /// A message from a block of device memory this rank packed: its bytes copied out to a pinned
  /// wire buffer (complete on return: MPI reads it next), the block kept as the device copy.
  /// Host-memory device: the block's bytes become the wire, nothing is copied.
  Message out(device::Buffer block);
  /// As out, the block given back to the pool (a partial sent once and not read again).
  ByteBuffer send_copy(device::Buffer block);
  /// A received wire buffer with its device copy enqueued (H→D; wait with device_ready).
  /// Host-memory device: the wire is the device memory, nothing is copied.
  Message in(ByteBuffer wire);
  /// Waits until m's device copy is complete; returns it (device memory).
  const std::byte* device_ready(Message& m) const;
  /// Returns both buffers of m to their pools.
  void recycle(Message m);
  /// A device block from a received message: its device copy (or, host memory, its wire).
  device::Buffer take_device(Message m);

  /// The communicator's part of a collective, on wire buffers: send and receive (recv_bytes
  /// long, contents unspecified) are host memory the communicator reads and writes.
  using CollectiveFn = std::function<void(const ByteBuffer& send, ByteBuffer& recv)>;
  /// One collective through staging: `send` (device memory, packed by the caller) is copied out
  /// to a pinned wire buffer once, `op` runs on the wire buffers, and the receive buffer is
  /// copied in once. Returns the received bytes in device memory (a pool block of recv_bytes:
  /// hand it back with pool().put); `send` is handed back unchanged (on a host-memory device its
  /// storage is lent to the wire and returned: nothing is copied). Collective as `op`.
  device::Buffer collective(device::Buffer& send, std::int64_t recv_bytes, const CollectiveFn& op);

 private:
  const device::Device* dev_;
  device::BufferPool pool_, wire_pool_;
};

}  // namespace burst::strategies
