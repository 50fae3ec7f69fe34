// attention_forward / attention_backward on a device of the seam (attention_device.h).
#include "attention_device.h"

#include <cstring>
#include <vector>

#include "attention_call.h"
#include "burst/error.h"

namespace burst::entry {
namespace {

// The call's positions and each resolved mask's slice table in the device's memory: what the
// step kernels' KernelArgs point at (kernels/kernels.h).
struct DeviceArgs {
  device::Buffer q_pos, kv_pos;
  std::vector<device::Buffer> slices;  // one per entry of Call::masks
};

template <typename T>
device::Buffer to_device(const device::Device& dev, const std::vector<T>& host) {
  const auto bytes = static_cast<std::int64_t>(host.size() * sizeof(T));
  device::Buffer b = dev.allocate(bytes, device::MemoryKind::Device);
  if (bytes > 0) dev.copy_from_host(reinterpret_cast<const std::byte*>(host.data()), b.data(), bytes);
  return b;
}

DeviceArgs device_args(const device::Device& dev, const Call& c) {
  DeviceArgs a{to_device(dev, c.q_pos), to_device(dev, c.kv_pos), {}};
  for (const ResolvedMask& m : c.masks) a.slices.push_back(to_device(dev, m.slices()));
  return a;
}

// for_each_problem's parameters with the positions and the mask table of problem `mask_index`
// in the device's memory (the CPU knobs stay: the CPU device's kernels read them).
kernels::KernelParams on_device(kernels::KernelParams sp, const Call& c, const DeviceArgs& a) {
  const std::size_t m = static_cast<std::size_t>(sp.mask - c.masks.data());
  sp.q_pos = reinterpret_cast<const std::int64_t*>(a.q_pos.data());
  sp.kv_pos = reinterpret_cast<const std::int64_t*>(a.kv_pos.data());
  sp.mask_slices = reinterpret_cast<const MaskSlice*>(a.slices[m].data());
  sp.mask_slice_count = static_cast<std::int64_t>(c.masks[m].slices().size());
  sp.host_q_pos = c.q_pos.data();  // the host arrays these came from (kernels.h)
  sp.host_kv_pos = c.kv_pos.data();
  sp.host_mask_slices = c.masks[m].slices().data();
  return sp;
}

}  // namespace

void attention_forward_on(const device::Device& dev, const Device& runs_on, const TensorView& q,
                          const TensorView& k, const TensorView& v, const TensorView& out,
                          const TensorView& lse, const AttentionParams& params) {
  constexpr const char* api = "attention_forward";
  check_device(api, runs_on, "q", q, "k", k, "v", v, "out", out, "lse", lse);
  const Call c = validate(api, q, k, v, params, KernelPass::Forward);
  check_forward_outputs(api, c, q, k, v, out, lse);
  const DeviceArgs args = device_args(dev, c);
  const bool vl = c.varlen;
  for_each_problem(c, params, [&](const kernels::KernelParams& sp, const Seq& s) {
    dev.step_forward(sequence(q, vl, s.q0, s.nq), sequence(k, vl, s.kv0, s.nkv),
                     sequence(v, vl, s.kv0, s.nkv), sequence(out, vl, s.q0, s.nq),
                     sequence_rows(lse, vl, s.q0, s.nq), on_device(sp, c, args));
  });
  dev.wait(dev.record());  // the position buffers are released on return
}

void attention_backward_on(const device::Device& dev, const Device& runs_on, const TensorView& dout,
                           const TensorView& q, const TensorView& k, const TensorView& v,
                           const TensorView& out, const TensorView& lse, const TensorView& dq,
                           const TensorView& dk, const TensorView& dv, const AttentionParams& params) {
  constexpr const char* api = "attention_backward";
  check_device(api, runs_on, "dout", dout, "q", q, "k", k, "v", v, "out", out, "lse", lse, "dq", dq, "dk", dk,
               "dv", dv);
  const Call c = validate(api, q, k, v, params, KernelPass::Backward);
  check_same_shape(api, "dout", dout, "q", q);
  check_same_shape(api, "out", out, "q", q);
  check_rows(api, "lse", lse, c.varlen, c.B, c.H, c.S_q);
  check_gradients(api, c, dout, q, k, v, dq, dk, dv, false);
  // delta [B,H,S] (varlen [H,T]) fp32 in the device's memory, contiguous like lse.
  const std::vector<std::int64_t> rows =
      c.varlen ? std::vector<std::int64_t>{c.H, c.S_q} : std::vector<std::int64_t>{c.B, c.H, c.S_q};
  std::int64_t count = 1;
  for (const std::int64_t n : rows) count *= n;
  device::Buffer delta_mem = dev.allocate(count * 4, device::MemoryKind::Device);
  TensorView delta = make_view(delta_mem.f32(), rows);
  delta.device = runs_on;
  dev.attention_delta(dout, out, delta);
  const DeviceArgs args = device_args(dev, c);
  const bool vl = c.varlen;
  for_each_problem(c, params, [&](const kernels::KernelParams& sp, const Seq& s) {
    const TensorView out_s = sequence(out, vl, s.q0, s.nq);  // the out delta came from
    dev.step_backward(sequence(dout, vl, s.q0, s.nq), sequence(q, vl, s.q0, s.nq),
                      sequence(k, vl, s.kv0, s.nkv), sequence(v, vl, s.kv0, s.nkv),
                      sequence_rows(lse, vl, s.q0, s.nq), sequence_rows(delta, vl, s.q0, s.nq),
                      sequence(dq, vl, s.q0, s.nq), sequence(dk, vl, s.kv0, s.nkv),
                      sequence(dv, vl, s.kv0, s.nkv), on_device(sp, c, args), false, &out_s);
  });
  dev.wait(dev.record());  // delta and the position buffers are released on return
}

}  // namespace burst::entry
