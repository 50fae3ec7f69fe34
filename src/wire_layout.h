// src/wire_layout.h — what one message holds, described once (internal, pure: no MPI).
//
// A WireLayout is a list of named fields {dtype, count}; each field starts at the first offset
// after the previous one that is a multiple of its element size (as a C struct lays out its
// members), and the layout's size is rounded up to its largest element size, so that messages
// of one layout placed end to end (an all-to-all's segments, an all-gather's blocks) keep every
// field aligned. Padding appears only where an fp32 field follows an odd number of 16-bit
// elements, or at the end of such a message.
// Both sides use the same description: the strategies pack and view a message through its
// layout (src/strategies/wire_pack.h: pack_field, field_view), and the planners count its bytes()
// (plan_steps.cc, plan_strategies.cc), so a planned byte count is the bytes the counters see.
// The payloads of the ring family, allgather, usp and distflash are the functions below; the
// head-parallel exchanges (ulysses, usp, headpar) build theirs from their field lists.
// Does not: own memory, know about tensors' strides or communicate.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "burst/tensor.h"

namespace burst {

/// One field of a message: `count` elements of `dtype` at byte `offset` (a multiple of the
/// element size).
struct WireField {
  const char* name = "";
  DType dtype = DType::F32;
  std::int64_t count = 0;
  std::int64_t offset = 0;
  std::int64_t bytes() const { return count * static_cast<std::int64_t>(dtype_size(dtype)); }
};

/// The fields of one message in order; offsets aligned to each field's element size.
class WireLayout {
 public:
  struct Spec {
    const char* name;
    DType dtype;
    std::int64_t count;
  };
  WireLayout() = default;
  WireLayout(std::initializer_list<Spec> fields);
  /// Appends a field after the last one (aligned); returns its index. Throws Error(Internal)
  /// for a negative count.
  std::size_t add(const char* name, DType dtype, std::int64_t count);
  /// Bytes of the message: the end of the last field rounded up to the largest element size.
  std::int64_t bytes() const;
  std::size_t size() const { return fields_.size(); }
  const WireField& operator[](std::size_t i) const { return fields_[i]; }

 private:
  std::vector<WireField> fields_;
  std::int64_t end_ = 0, align_ = 1;
};

namespace wire {

/// Field indices of the layouts below.
enum KvFields : std::size_t { kK = 0, kV = 1 };
enum QueryFields : std::size_t { kQ = 0, kDout = 1, kDelta = 2, kLse = 3 };

/// K and V of one block, n elements each, in their storage dtype `dt`: the ring family's
/// forward and KV-side backward read payload, allgather's and usp's ring blocks, DistFlashAttn's
/// KV chunk.
WireLayout kv_block(DType dt, std::int64_t n);
/// Q and dO (n elements each, `dt`) then delta and lse (`rows` fp32 each): the query-side
/// backward's read payload (burst, usp) and DistFlashAttn's backward query chunk.
WireLayout query_block(DType dt, std::int64_t n, std::int64_t rows);
/// Q alone (n elements, `dt`): DistFlashAttn's forward query chunk.
WireLayout query_only(DType dt, std::int64_t n);
/// A write-ring partial of n values in the wire dtype (DistConfig::partials_dtype: F32 or
/// BF16; summed in fp32 on arrival): dQ, or dK and dV back to back.
WireLayout partial(DType wire, std::int64_t n);
/// DistFlashAttn's partial result returned by a helper: O (q fp32) and lse (rows fp32).
WireLayout out_lse(std::int64_t q, std::int64_t rows);

}  // namespace wire
}  // namespace burst
