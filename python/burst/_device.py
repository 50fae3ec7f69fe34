"""Where operands live. burst computes on the host: a tensor on another device (a CUDA torch
tensor, whose memory a numpy view cannot reach) is refused by name with the library's own error
(burst/tensor.h check_device: ValueError "<api>: q is on cuda:0, but this call runs on host; move
it there first") before any conversion. numpy arrays and objects without ``.device`` are host
memory; a device burst does not know (meta, mps, ...) is refused as well.
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
