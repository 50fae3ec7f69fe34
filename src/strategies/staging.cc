// Staging messages between device memory and the communicator (see staging.h).
#include "strategies/staging.h"

#include <utility>

namespace burst::strategies {

std::int64_t Stager::peak_bytes() const {
  return pool_.peak_bytes() + (dev_->host_memory() ? 0 : wire_pool_.peak_bytes());
}

void Stager::begin_pass(std::int64_t held_bytes) {
  pool_.begin_pass(held_bytes);
  wire_pool_.begin_pass(0);
}

Message Stager::out(device::Buffer block) {
  Message m;
  if (dev_->host_memory()) {
    m.wire = block.to_host();
    return m;
  }
  m.wire = wire_pool_.get_host(block.size());
  dev_->copy_to_host(block.data(), m.wire.data(), block.size());
  dev_->wait(dev_->record());
  m.copy = std::move(block);
  return m;
}

ByteBuffer Stager::send_copy(device::Buffer block) {
  Message m = out(std::move(block));
  pool_.put(std::move(m.copy));
  return std::move(m.wire);
}

Message Stager::in(ByteBuffer wire) {
  Message m;
  m.wire = std::move(wire);
  if (dev_->host_memory()) return m;
  const auto bytes = static_cast<std::int64_t>(m.wire.size());
  m.copy = pool_.get(bytes);
  dev_->copy_from_host(m.wire.data(), m.copy.data(), bytes);
  m.ready = dev_->record();
  return m;
}

const std::byte* Stager::device_ready(Message& m) const {
  dev_->wait(m.ready);
  m.ready = {};
  return m.device_data();
}

void Stager::recycle(Message m) {
  dev_->wait(m.ready);
  wire_pool().put_host(std::move(m.wire));
  pool_.put(std::move(m.copy));
}

device::Buffer Stager::take_device(Message m) {
  dev_->wait(m.ready);
  if (dev_->host_memory()) return device::Buffer(std::move(m.wire));
  wire_pool_.put_host(std::move(m.wire));
  return std::move(m.copy);
}

device::Buffer Stager::collective(device::Buffer& send, std::int64_t recv_bytes, const CollectiveFn& op) {
  Message m = out(std::move(send));
  ByteBuffer recv = wire_pool().get_host(recv_bytes);
  op(m.wire, recv);
  if (dev_->host_memory()) {
    send = device::Buffer(std::move(m.wire));
  } else {
    send = std::move(m.copy);
    wire_pool_.put_host(std::move(m.wire));
  }
  return take_device(in(std::move(recv)));
}

}  // namespace burst::strategies
