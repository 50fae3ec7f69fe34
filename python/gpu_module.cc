// python/gpu_module.cc — the module's GPU path (burst._C.cuda_built, check_gpu,
// attention_forward_device, attention_backward_device): torch CUDA tensors handed over as
// (data_ptr, shape, strides in elements, dtype, device) without a copy, run by the serial entry
// points on the GPU's device (src/attention_device.h) — a device::CudaDevice in a CUDA build
// (gpu_cuda.cc), a clear Unsupported error naming the build without (gpu_none.cc).
// Synchronisation: the caller (_torch.py) waits for torch's current stream before the call; the
// call returns after its work on the device's own stream is complete, so torch may read the
// outputs at once.
#include <pybind11/stl.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "attention_device.h"
#include "burst/error.h"
#include "module_common.h"

namespace py = pybind11;

namespace burst::python {

TensorView view_of_desc(const Desc& d, const char* name) {
  const auto& [ptr, shape, strides, dtype, device] = d;
  BURST_CHECK(shape.size() >= 1 && shape.size() <= 4 && strides.size() == shape.size(), InvalidArgument, name,
              ": expected 1 to 4 dims with one stride each, got ", shape.size(), " dims and ", strides.size(),
              " strides");
  TensorView v;
  v.data = reinterpret_cast<void*>(ptr);
  v.dtype = parse_dtype(dtype);
  BURST_CHECK(v.dtype == DType::F32 || v.dtype == DType::BF16 || v.dtype == DType::F16, InvalidArgument, name,
              ": dtype ", dtype, " (float32, bfloat16 or float16 expected)");
  v.ndim = static_cast<int>(shape.size());
  for (std::size_t i = 0; i < shape.size(); ++i) {
    v.shape[i] = shape[i];
    v.stride[i] = strides[i];
  }
  try {
    v.device = parse_device(device);
  } catch (const Error& e) { BURST_FAIL(InvalidArgument, name, ": ", e.message()); }
  return v;
}

namespace {

// The device the call runs on: q's (every other operand is checked against it by the entry).
Device call_device(const TensorView& q) {
  BURST_CHECK(q.device.kind == DeviceKind::Cuda, InvalidArgument,
              "attention on the GPU path: q is on host; the GPU path takes CUDA tensors");
  return q.device;
}

}  // namespace

void bind_gpu(py::module_& m, const GpuParams& make) {
  m.def("cuda_built", &gpu_built, "True when this module was built with CUDA (BURST_WITH_CUDA).");
  m.def(
      "check_gpu", [](const std::string& device) { (void)make_gpu_device(parse_device(device).index); },
      py::arg("device"),
      "Raises NotImplementedError unless `device` (\"cuda:N\") is a usable GPU of a CUDA build, "
      "naming why (the build, or the runtime's reason). Not collective.");
  m.def(
      "attention_forward_device",
      [make](const Desc& q, const Desc& k, const Desc& v, const Desc& out, const Desc& lse,
             const py::kwargs& kw) {
        const TensorView tq = view_of_desc(q, "q"), tk = view_of_desc(k, "k"), tv = view_of_desc(v, "v");
        const TensorView tout = view_of_desc(out, "out"), tlse = view_of_desc(lse, "lse");
        const AttentionParams p = make(kw, tq, tk);
        const Device on = call_device(tq);
        const auto dev = make_gpu_device(on.index);
        py::gil_scoped_release release;
        entry::attention_forward_on(*dev, on, tq, tk, tv, tout, tlse, p);
      },
      py::arg("q"), py::arg("k"), py::arg("v"), py::arg("out"), py::arg("lse"),
      "attention_forward on CUDA memory: operands as (data_ptr, shape, strides, dtype, device), "
      "keywords as attention_forward's. Returns when the outputs are written. Not collective. "
      "Releases the GIL.");
  m.def(
      "attention_backward_device",
      [make](const Desc& dout, const Desc& q, const Desc& k, const Desc& v, const Desc& out, const Desc& lse,
             const Desc& dq, const Desc& dk, const Desc& dv, const py::kwargs& kw) {
        const TensorView tq = view_of_desc(q, "q"), tk = view_of_desc(k, "k"), tv = view_of_desc(v, "v");
        const TensorView tdout = view_of_desc(dout, "dout"), tout = view_of_desc(out, "out");
        const TensorView tlse = view_of_desc(lse, "lse"), tdq = view_of_desc(dq, "dq");
        const TensorView tdk = view_of_desc(dk, "dk"), tdv = view_of_desc(dv, "dv");
        const AttentionParams p = make(kw, tq, tk);
        const Device on = call_device(tq);
        const auto dev = make_gpu_device(on.index);
        py::gil_scoped_release release;
        entry::attention_backward_on(*dev, on, tdout, tq, tk, tv, tout, tlse, tdq, tdk, tdv, p);
      },
      py::arg("dout"), py::arg("q"), py::arg("k"), py::arg("v"), py::arg("out"), py::arg("lse"),
      py::arg("dq"), py::arg("dk"), py::arg("dv"),
      "attention_backward on CUDA memory (operands as attention_forward_device's). Returns when "
      "dq, dk, dv are written. Not collective. Releases the GIL.");
}

}  // namespace burst::python
