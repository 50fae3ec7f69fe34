// python/module_common.h — declarations shared by the two translation units of `burst._C`.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "burst/attention.h"
#include "burst/comm.h"
#include "burst/tensor.h"

namespace burst::device {
class Device;
}

namespace burst::python {

/// View of a Python buffer (numpy array) as a TensorView: strides converted from bytes to
/// elements, format "f" → F32, "e" → F16, "H" (uint16: bfloat16 bit patterns, which numpy cannot
/// name) → BF16, "d" → F64 (the library rejects F64 with Unsupported).
/// Throws: Error(InvalidArgument) for other formats, ndim outside 1..4, or strides that are not
/// a multiple of the item size; request(writable) raises BufferError for read-only outputs.
TensorView view_of(const pybind11::buffer& buffer, const char* name, bool writable);

/// The operands of a forward pass: q, k, v read-only; out, lse writable.
struct ForwardViews {
  TensorView q, k, v, out, lse;
};
ForwardViews forward_views(const pybind11::buffer& q, const pybind11::buffer& k, const pybind11::buffer& v,
                           const pybind11::buffer& out, const pybind11::buffer& lse);

/// The operands of a backward pass: dout, q, k, v, out, lse read-only; dq, dk, dv writable.
struct BackwardViews {
  TensorView dout, q, k, v, out, lse, dq, dk, dv;
};
BackwardViews backward_views(const pybind11::buffer& dout, const pybind11::buffer& q,
                             const pybind11::buffer& k, const pybind11::buffer& v,
                             const pybind11::buffer& out, const pybind11::buffer& lse,
                             const pybind11::buffer& dq, const pybind11::buffer& dk,
                             const pybind11::buffer& dv);

/// The communicator a plan or cache is built over: an existing _C.Communicator (shared, no new
/// dup; e.g. over a torch.distributed group), or an mpi4py Fortran handle (MPI_Comm_idup'd under
/// the watchdog with `timeout` seconds). Collective in the second case.
Communicator communicator_of(const pybind11::object& comm, double timeout);

/// Single-process bindings (burst_module.cc), distributed ones (dist_module.cc), the KV cache
/// (kvcache_module.cc).
void bind_local(pybind11::module_& m);
void bind_dist(pybind11::module_& m);
void bind_kvcache(pybind11::module_& m);
void bind_transport(pybind11::module_& m);  // torch_transport.cc

/// The attention parameters of a call's keywords (attention_forward's, burst_module.cc) for
/// operands q, k: what the GPU path (gpu_module.cc) shares with the host path.
using GpuParams =
    std::function<AttentionParams(const pybind11::kwargs&, const TensorView& q, const TensorView& k)>;
void bind_gpu(pybind11::module_& m, const GpuParams& params);  // gpu_module.cc

/// A device tensor handed over by Python: (data_ptr, shape, strides in elements, dtype "fp32" |
/// "bf16" | "fp16", device "cuda:N") — torch's data_ptr(), shape, stride(), no copy.
using Desc = std::tuple<std::uintptr_t, std::vector<std::int64_t>, std::vector<std::int64_t>, std::string,
                        std::string>;
/// The view of a Desc (marked with its device). Throws: Error(InvalidArgument) naming `name` for
/// a bad rank, dtype or device (gpu_module.cc).
TensorView view_of_desc(const Desc& d, const char* name);

/// True in a CUDA build of the module (gpu_cuda.cc; false: gpu_none.cc).
bool gpu_built();
/// The device seam on CUDA GPU `index` (a device::CudaDevice; a stream of its own).
/// Throws: Error(Unsupported) naming the build without CUDA, or the runtime's reason when the
/// GPU is not usable (no driver, no such device).
std::unique_ptr<const device::Device> make_gpu_device(int index);

}  // namespace burst::python
