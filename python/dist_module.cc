// python/dist_module.cc — `burst._C` bindings of the distributed layer: DistAttention, layouts.
//
// Conversion only: an mpi4py communicator arrives as its Fortran handle (comm.py2f()) and becomes a
// burst::Communicator (an MPI_Comm_dup, freed with the object); strings become DistConfig enums;
// buffers become TensorViews, and torch CUDA tensors (device "cuda:N": the plan's passes on that
// GPU, DistAttention::OnDevice) arrive as (data_ptr, shape, strides, dtype, device). Collective calls release
// the GIL so other Python threads run while this rank waits on its peers.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "burst/comm.h"
#include "burst/error.h"
#include "burst/plan.h"
#include "burst/strategy.h"
#include "device/device.h"
#include "module_common.h"
#include "strategy_device.h"

namespace py = pybind11;

namespace burst::python {
namespace {

BackwardSide side_from_string(const std::string& name) {
  if (name == "auto") return BackwardSide::Auto;
  if (name == "query") return BackwardSide::QuerySide;
  if (name == "kv") return BackwardSide::KvSide;
  BURST_FAIL(InvalidArgument, "backward_side '", name, "' is not one of auto, query, kv");
}

py::array_t<std::int64_t> to_array(const std::vector<std::int64_t>& v) {
  py::array_t<std::int64_t> a(static_cast<py::ssize_t>(v.size()));
  std::copy(v.begin(), v.end(), a.mutable_data());
  return a;
}

Communicator communicator_from(std::int64_t fortran_handle, double timeout) {
  py::gil_scoped_release release;
  return Communicator::from_fortran(fortran_handle, timeout);
}

// Owns the communicator next to the plan that uses it (declared first, destroyed last). On a
// GPU (device "cuda:N"), the passes take its memory (src/strategy_device.h).
struct PyDist {
  Communicator comm;
  Device device;
  DistAttention dist;

  PyDist(Communicator c, const DistConfig& cfg, const ProblemShape& shape, const Mask& mask, Device on)
      : comm(std::move(c)), device(on), dist(make(comm, cfg, shape, mask, on)) {}

  static DistAttention make(const Communicator& c, const DistConfig& cfg, const ProblemShape& shape,
                            const Mask& mask, Device on) {
    if (on.kind == DeviceKind::Host) {
      py::gil_scoped_release release;
      return DistAttention(c, cfg, shape, mask);
    }
    const DistAttention::OnDevice gpu{std::shared_ptr<const device::Device>(make_gpu_device(on.index)), on};
    py::gil_scoped_release release;
    return DistAttention(c, cfg, shape, mask, gpu);
  }
};

}  // namespace

Communicator communicator_of(const py::object& comm, double timeout) {
  if (py::isinstance<Communicator>(comm)) return comm.cast<Communicator>();
  return communicator_from(comm.cast<std::int64_t>(), timeout);
}

void bind_dist(py::module_& m) {
  py::class_<Communicator>(m, "Communicator",
                           "burst::Communicator: an MPI_Comm_idup (under the watchdog) of the mpi4py "
                           "communicator given by its Fortran handle. The Python module's own collectives "
                           "(agreement, plan-cache lookup, unshard) run on it, watched.")
      .def(py::init(&communicator_from), py::arg("fortran_handle"), py::arg("comm_timeout") = 300.0,
           "Collective over the communicator. comm_timeout: the watchdog's seconds (0: wait forever).")
      .def_property_readonly("rank", &Communicator::rank)
      .def_property_readonly("size", &Communicator::size)
      .def("set_timeout", &Communicator::set_timeout, py::arg("seconds"), "Not collective.")
      .def_property_readonly("timeout", &Communicator::timeout)
      .def("set_activity", &Communicator::set_activity, py::arg("activity"),
           "What the ranks do, for the watchdog's message. Not collective.")
      .def(
          "exchange",
          [](const Communicator& c, const std::vector<std::int64_t>& values, const std::string& what) {
            py::gil_scoped_release release;
            return c.exchange(values, what);
          },
          py::arg("values"), py::arg("what"),
          "Every rank's values (at most 6 int64), rank-major. Collective; a timeout names the absent ranks.")
      .def(
          "all_gather_bytes",
          [](const Communicator& c, const py::bytes& mine, const std::string& what) {
            std::string in = mine;
            std::vector<std::string> all;
            {
              py::gil_scoped_release release;
              all = c.all_gather_bytes(in, what);
            }
            py::list out;
            for (const auto& s : all) out.append(py::bytes(s));
            return out;
          },
          py::arg("mine"), py::arg("what"), "Every rank's bytes, in rank order. Collective.");
  m.def("all_strategies", [] {
    std::vector<std::string> names;
    for (StrategyKind s : all_strategies()) names.emplace_back(to_string(s));
    return names;
  });
  m.def(
      "make_layout",
      [](const std::string& kind, int P, std::int64_t S_global, const Mask& mask) {
        const SequenceLayout layout = make_layout(layout_from_string(kind), P, S_global, mask);
        std::vector<py::array_t<std::int64_t>> out;
        for (const auto& pos : layout.positions) out.push_back(to_array(pos));
        return out;
      },
      py::arg("kind"), py::arg("P"), py::arg("S_global"), py::arg("mask") = Mask{},
      "Global positions held by each of P ranks under a layout (burst::make_layout). Pure.");
  m.def(
      "padded_length",
      [](const std::string& kind, int P, std::int64_t S_global) {
        return padded_length(layout_from_string(kind), P, S_global);
      },
      py::arg("kind"), py::arg("P"), py::arg("S_global"),
      "Smallest length >= S_global the layout splits over P ranks (burst::padded_length). Pure.");
  m.def("mask_without_padding", &mask_without_padding, py::arg("mask"), py::arg("S_global"),
        "The mask confined to the real tokens [0, S_global) (burst::mask_without_padding). Pure.");

  py::class_<PyDist>(m, "DistAttention",
                     "burst::DistAttention bound to an MPI communicator given by its Fortran handle. "
                     "Construction and passes are collective over that communicator.")
      .def(
          py::init([](const py::object& fortran_handle, const std::string& strategy,
                      const std::string& layout, std::int64_t B, std::int64_t S_global, std::int64_t H,
                      std::int64_t H_kv, std::int64_t D, const Mask& mask, std::optional<float> softmax_scale,
                      const std::string& backward_side, int ulysses_degree, int ranks_per_node,
                      bool double_ring, bool overlap, int num_threads, const std::string& impl,
                      const std::string& dtype, bool pad, std::vector<std::vector<std::int64_t>> positions,
                      const std::string& usp_ring, bool mask_aware, double comm_timeout,
                      const std::string& partials_dtype, const std::string& device) {
            // The names are parsed under an agreed verdict: a name bad on one rank only raises
            // the same error on every rank instead of leaving the others in the set-up.
            const bool timeout_ok = std::isfinite(comm_timeout) && comm_timeout >= 0;
            Communicator comm = communicator_of(fortran_handle, timeout_ok ? comm_timeout : 300.0);
            DistConfig cfg;
            ProblemShape shape{B, S_global, H, H_kv, D};
            Device on = kHost;
            {
              py::gil_scoped_release release;
              comm.agree_on([&] {
                cfg.strategy = strategy_from_string(strategy);
                cfg.layout = layout_from_string(layout);
                cfg.backward_side = side_from_string(backward_side);
                cfg.usp_ring = usp_ring_from_string(usp_ring);
                cfg.partials_dtype = parse_dtype(partials_dtype);
                BURST_CHECK(impl == "tiled" || impl == "reference", InvalidArgument, "impl '", impl,
                            "' is not one of tiled, reference");
                shape.dtype = parse_dtype(dtype);
                on = parse_device(device);  // the kind agreed by the caller; the index is this rank's
              });
            }
            cfg.ulysses_degree = ulysses_degree;
            cfg.ranks_per_node = ranks_per_node;
            cfg.double_ring = double_ring;
            cfg.overlap = overlap;
            cfg.mask_aware = mask_aware;
            cfg.num_threads = num_threads;
            cfg.softmax_scale = softmax_scale;
            cfg.kernel = impl == "tiled" ? KernelImpl::Tiled : KernelImpl::Reference;
            cfg.pad = pad;
            cfg.positions = std::move(positions);
            cfg.comm_timeout_seconds = comm_timeout;
            return std::make_unique<PyDist>(std::move(comm), cfg, shape, mask, on);
          }),
          py::arg("fortran_handle"), py::arg("strategy"), py::arg("layout"), py::arg("B"),
          py::arg("S_global"), py::arg("H"), py::arg("H_kv"), py::arg("D"), py::arg("mask"),
          py::arg("softmax_scale") = py::none(), py::arg("backward_side") = "auto",
          py::arg("ulysses_degree") = 0, py::arg("ranks_per_node") = 0, py::arg("double_ring") = true,
          py::arg("overlap") = true, py::arg("num_threads") = 0, py::arg("impl") = "tiled",
          py::arg("dtype") = "fp32", py::arg("pad") = false,
          py::arg("positions") = std::vector<std::vector<std::int64_t>>{}, py::arg("usp_ring") = "ring",
          py::arg("mask_aware") = true, py::arg("comm_timeout") = 300.0, py::arg("partials_dtype") = "fp32",
          py::arg("device") = "cpu")
      .def_property_readonly("rank", [](const PyDist& d) { return d.comm.rank(); })
      .def_property_readonly("size", [](const PyDist& d) { return d.comm.size(); })
      .def_property_readonly("positions", [](const PyDist& d) { return to_array(d.dist.positions()); })
      .def_property_readonly("local_length", [](const PyDist& d) { return d.dist.local_length(); })
      .def(
          "forward",
          [](PyDist& d, const py::buffer& q, const py::buffer& k, const py::buffer& v, const py::buffer& out,
             const py::buffer& lse) {
            const ForwardViews t = forward_views(q, k, v, out, lse);
            py::gil_scoped_release release;
            d.dist.forward(t.q, t.k, t.v, t.out, t.lse);
          },
          py::arg("q"), py::arg("k"), py::arg("v"), py::arg("out"), py::arg("lse"))
      .def(
          "backward",
          [](PyDist& d, const py::buffer& dout, const py::buffer& q, const py::buffer& k, const py::buffer& v,
             const py::buffer& out, const py::buffer& lse, const py::buffer& dq, const py::buffer& dk,
             const py::buffer& dv) {
            const BackwardViews t = backward_views(dout, q, k, v, out, lse, dq, dk, dv);
            py::gil_scoped_release release;
            d.dist.backward(t.dout, t.q, t.k, t.v, t.out, t.lse, t.dq, t.dk, t.dv);
          },
          py::arg("dout"), py::arg("q"), py::arg("k"), py::arg("v"), py::arg("out"), py::arg("lse"),
          py::arg("dq"), py::arg("dk"), py::arg("dv"))
      .def(
          "forward_device",
          [](PyDist& d, const Desc& q, const Desc& k, const Desc& v, const Desc& out, const Desc& lse) {
            const TensorView tq = view_of_desc(q, "q"), tk = view_of_desc(k, "k"), tv = view_of_desc(v, "v");
            const TensorView tout = view_of_desc(out, "out"), tlse = view_of_desc(lse, "lse");
            py::gil_scoped_release release;
            d.dist.forward(tq, tk, tv, tout, tlse);
          },
          py::arg("q"), py::arg("k"), py::arg("v"), py::arg("out"), py::arg("lse"),
          "forward on the plan's GPU: operands as (data_ptr, shape, strides, dtype, device). "
          "Collective. Returns when out and lse are written.")
      .def(
          "backward_device",
          [](PyDist& d, const Desc& dout, const Desc& q, const Desc& k, const Desc& v, const Desc& out,
             const Desc& lse, const Desc& dq, const Desc& dk, const Desc& dv) {
            const TensorView tq = view_of_desc(q, "q"), tk = view_of_desc(k, "k"), tv = view_of_desc(v, "v");
            const TensorView tdout = view_of_desc(dout, "dout"), tout = view_of_desc(out, "out");
            const TensorView tlse = view_of_desc(lse, "lse"), tdq = view_of_desc(dq, "dq");
            const TensorView tdk = view_of_desc(dk, "dk"), tdv = view_of_desc(dv, "dv");
            py::gil_scoped_release release;
            d.dist.backward(tdout, tq, tk, tv, tout, tlse, tdq, tdk, tdv);
          },
          py::arg("dout"), py::arg("q"), py::arg("k"), py::arg("v"), py::arg("out"), py::arg("lse"),
          py::arg("dq"), py::arg("dk"), py::arg("dv"),
          "backward on the plan's GPU (operands as forward_device's). Collective. Returns when dq, dk, "
          "dv are written.")
      .def("last_stats", [](const PyDist& d) {
        const DistStats& s = d.dist.last_stats();
        py::dict out;
        out["bytes_sent"] = s.bytes_sent;
        out["bytes_sent_inter_node"] = s.bytes_sent_inter_node;
        out["messages_sent"] = s.messages_sent;
        out["seconds"] = s.seconds;
        out["compute_seconds"] = s.compute_seconds;
        out["exposed_comm_seconds"] = s.exposed_comm_seconds;
        out["visible_pairs"] = s.visible_pairs;
        out["peak_buffer_bytes"] = s.peak_buffer_bytes;
        out["backward_side"] = s.backward_side;
        return out;
      });
}

}  // namespace burst::python
