// python/burst_module.cc — the `burst._C` extension: buffer conversion and error translation only.
//
// Owns: turning Python buffers (numpy arrays; torch tensors arrive as numpy views of the same
// memory, made by the pure-Python layer) into burst::TensorView, Python mask descriptions into
// burst::Mask, and burst::Error into Python exceptions (InvalidArgument → ValueError,
// Unsupported → NotImplementedError, Communication / Internal → RuntimeError). Every call that
// computes or communicates releases the GIL. No algorithm lives here: shapes, masks and
// strategies are validated and executed by the C++ library; the distributed bindings are in
// dist_module.cc.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "burst/attention.h"
#include "burst/error.h"
#include "burst/mask.h"
#include "burst/tensor.h"
#include "burst/version.h"
#include "module_common.h"

namespace py = pybind11;

namespace burst::python {

TensorView view_of(const py::buffer& buffer, const char* name, bool writable) {
  py::buffer_info info = buffer.request(writable);
  BURST_CHECK(info.ndim >= 1 && info.ndim <= 4, InvalidArgument, name, ": expected 1 to 4 dims, got ",
              info.ndim);
  TensorView view;
  if (info.format == py::format_descriptor<float>::format()) {
    view.dtype = DType::F32;
  } else if (info.format == py::format_descriptor<double>::format()) {
    view.dtype = DType::F64;
  } else if (info.format == "e") {
    view.dtype = DType::F16;
  } else if (info.format == py::format_descriptor<std::uint16_t>::format()) {
    view.dtype = DType::BF16;  // numpy has no bfloat16: its bit patterns arrive as uint16
  } else {
    BURST_FAIL(InvalidArgument, name,
               ": expected a float32, float16 or (bfloat16 bits as) uint16 array, got buffer", " format '",
               info.format, "' (itemsize ", info.itemsize, ")");
  }
  view.data = info.ptr;
  view.ndim = static_cast<int>(info.ndim);
  for (std::size_t d = 0; d < static_cast<std::size_t>(info.ndim); ++d) {
    BURST_CHECK(info.strides[d] % info.itemsize == 0, InvalidArgument, name, ": stride ", info.strides[d],
                " bytes of dim ", d, " is not a multiple of the item size ", info.itemsize);
    view.shape[d] = info.shape[d];
    view.stride[d] = info.strides[d] / info.itemsize;
  }
  return view;
}

ForwardViews forward_views(const py::buffer& q, const py::buffer& k, const py::buffer& v,
                           const py::buffer& out, const py::buffer& lse) {
  return {view_of(q, "q", false), view_of(k, "k", false), view_of(v, "v", false), view_of(out, "out", true),
          view_of(lse, "lse", true)};
}

BackwardViews backward_views(const py::buffer& dout, const py::buffer& q, const py::buffer& k,
                             const py::buffer& v, const py::buffer& out, const py::buffer& lse,
                             const py::buffer& dq, const py::buffer& dk, const py::buffer& dv) {
  return {view_of(dout, "dout", false), view_of(q, "q", false),     view_of(k, "k", false),
          view_of(v, "v", false),       view_of(out, "out", false), view_of(lse, "lse", false),
          view_of(dq, "dq", true),      view_of(dk, "dk", true),    view_of(dv, "dv", true)};
}

namespace {

SliceKind kind_from_string(const std::string& name) {
  if (name == "full") return SliceKind::Full;
  if (name == "causal") return SliceKind::Causal;
  if (name == "inv_causal") return SliceKind::InvCausal;
  if (name == "bi_causal") return SliceKind::BiCausal;
  BURST_FAIL(InvalidArgument, "slice kind '", name, "' is not one of full, causal, inv_causal, bi_causal");
}

const char* kind_name(SliceKind kind) {
  switch (kind) {
    case SliceKind::Full: return "full";
    case SliceKind::Causal: return "causal";
    case SliceKind::InvCausal: return "inv_causal";
    case SliceKind::BiCausal: return "bi_causal";
  }
  return "?";
}

using SliceTuple = std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::string,
                              std::int64_t, std::int64_t>;

Mask mask_from_python(bool causal, std::int64_t window_left, std::int64_t window_right,
                      const std::vector<SliceTuple>& slices) {
  Mask mask;
  mask.causal = causal;
  mask.window_left = window_left;
  mask.window_right = window_right;
  for (const auto& [qb, qe, kb, ke, kind, wl, wr] : slices) {
    mask.slices.push_back(MaskSlice{qb, qe, kb, ke, kind_from_string(kind), wl, wr});
  }
  return mask;
}

std::vector<SliceTuple> slices_to_python(const Mask& mask) {
  std::vector<SliceTuple> out;
  for (const auto& s : mask.slices) {
    out.emplace_back(s.q_begin, s.q_end, s.k_begin, s.k_end, kind_name(s.kind), s.window_left,
                     s.window_right);
  }
  return out;
}

KernelImpl impl_from_string(const std::string& name) {
  if (name == "tiled") return KernelImpl::Tiled;
  if (name == "reference") return KernelImpl::Reference;
  BURST_FAIL(InvalidArgument, "impl '", name, "' is not one of tiled, reference");
}

using Positions = std::optional<py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>>;

// The keyword arguments shared by attention_forward and attention_backward.
struct ParamArgs {
  const Mask* mask;
  std::optional<float> softmax_scale;
  std::int64_t q_offset, kv_offset;
  Positions q_positions, kv_positions;
  std::int64_t seq_q_global, seq_kv_global;
  std::vector<std::int32_t> cu_seqlens_q, cu_seqlens_kv;
  bool deterministic;  // flash_attn's keyword, accepted: burst's results never depend on threads
  int num_threads;
  std::string impl;
};

AttentionParams make_params(const ParamArgs& a, std::int64_t S_q, std::int64_t S_kv) {
  AttentionParams p;
  p.softmax_scale = a.softmax_scale;
  p.mask = *a.mask;
  p.q_offset = a.q_offset;
  p.kv_offset = a.kv_offset;
  if (a.q_positions) {
    BURST_CHECK(a.q_positions->ndim() == 1 && a.q_positions->shape(0) == S_q, InvalidArgument,
                "q_positions: expected shape [", S_q, "], got ndim ", a.q_positions->ndim(), " size ",
                a.q_positions->size());
    p.q_positions = a.q_positions->data();
  }
  if (a.kv_positions) {
    BURST_CHECK(a.kv_positions->ndim() == 1 && a.kv_positions->shape(0) == S_kv, InvalidArgument,
                "kv_positions: expected shape [", S_kv, "], got ndim ", a.kv_positions->ndim(), " size ",
                a.kv_positions->size());
    p.kv_positions = a.kv_positions->data();
  }
  p.seq_q_global = a.seq_q_global;
  p.seq_kv_global = a.seq_kv_global;
  p.cu_seqlens_q = a.cu_seqlens_q;
  p.cu_seqlens_kv = a.cu_seqlens_kv;
  p.num_threads = a.num_threads;
  p.impl = impl_from_string(a.impl);
  return p;
}

// Sequence length of a BSHD (4-d) or THD (3-d) view; 0 for other ranks (the library rejects them).
std::int64_t seq_len(const TensorView& t) { return t.ndim == 4 ? t.size(1) : t.ndim == 3 ? t.size(0) : 0; }

// The GPU path's keywords (gpu_module.cc): attention_forward's, by name, with its defaults.
AttentionParams params_from_kwargs(const py::kwargs& kw, const TensorView& q, const TensorView& k) {
  static constexpr const char* known[] = {"mask",         "softmax_scale", "q_offset",      "kv_offset",
                                          "q_positions",  "kv_positions",  "seq_q_global",  "seq_kv_global",
                                          "cu_seqlens_q", "cu_seqlens_kv", "deterministic", "num_threads",
                                          "impl"};
  for (const auto& item : kw) {
    const auto key = py::cast<std::string>(item.first);
    BURST_CHECK(std::find(std::begin(known), std::end(known), key) != std::end(known), InvalidArgument,
                "attention on the GPU path: unknown keyword '", key, "'");
  }
  BURST_CHECK(kw.contains("mask"), InvalidArgument,
              "attention on the GPU path: the mask keyword is required");
  auto get = [&](const char* key, auto fallback) {
    return kw.contains(key) && !kw[key].is_none() ? py::cast<decltype(fallback)>(kw[key]) : fallback;
  };
  const Mask& mask = py::cast<const Mask&>(kw["mask"]);
  const std::optional<float> scale = kw.contains("softmax_scale") && !kw["softmax_scale"].is_none()
                                         ? std::optional<float>(py::cast<float>(kw["softmax_scale"]))
                                         : std::nullopt;
  Positions qp, kvp;
  if (kw.contains("q_positions") && !kw["q_positions"].is_none()) qp = py::cast<Positions>(kw["q_positions"]);
  if (kw.contains("kv_positions") && !kw["kv_positions"].is_none())
    kvp = py::cast<Positions>(kw["kv_positions"]);
  const ParamArgs a{&mask,
                    scale,
                    get("q_offset", std::int64_t{0}),
                    get("kv_offset", std::int64_t{0}),
                    std::move(qp),
                    std::move(kvp),
                    get("seq_q_global", std::int64_t{-1}),
                    get("seq_kv_global", std::int64_t{-1}),
                    get("cu_seqlens_q", std::vector<std::int32_t>{}),
                    get("cu_seqlens_kv", std::vector<std::int32_t>{}),
                    get("deterministic", true),
                    get("num_threads", 0),
                    get("impl", std::string("tiled"))};
  return make_params(a, seq_len(q), seq_len(k));
}

void forward(const py::buffer& q, const py::buffer& k, const py::buffer& v, const py::buffer& out,
             const py::buffer& lse, const ParamArgs& args) {
  const ForwardViews t = forward_views(q, k, v, out, lse);
  const AttentionParams p = make_params(args, seq_len(t.q), seq_len(t.k));
  py::gil_scoped_release release;
  attention_forward(t.q, t.k, t.v, t.out, t.lse, p);
}

void backward(const py::buffer& dout, const py::buffer& q, const py::buffer& k, const py::buffer& v,
              const py::buffer& out, const py::buffer& lse, const py::buffer& dq, const py::buffer& dk,
              const py::buffer& dv, const ParamArgs& args) {
  const BackwardViews t = backward_views(dout, q, k, v, out, lse, dq, dk, dv);
  const AttentionParams p = make_params(args, seq_len(t.q), seq_len(t.k));
  py::gil_scoped_release release;
  attention_backward(t.dout, t.q, t.k, t.v, t.out, t.lse, t.dq, t.dk, t.dv, p);
}

// pybind11 keyword list shared by forward and backward, after the tensors.
#define BURST_PARAM_KWARGS                                                                                   \
  py::arg("mask"), py::arg("softmax_scale") = py::none(), py::arg("q_offset") = 0, py::arg("kv_offset") = 0, \
                   py::arg("q_positions") = py::none(), py::arg("kv_positions") = py::none(),                \
                   py::arg("seq_q_global") = -1, py::arg("seq_kv_global") = -1,                              \
                   py::arg("cu_seqlens_q") = std::vector<std::int32_t>{},                                    \
                   py::arg("cu_seqlens_kv") = std::vector<std::int32_t>{}, py::arg("deterministic") = true,  \
                   py::arg("num_threads") = 0, py::arg("impl") = "tiled"

}  // namespace

void bind_local(py::module_& m) {
  py::class_<Mask>(m, "Mask",
                   "A mask on global positions (burst/mask.h): flash_attn shorthands or a union of "
                   "slices (q_begin, q_end, k_begin, k_end, kind, window_left, window_right).")
      .def(py::init(&mask_from_python), py::arg("causal") = false, py::arg("window_left") = -1,
           py::arg("window_right") = -1, py::arg("slices") = std::vector<SliceTuple>{})
      .def_static(
          "benchmark",
          [](const std::string& name, std::int64_t S_global, std::uint64_t seed, std::int64_t num_documents,
             std::int64_t window, std::int64_t global_tokens, std::int64_t block, double density,
             double prefix_fraction) {
            BenchmarkMaskConfig cfg;
            cfg.seed = seed;
            cfg.num_documents = num_documents;
            cfg.window = window;
            cfg.global_tokens = global_tokens;
            cfg.block = block;
            cfg.density = density;
            cfg.prefix_fraction = prefix_fraction;
            return make_benchmark_mask(mask_type_from_string(name), S_global, cfg);
          },
          py::arg("name"), py::arg("S_global"), py::arg("seed") = 0, py::arg("num_documents") = 8,
          py::arg("window") = 0, py::arg("global_tokens") = 0, py::arg("block") = 64,
          py::arg("density") = 0.25, py::arg("prefix_fraction") = 0.25)
      .def_static("document", &Mask::document, py::arg("cu_seqlens"), py::arg("causal"))
      .def_readonly("causal", &Mask::causal)
      .def_readonly("window_left", &Mask::window_left)
      .def_readonly("window_right", &Mask::window_right)
      .def_property_readonly("slices", &slices_to_python)
      .def("fingerprint", &Mask::fingerprint)
      .def("describe", &Mask::describe)
      .def("__repr__", [](const Mask& mask) { return "burst.Mask(" + mask.describe() + ")"; });

  m.def("release_kernel_workspace", &release_kernel_workspace,
        "Free the calling thread's kernel workspace (kept between calls for speed). Not collective.");
  m.def(
      "check_host",
      [](const std::string& api, const std::vector<std::pair<std::string, std::string>>& operands) {
        for (const auto& [name, device] : operands) {
          TensorView where;  // only its device is read; non-null data marks the operand as given
          try {
            where.device = parse_device(device);
          } catch (const Error& e) { BURST_FAIL(InvalidArgument, api, ": ", name, ": ", e.message()); }
          where.data = &where;
          check_device(api.c_str(), kHost, name.c_str(), where);
        }
      },
      py::arg("api"), py::arg("operands"),
      "Raises ValueError naming the first (name, device) of operands, the device as torch spells it "
      "(\"cpu\", \"cuda:1\"), that is not host memory: burst::check_device's error. Not collective.");
  m.def(
      "check_device",
      [](const std::string& api, const std::string& runs_on,
         const std::vector<std::pair<std::string, std::string>>& operands) {
        const Device on = parse_device(runs_on);
        for (const auto& [name, device] : operands) {
          TensorView where;  // as check_host, against `runs_on`
          try {
            where.device = parse_device(device);
          } catch (const Error& e) { BURST_FAIL(InvalidArgument, api, ": ", name, ": ", e.message()); }
          where.data = &where;
          check_device(api.c_str(), on, name.c_str(), where);
        }
      },
      py::arg("api"), py::arg("runs_on"), py::arg("operands"),
      "As check_host, for a call that runs on `runs_on` (\"cpu\", \"cuda:N\"). Not collective.");
  m.def("mask_names", [] {
    std::vector<std::string> names;
    for (MaskType t : all_mask_types()) names.emplace_back(to_string(t));
    return names;
  });
  m.def(
      "visible",
      [](const Mask& mask, std::int64_t S_q, std::int64_t S_kv) {
        const ResolvedMask resolved(mask, S_q, S_kv);
        py::array_t<bool> out({S_q, S_kv});
        auto acc = out.mutable_unchecked<2>();
        for (std::int64_t i = 0; i < S_q; ++i)
          for (std::int64_t j = 0; j < S_kv; ++j) acc(i, j) = resolved.visible(i, j);
        return out;
      },
      py::arg("mask"), py::arg("S_q"), py::arg("S_kv"),
      "Dense boolean [S_q, S_kv] visibility of a mask resolved at these global lengths (for tests "
      "and references; O(S_q·S_kv) memory).");

  m.def(
      "attention_forward",
      [](const py::buffer& q, const py::buffer& k, const py::buffer& v, const py::buffer& out,
         const py::buffer& lse, const Mask& mask, std::optional<float> softmax_scale, std::int64_t q_offset,
         std::int64_t kv_offset, Positions q_positions, Positions kv_positions, std::int64_t seq_q_global,
         std::int64_t seq_kv_global, std::vector<std::int32_t> cu_q, std::vector<std::int32_t> cu_kv,
         bool deterministic, int num_threads, const std::string& impl) {
        forward(q, k, v, out, lse,
                ParamArgs{&mask, softmax_scale, q_offset, kv_offset, std::move(q_positions),
                          std::move(kv_positions), seq_q_global, seq_kv_global, std::move(cu_q),
                          std::move(cu_kv), deterministic, num_threads, impl});
      },
      py::arg("q"), py::arg("k"), py::arg("v"), py::arg("out"), py::arg("lse"), BURST_PARAM_KWARGS,
      "burst::attention_forward into preallocated out [B,S_q,H,D] and lse [B,H,S_q] (varlen: "
      "[T,H,D], [H,T]). Not collective. Releases the GIL.");
  m.def(
      "attention_backward",
      [](const py::buffer& dout, const py::buffer& q, const py::buffer& k, const py::buffer& v,
         const py::buffer& out, const py::buffer& lse, const py::buffer& dq, const py::buffer& dk,
         const py::buffer& dv, const Mask& mask, std::optional<float> softmax_scale, std::int64_t q_offset,
         std::int64_t kv_offset, Positions q_positions, Positions kv_positions, std::int64_t seq_q_global,
         std::int64_t seq_kv_global, std::vector<std::int32_t> cu_q, std::vector<std::int32_t> cu_kv,
         bool deterministic, int num_threads, const std::string& impl) {
        backward(dout, q, k, v, out, lse, dq, dk, dv,
                 ParamArgs{&mask, softmax_scale, q_offset, kv_offset, std::move(q_positions),
                           std::move(kv_positions), seq_q_global, seq_kv_global, std::move(cu_q),
                           std::move(cu_kv), deterministic, num_threads, impl});
      },
      py::arg("dout"), py::arg("q"), py::arg("k"), py::arg("v"), py::arg("out"), py::arg("lse"),
      py::arg("dq"), py::arg("dk"), py::arg("dv"), BURST_PARAM_KWARGS,
      "burst::attention_backward into preallocated dq, dk, dv (overwritten). Not collective. "
      "Releases the GIL.");
}

}  // namespace burst::python

PYBIND11_MODULE(_C, m) {
  m.doc() = "burst C++ core (conversion and error translation only; use the `burst` package).";
  m.attr("__version__") = BURST_VERSION_STRING;  // project(burst VERSION ...) in CMakeLists.txt
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const burst::Error& e) {
      switch (e.kind()) {
        case burst::ErrorKind::InvalidArgument: PyErr_SetString(PyExc_ValueError, e.what()); return;
        case burst::ErrorKind::Unsupported: PyErr_SetString(PyExc_NotImplementedError, e.what()); return;
        case burst::ErrorKind::Communication:
        case burst::ErrorKind::Internal: PyErr_SetString(PyExc_RuntimeError, e.what()); return;
      }
      PyErr_SetString(PyExc_RuntimeError, e.what());
    }
  });
  burst::python::bind_local(m);
  burst::python::bind_dist(m);
  burst::python::bind_kvcache(m);
  burst::python::bind_transport(m);
  burst::python::bind_gpu(m, burst::python::params_from_kwargs);
}
