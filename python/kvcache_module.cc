// python/kvcache_module.cc — `burst._C.DistKVCache`: the sharded KV cache and distributed decode.
//
// Conversion only: the communicator arrives as its Fortran handle, the policy and kernel as
// strings, buffers as TensorViews. Collective calls release the GIL.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <vector>

#include "burst/comm.h"
#include "burst/error.h"
#include "burst/kv_cache.h"
#include "module_common.h"

namespace py = pybind11;

namespace burst::python {
namespace {

// Owns the communicator dup next to the cache that uses it (declared first, destroyed last).
struct PyCache {
  Communicator comm;
  DistKVCache cache;

  PyCache(const py::object& comm_or_handle, double comm_timeout, const KVCacheConfig& cfg)
      : comm(communicator_of(comm_or_handle, comm_timeout)), cache(make(comm, cfg)) {}
  static DistKVCache make(const Communicator& c, const KVCacheConfig& cfg) {
    py::gil_scoped_release release;
    return DistKVCache(c, cfg);
  }
};

py::array_t<std::int64_t> to_array(const std::vector<std::int64_t>& v) {
  py::array_t<std::int64_t> a(static_cast<py::ssize_t>(v.size()));
  std::copy(v.begin(), v.end(), a.mutable_data());
  return a;
}

}  // namespace

void bind_kvcache(py::module_& m) {
  py::class_<PyCache>(m, "DistKVCache",
                      "burst::DistKVCache over an MPI communicator given by its Fortran handle (or a "
                      "_C.Communicator, e.g. over a torch.distributed group). Every "
                      "method except the queries is collective with identical arguments.")
      .def(py::init([](const py::object& handle, std::int64_t H, std::int64_t H_kv, std::int64_t D,
                       std::int64_t capacity_per_rank, std::int64_t chunk_tokens, const std::string& policy,
                       std::optional<float> softmax_scale, int num_threads, const std::string& impl,
                       double comm_timeout) {
             KVCacheConfig cfg;
             cfg.H = H;
             cfg.H_kv = H_kv;
             cfg.D = D;
             cfg.capacity_per_rank = capacity_per_rank;
             cfg.chunk_tokens = chunk_tokens;
             BURST_CHECK(policy == "least_loaded" || policy == "round_robin", InvalidArgument, "policy '",
                         policy, "' is not one of least_loaded, round_robin");
             cfg.policy = policy == "least_loaded" ? AppendPolicy::LeastLoaded : AppendPolicy::RoundRobin;
             cfg.softmax_scale = softmax_scale;
             cfg.num_threads = num_threads;
             BURST_CHECK(impl == "tiled" || impl == "reference", InvalidArgument, "impl '", impl,
                         "' is not one of tiled, reference");
             cfg.kernel = impl == "tiled" ? KernelImpl::Tiled : KernelImpl::Reference;
             return std::make_unique<PyCache>(handle, comm_timeout, cfg);
           }),
           py::arg("fortran_handle"), py::arg("H"), py::arg("H_kv"), py::arg("D"),
           py::arg("capacity_per_rank"), py::arg("chunk_tokens") = 1024, py::arg("policy") = "least_loaded",
           py::arg("softmax_scale") = py::none(), py::arg("num_threads") = 0, py::arg("impl") = "tiled",
           py::arg("comm_timeout") = 300.0)
      .def_property_readonly("rank", [](const PyCache& c) { return c.comm.rank(); })
      .def_property_readonly("size", [](const PyCache& c) { return c.comm.size(); })
      .def(
          "prefill",
          [](PyCache& c, const std::vector<std::int64_t>& ids, const py::buffer& k, const py::buffer& v,
             const std::vector<std::int64_t>& positions, std::int64_t S_global) {
            const TensorView kv = view_of(k, "k_local", false), vv = view_of(v, "v_local", false);
            py::gil_scoped_release release;
            c.cache.prefill(ids, kv, vv, positions, S_global);
          },
          py::arg("seq_ids"), py::arg("k_local"), py::arg("v_local"), py::arg("positions"),
          py::arg("S_global"))
      .def(
          "append",
          [](PyCache& c, const std::vector<std::int64_t>& ids, const py::buffer& k, const py::buffer& v) {
            const TensorView kv = view_of(k, "k_new", false), vv = view_of(v, "v_new", false);
            py::gil_scoped_release release;
            c.cache.append(ids, kv, vv);
          },
          py::arg("seq_ids"), py::arg("k_new"), py::arg("v_new"))
      .def(
          "decode",
          [](PyCache& c, const std::vector<std::int64_t>& ids, const py::buffer& q, const py::buffer& out,
             const py::buffer& lse, bool causal) {
            const TensorView qv = view_of(q, "q", false), ov = view_of(out, "out", true),
                             lv = view_of(lse, "lse", true);
            py::gil_scoped_release release;
            c.cache.decode(ids, qv, ov, lv, causal);
          },
          py::arg("seq_ids"), py::arg("q"), py::arg("out"), py::arg("lse"), py::arg("causal") = true)
      .def("remove", [](PyCache& c, std::int64_t id) { c.cache.remove(id); })
      .def("sequences", [](const PyCache& c) { return c.cache.sequences(); })
      .def("length", [](const PyCache& c, std::int64_t id) { return c.cache.length(id); })
      .def("rank_lengths", [](const PyCache& c, std::int64_t id) { return c.cache.rank_lengths(id); })
      .def("local_positions",
           [](const PyCache& c, std::int64_t id) { return to_array(c.cache.local_positions(id)); })
      .def("local_tokens", [](const PyCache& c) { return c.cache.local_tokens(); })
      .def("local_bytes", [](const PyCache& c) { return c.cache.local_bytes(); })
      .def("last_stats", [](const PyCache& c) {
        const DecodeStats& s = c.cache.last_stats();
        py::dict d;
        d["seconds"] = s.seconds;
        d["local_seconds"] = s.local_seconds;
        d["merge_seconds"] = s.merge_seconds;
        d["bytes_sent"] = s.bytes_sent;
        d["kv_bytes_read"] = s.kv_bytes_read;
        d["chunks"] = s.chunks;
        return d;
      });
}

}  // namespace burst::python
