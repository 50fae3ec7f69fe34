"""Where operands live. A call runs where its operands are: on the host, or — in a module built
with CUDA (``_C.cuda_built()``) — on the GPU of torch CUDA tensors, all on that one GPU (_torch.py
hands their memory over without a copy; a distributed call: each rank's on its own GPU, the ranks
agreeing that they all pass CUDA tensors, _numpy.check_operands). Everything else computes on the
host: a tensor on another device (a CUDA tensor in a build without CUDA, or beside host operands)
is refused by name with the library's own error (burst/tensor.h check_device: ValueError "<api>: q is
on cuda:0, but this call runs on host; move it there first") before any conversion. numpy arrays
and objects without ``.device`` are host memory; a device burst does not know (meta, mps, ...) is
refused as well.
"""
from . import _C


def device_name(x):
    """torch's spelling of x's device ("cpu", "cuda:1"); "cpu" for objects without one."""
    device = getattr(x, "device", None)
    return "cpu" if device is None else str(device)


def check_host(api, **operands):
    """Raises ValueError naming the first operand (name=tensor, None skipped) not in host memory.
    Not collective: callers inside an agreement pass the error on (_numpy.check_operands)."""
    _C.check_host(api, [(name, device_name(x)) for name, x in operands.items() if x is not None])


def check_local(api, **operands):
    """The device a single-process call runs on: "cuda:N" when the first operand is on GPU N and
    this module has CUDA (every other operand must be on GPU N too), else "cpu" (every operand must
    be host memory). Raises ValueError naming the first operand off that device. Not collective."""
    given = [(name, device_name(x)) for name, x in operands.items() if x is not None]
    first = given[0][1] if given else "cpu"
    if first.startswith("cuda") and _C.cuda_built():
        _C.check_device(api, first, given)
        return first
    _C.check_host(api, given)
    return "cpu"
