"""torch.distributed process groups as burst communicators (C++: python/torch_transport.cc).

A ``torch.distributed.ProcessGroup`` (gloo for CPU tensors) passed as ``comm=`` / ``group=`` gets
a burst::Communicator over it (burst/comm_transport.h): burst's messages are the group's own
point-to-point calls (``ProcessGroup.send`` / ``recv`` with tags: channels are tag namespaces)
and collectives (``allgather``, ``alltoall_base``), each a whole message as one uint8 tensor that
views burst's buffer (``torch.frombuffer``: no copy, no per-element Python work). Every wait goes
through ``GroupOps.wait`` with the watchdog's timeout (``Work.wait(timeout)``): a rank that never
arrives ends each waiting rank with the watchdog's message naming it, as over MPI.
burst's tags on the group are 32767 and from 65536 up (one namespace of 2^16 per channel), so a
caller's own point-to-point traffic on the same group should use other tags.
Imported only when a ProcessGroup is passed: the mpi4py path never loads torch.distributed.
"""
import datetime
import sys
import time


def is_group(x):
    """True for a torch.distributed ProcessGroup (without importing torch when it is not loaded)."""
    dist = sys.modules.get("torch.distributed")
    return dist is not None and hasattr(dist, "ProcessGroup") and isinstance(x, dist.ProcessGroup)


def default_group():
    """torch's default process group when torch.distributed is initialised, else None."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return dist.distributed_c10d._get_default_group()


def _u8(mv):
    import torch
    if len(mv) == 0:
        return torch.empty(0, dtype=torch.uint8)
    return torch.frombuffer(mv, dtype=torch.uint8)


class GroupOps:
    """What burst's C++ Transport calls on a ProcessGroup (group-local ranks; byte buffers arrive as
    writable memoryviews of burst's memory, valid until the returned Work completed)."""

    def __init__(self, group):
        import torch.distributed as dist
        self.pg = group
        self.rank, self.size = group.rank(), group.size()
        try:
            self.world = [int(r) for r in dist.get_process_group_ranks(group)]
        except (RuntimeError, ValueError, KeyError, AttributeError):
            self.world = list(range(self.size))
        try:
            backend = dist.get_backend(group)
        except (RuntimeError, ValueError, AttributeError):
            backend = type(group).__name__
        self.name = f"torch.distributed {backend} group"
        self._alltoall_options = dist.AllToAllOptions

    def isend(self, mv, dest, tag):
        return self.pg.send([_u8(mv)], dest, tag)

    def irecv(self, mv, source, tag):
        return self.pg.recv([_u8(mv)], source, tag)

    def all_gather(self, send, recv):
        out, n = _u8(recv), len(send)
        return self.pg.allgather([[out[i * n:(i + 1) * n] for i in range(self.size)]], [_u8(send)])

    def all_to_all_v(self, send, send_bytes, recv, recv_bytes):
        return self.pg.alltoall_base(_u8(recv), _u8(send), [int(b) for b in recv_bytes],
                                     [int(b) for b in send_bytes], self._alltoall_options())

    @staticmethod
    def wait(work, seconds):
        """True once work completed; False when it did not within seconds (> 0; 0 waits without
        limit); the error's text when it failed (e.g. a peer's connection closed)."""
        t0 = time.monotonic()
        try:
            work.wait(datetime.timedelta(seconds=seconds))
        except Exception as e:      # noqa: BLE001 - the transport reports every failure as text
            if seconds > 0 and time.monotonic() - t0 >= 0.99 * seconds:
                return False
            return f"{type(e).__name__}: {e}"
        return True
