// python/module_common.h — declarations shared by the two translation units of `burst._C`.
#pragma once

#include <pybind11/pybind11.h>

#include "burst/tensor.h"

namespace burst::python {

/// View of a Python buffer (numpy array) as a TensorView: strides converted from bytes to
/// elements, format "f" → F32, "d" → F64 (the library rejects F64 with Unsupported).
/// Throws: Error(InvalidArgument) for other formats, ndim outside 1..4, or strides that are not
/// a multiple of the item size; request(writable) raises BufferError for read-only outputs.
TensorView view_of(const pybind11::buffer& buffer, const char* name, bool writable);

/// Single-process bindings (burst_module.cc) and distributed ones (dist_module.cc).
void bind_local(pybind11::module_& m);
void bind_dist(pybind11::module_& m);

}  // namespace burst::python
