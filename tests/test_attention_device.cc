// The serial entry points on a device of the seam (src/attention_device.h) against the public
// ones (burst/attention.h), on the CPU device: the same validation and varlen split, positions
// and mask tables staged into the device's memory, delta on the device — so the results must be
// the public call's bit for bit (full, causal, sliding window, GQA, varlen with per-sequence
// masks, explicit positions, fp32 and bf16). A GPU runs the same code with its own device
// (bench/gpu_cuda.cc, python/), where the results are compared with these within rounding.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "attention_device.h"
#include "burst/attention.h"
#include "burst/error.h"
#include "burst/mask.h"
#include "burst/tensor.h"
#include "device/device.h"
#include "test_util.h"

namespace burst {
namespace {

using test::random_tensor;

struct Case {
  std::string name;
  std::vector<std::int64_t> q_shape, kv_shape, lse_shape;
  AttentionParams params;
  DType dtype = DType::F32;
};

// Storage of `values` in `dtype` (fp32 as is; bf16 rounded once).
struct Stored {
  Tensor f32;
  std::vector<std::uint16_t> bits;
  TensorView view;
  Stored(Tensor values, DType dtype) : f32(std::move(values)) {
    view = f32.view();
    if (dtype == DType::F32) return;
    bits.resize(static_cast<std::size_t>(f32.numel()));
    view = make_view(bits.data(), dtype, f32.shape());
    convert(f32.view(), view);
  }
  Stored(const Stored&) = delete;
  Stored& operator=(const Stored&) = delete;
};

bool same_bytes(const TensorView& a, const TensorView& b) {
  const std::size_t n = static_cast<std::size_t>(a.numel()) * dtype_size(a.dtype);
  return a.numel() == b.numel() && std::memcmp(a.data, b.data, n) == 0;
}

std::vector<Case> cases() {
  std::vector<Case> out;
  auto bshd = [](std::string name, std::int64_t S, std::int64_t H, std::int64_t H_kv, Mask mask, DType dt) {
    Case c{std::move(name), {2, S, H, 32}, {2, S, H_kv, 32}, {2, H, S}, {}, dt};
    c.params.mask = std::move(mask);
    return c;
  };
  out.push_back(bshd("full_fp32", 97, 4, 4, Mask::full(), DType::F32));
  out.push_back(bshd("causal_gqa_bf16", 130, 4, 2, Mask::causal_mask(), DType::BF16));
  out.push_back(bshd("window_fp32", 150, 2, 1, Mask::sliding_window(16, 0), DType::F32));
  Case offset = bshd("causal_offset_fp32", 64, 2, 2, Mask::causal_mask(), DType::F32);
  offset.params.q_offset = 64;  // the queries are the second half of a 128-token sequence
  offset.kv_shape = {2, 128, 2, 32};
  out.push_back(std::move(offset));
  Case varlen{"varlen_causal_bf16", {100, 4, 32}, {100, 4, 32}, {4, 100}, {}, DType::BF16};
  varlen.params.mask = Mask::causal_mask();
  varlen.params.cu_seqlens_q = varlen.params.cu_seqlens_kv = {0, 7, 40, 41, 100};
  out.push_back(std::move(varlen));
  return out;
}

TEST(AttentionOnDevice, CpuDeviceEqualsThePublicEntryPointsBitForBit) {
  const auto dev = device::make_cpu_device();
  std::uint64_t seed = 11;
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const Stored q(random_tensor(c.q_shape, seed++), c.dtype), k(random_tensor(c.kv_shape, seed++), c.dtype);
    const Stored v(random_tensor(c.kv_shape, seed++), c.dtype),
        dout(random_tensor(c.q_shape, seed++), c.dtype);
    const Stored out_a(Tensor(c.q_shape), c.dtype), out_b(Tensor(c.q_shape), c.dtype);
    Tensor lse_a(c.lse_shape), lse_b(c.lse_shape);
    attention_forward(q.view, k.view, v.view, out_a.view, lse_a.view(), c.params);
    entry::attention_forward_on(*dev, kHost, q.view, k.view, v.view, out_b.view, lse_b.view(), c.params);
    EXPECT_TRUE(same_bytes(out_a.view, out_b.view));
    EXPECT_TRUE(same_bytes(lse_a.view(), lse_b.view()));

    const Stored dq_a(Tensor(c.q_shape), c.dtype), dq_b(Tensor(c.q_shape), c.dtype);
    const Stored dk_a(Tensor(c.kv_shape), c.dtype), dk_b(Tensor(c.kv_shape), c.dtype);
    const Stored dv_a(Tensor(c.kv_shape), c.dtype), dv_b(Tensor(c.kv_shape), c.dtype);
    attention_backward(dout.view, q.view, k.view, v.view, out_a.view, lse_a.view(), dq_a.view, dk_a.view,
                       dv_a.view, c.params);
    entry::attention_backward_on(*dev, kHost, dout.view, q.view, k.view, v.view, out_a.view, lse_a.view(),
                                 dq_b.view, dk_b.view, dv_b.view, c.params);
    EXPECT_TRUE(same_bytes(dq_a.view, dq_b.view));
    EXPECT_TRUE(same_bytes(dk_a.view, dk_b.view));
    EXPECT_TRUE(same_bytes(dv_a.view, dv_b.view));
  }
}

// The comparison above can fail: a different mask gives different bytes.
TEST(AttentionOnDevice, TheComparisonSeesADifferentMask) {
  const auto dev = device::make_cpu_device();
  const Tensor q = random_tensor({1, 64, 2, 16}, 1), k = random_tensor({1, 64, 2, 16}, 2);
  const Tensor v = random_tensor({1, 64, 2, 16}, 3);
  Tensor out_a({1, 64, 2, 16}), out_b({1, 64, 2, 16}), lse_a({1, 2, 64}), lse_b({1, 2, 64});
  AttentionParams causal, full;
  causal.mask = Mask::causal_mask();
  attention_forward(q.view(), k.view(), v.view(), out_a.view(), lse_a.view(), causal);
  entry::attention_forward_on(*dev, kHost, q.view(), k.view(), v.view(), out_b.view(), lse_b.view(), full);
  EXPECT_FALSE(same_bytes(out_a.view(), out_b.view()));
}

// Operands on another device than the call's are refused by name, before any read.
TEST(AttentionOnDevice, OperandsOffTheCallsDeviceAreRefusedByName) {
  const auto dev = device::make_cpu_device();
  const Tensor q = random_tensor({1, 8, 1, 8}, 1), k = random_tensor({1, 8, 1, 8}, 2);
  Tensor v = random_tensor({1, 8, 1, 8}, 3), out({1, 8, 1, 8}), lse({1, 1, 8});
  TensorView vc = v.view();
  vc.device = Device{DeviceKind::Cuda, 0};
  try {
    entry::attention_forward_on(*dev, kHost, q.view(), k.view(), vc, out.view(), lse.view(), {});
    ADD_FAILURE() << "a cuda:0 operand ran on the host";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("v is on cuda:0, but this call runs on host"), std::string::npos) << e.what();
  }
  try {  // a call said to run on cuda:0 with host operands: q is named first
    entry::attention_forward_on(*dev, Device{DeviceKind::Cuda, 0}, q.view(), k.view(), vc, out.view(),
                                lse.view(), {});
    ADD_FAILURE() << "host operands ran on cuda:0";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("q is on host, but this call runs on cuda:0"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace burst
