// python/torch_transport.cc — a torch.distributed ProcessGroup as a burst::Transport.
//
// Conversion only: each Transport operation calls the Python object burst._group.GroupOps
// (which holds the ProcessGroup) under the GIL, handing it the message's bytes as a writable
// memoryview of burst's own buffer (no copy: GroupOps wraps it with torch.frombuffer and calls the
// group's send / recv / allgather / alltoall_base); the returned Work is waited with a timeout
// for the watchdog (burst/comm_transport.h). The library calls these with the GIL released.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "burst/comm.h"
#include "burst/comm_transport.h"
#include "burst/error.h"
#include "module_common.h"

namespace py = pybind11;

namespace burst::python {
namespace {

// A Python object held from C++: released under the GIL, or leaked if the interpreter is gone.
struct Held {
  py::object obj;
  explicit Held(py::object o) : obj(std::move(o)) {}
  Held(const Held&) = delete;
  Held& operator=(const Held&) = delete;
  ~Held() {
    if (Py_IsInitialized()) {
      py::gil_scoped_acquire gil;
      obj = py::object();
    } else {
      obj.release();
    }
  }
};

py::memoryview view(std::span<std::byte> bytes) {
  return py::memoryview::from_memory(static_cast<void*>(bytes.data()), static_cast<py::ssize_t>(bytes.size()),
                                     false);
}

// The group only reads a send buffer; memoryview / torch.frombuffer want it writable.
py::memoryview view(std::span<const std::byte> bytes) {
  return view(std::span<std::byte>(const_cast<std::byte*>(bytes.data()), bytes.size()));
}

[[noreturn]] void rethrow(py::error_already_set& e, const char* call) {
  const std::string text = e.what();
  BURST_FAIL(Communication, call, " over the torch.distributed group failed: ", text);
}

class GroupOp final : public TransportOp {
 public:
  GroupOp(std::shared_ptr<Held> ops, py::object work) : ops_(std::move(ops)), work_(std::move(work)) {}
  bool wait_for(double seconds) override {
    py::gil_scoped_acquire gil;
    py::object result;
    try {
      result = ops_->obj.attr("wait")(work_.obj, seconds);
    } catch (py::error_already_set& e) { rethrow(e, "wait"); }
    if (py::isinstance<py::str>(result)) BURST_FAIL(Communication, result.cast<std::string>());
    return result.cast<bool>();
  }

 private:
  std::shared_ptr<Held> ops_;
  Held work_;
};

class GroupTransport final : public Transport {
 public:
  explicit GroupTransport(py::object ops)
      : ops_(std::make_shared<Held>(ops)),
        rank_(ops.attr("rank").cast<int>()),
        size_(ops.attr("size").cast<int>()),
        world_(ops.attr("world").cast<std::vector<int>>()),
        name_(ops.attr("name").cast<std::string>()) {}

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int world_rank(int rank) const override { return world_[static_cast<std::size_t>(rank)]; }
  std::string name() const override { return name_; }

  // Each builds its Python arguments (memoryviews) under the GIL, inside call().
  std::unique_ptr<TransportOp> isend(std::span<std::byte> data, int dest, std::int64_t tag) override {
    return call("isend", [&] { return py::make_tuple(view(data), dest, tag); });
  }
  std::unique_ptr<TransportOp> irecv(std::span<std::byte> data, int source, std::int64_t tag) override {
    return call("irecv", [&] { return py::make_tuple(view(data), source, tag); });
  }
  std::unique_ptr<TransportOp> all_gather(std::span<const std::byte> send,
                                          std::span<std::byte> recv) override {
    return call("all_gather", [&] { return py::make_tuple(view(send), view(recv)); });
  }
  std::unique_ptr<TransportOp> all_to_all_v(std::span<const std::byte> send,
                                            const std::vector<std::int64_t>& send_bytes,
                                            std::span<std::byte> recv,
                                            const std::vector<std::int64_t>& recv_bytes) override {
    return call("all_to_all_v",
                [&] { return py::make_tuple(view(send), send_bytes, view(recv), recv_bytes); });
  }
  [[noreturn]] void abort(int code) override {
    std::fflush(stdout);
    std::fflush(stderr);
    std::_Exit(code);  // the watchdog's end of this process (burst/comm_transport.h)
  }

 private:
  template <typename MakeArgs>
  std::unique_ptr<TransportOp> call(const char* name, MakeArgs&& make_args) {
    py::gil_scoped_acquire gil;
    try {
      py::object work = ops_->obj.attr(name)(*make_args());
      return std::make_unique<GroupOp>(ops_, std::move(work));
    } catch (py::error_already_set& e) { rethrow(e, name); }
  }

  std::shared_ptr<Held> ops_;
  int rank_, size_;
  std::vector<int> world_;
  std::string name_;
};

}  // namespace

void bind_transport(py::module_& m) {
  m.def(
      "group_communicator",
      [](py::object ops, double comm_timeout) {
        auto group = std::make_shared<GroupTransport>(std::move(ops));
        py::gil_scoped_release release;
        return Communicator::from_transport(std::move(group), comm_timeout);
      },
      py::arg("ops"), py::arg("comm_timeout") = 300.0,
      "A burst Communicator over a torch.distributed ProcessGroup (ops: burst._group.GroupOps). "
      "Collective over the group: one per group and process (burst._comm keeps it).");
}

}  // namespace burst::python
