// Buffer and BufferPool (see device.h): device-independent, every allocation through a Device.
#include "device/device.h"

#include <algorithm>

#include "burst/error.h"

namespace burst::device {

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    reset();
    host_ = std::move(o.host_);
    o.host_.clear();
    data_ = o.data_;
    bytes_ = o.bytes_;
    free_ = o.free_;
    owner_ = o.owner_;
    o.data_ = nullptr;
    o.bytes_ = 0;
    o.free_ = nullptr;
  }
  return *this;
}

void Buffer::reset() {
  if (data_ && free_) free_(owner_, data_, bytes_);
  data_ = nullptr;
  bytes_ = 0;
  free_ = nullptr;
  host_.clear();
}

std::byte* Buffer::data() const {
  return data_ ? static_cast<std::byte*>(data_) : const_cast<std::byte*>(host_.data());
}

std::int64_t Buffer::size() const { return data_ ? bytes_ : static_cast<std::int64_t>(host_.size()); }

ByteBuffer Buffer::to_host() {
  BURST_CHECK(on_host(), Internal, "to_host on a device-memory buffer of ", bytes_, " bytes");
  ByteBuffer b = std::move(host_);
  host_.clear();
  return b;
}

Buffer BufferPool::get(std::int64_t bytes) {
  BURST_CHECK(bytes >= 0, Internal, "buffer of ", bytes, " bytes");
  out_ += bytes;
  peak_ = std::max(peak_, out_);
  for (std::size_t i = free_.size(); i-- > 0;) {
    if (free_[i].size() == bytes) {
      Buffer v = std::move(free_[i]);
      free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(i));
      return v;
    }
  }
  return device_->allocate(bytes, kind_);
}

Buffer BufferPool::get_zeroed(std::int64_t bytes) {
  BURST_CHECK(bytes % 4 == 0, Internal, "zeroed buffer of ", bytes, " bytes (not whole fp32 values)");
  Buffer v = get(bytes);
  if (bytes > 0) device_->fill(make_view(static_cast<const void*>(v.data()), DType::F32, {bytes / 4}), 0.0f);
  return v;
}

BufferPool::~BufferPool() {
  for (Buffer& block : free_) drop(block);
}

void BufferPool::drop(Buffer& block) const {
  if (kind_ != MemoryKind::PinnedHost || !block.on_host()) return;
  ByteBuffer bytes = block.to_host();
  device_->release_pinned(bytes);
}

void BufferPool::put(Buffer buffer) {
  if (buffer.empty()) return;
  out_ = std::max<std::int64_t>(0, out_ - buffer.size());
  free_.push_back(std::move(buffer));
  if (free_.size() > kMaxHeld) {
    drop(free_.front());
    free_.erase(free_.begin());
  }
}

ByteBuffer BufferPool::get_host(std::int64_t bytes) { return get(bytes).to_host(); }

void BufferPool::put_host(ByteBuffer bytes) { put(Buffer(std::move(bytes))); }

void BufferPool::begin_pass(std::int64_t held_bytes) {
  out_ = held_bytes;
  peak_ = held_bytes;
}

std::int64_t BufferPool::kept_bytes() const {
  std::int64_t n = 0;
  for (const auto& v : free_) n += v.size();
  return n;
}

}  // namespace burst::device
