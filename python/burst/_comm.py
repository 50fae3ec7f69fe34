"""The watched communicator behind the Python module's own collectives.

The module agrees on arguments (an allgather of each rank's verdict and shapes), votes on the
plan cache (_cache.py) and gathers shards (unshard). Done with mpi4py's blocking calls, a rank
that never arrives would hang its peers forever. They run instead on a burst._C.Communicator: an
MPI_Comm_idup of the caller's communicator made once per communicator and kept, whose
collectives are control exchanges under burst's watchdog (burst/comm.h): when a peer does not
arrive within the timeout, every waiting rank prints the operation, the ranks that never arrived
and the timeout, and aborts the job (MPI_Abort).
A torch.distributed ProcessGroup works the same way (_group.py): its burst._C.Communicator runs
over the group's own calls, made once per group and kept; a watchdog timeout ends the process.
"""
import atexit
import math
import os
import pickle

from . import _C

_comms = {}             # Fortran handle (mpi4py) or ("group", id) -> (communicator, burst._C.Communicator)
_atexit = [False]


def _same_comm(a, b):
    from ._group import is_group
    if is_group(a) or is_group(b):
        return a is b
    from mpi4py import MPI
    return a == b or (a != MPI.COMM_NULL and b != MPI.COMM_NULL and
                      MPI.Comm.Compare(a, b) == MPI.IDENT)


def comm_timeout(extra):
    """The communication watchdog's seconds (DistConfig::comm_timeout_seconds): the
    comm_timeout keyword, else $BURST_COMM_TIMEOUT, else 300; 0 waits forever. Not validated
    here: the value reaches DistConfig, whose agreed validation refuses a bad one on every rank."""
    value = extra.get("comm_timeout", os.environ.get("BURST_COMM_TIMEOUT", 300))
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


def usable_timeout(seconds, default=300.0):
    """seconds as a float when it is a valid watchdog timeout (finite, >= 0), else default: a bad
    value must still reach the agreed validation that rejects it on every rank."""
    try:
        t = float(seconds)
    except (TypeError, ValueError):
        return default
    return t if math.isfinite(t) and t >= 0 else default


def watched(comm, timeout, activity):
    """The burst._C.Communicator of comm (mpi4py or a torch ProcessGroup; made on first use:
    collective), with its watchdog set to timeout seconds and its activity label set. Not
    collective afterwards."""
    from ._group import GroupOps, is_group
    group = is_group(comm)
    handle = ("group", id(comm)) if group else int(comm.py2f())
    entry = _comms.get(handle)
    t = usable_timeout(timeout)
    if entry is None or not _same_comm(entry[0], comm):
        if not _atexit[0]:      # free the dups before mpi4py finalizes MPI (atexit is LIFO)
            atexit.register(clear)
            _atexit[0] = True
        entry = (comm, _C.group_communicator(GroupOps(comm), t) if group
                 else _C.Communicator(handle, t))
        _comms[handle] = entry
    c = entry[1]
    c.set_timeout(t)
    c.set_activity(activity)
    return c


_known = []            # communicators seen eagerly, by index: torch.compile's ops name them so (_ops.py)


def known_index(comm, register=True):
    """comm's index among the communicators seen (-1 for None), registering it when new (an eager
    call); with register=False (inside a torch.compile trace) None when it was never seen."""
    if comm is None:
        return -1
    for i, c in enumerate(_known):
        if c is comm:
            return i
    if not register:
        return None
    _known.append(comm)
    return len(_known) - 1


def known(index):
    """The communicator of known_index (None for -1)."""
    return None if index < 0 else _known[index]


def rank_size(comm):
    """(rank, size) of an mpi4py communicator or a torch.distributed ProcessGroup (registers it
    for torch.compile's ops: known_index)."""
    from ._group import is_group
    known_index(comm)
    if is_group(comm):
        return comm.rank(), comm.size()
    return comm.Get_rank(), comm.Get_size()


def check(comm):
    """ValueError unless comm is None, an mpi4py intracommunicator or a torch ProcessGroup."""
    from ._group import is_group
    if comm is None or is_group(comm):
        known_index(comm)
        return
    try:
        from mpi4py import MPI
        ok = isinstance(comm, MPI.Intracomm)
    except ImportError:
        ok = False
    if not ok:
        raise ValueError(f"comm={comm!r}: expected an mpi4py intracommunicator, a "
                         f"torch.distributed ProcessGroup, or None")
    known_index(comm)


def allgather(comm, obj, timeout, activity):
    """Every rank's obj (pickled), in rank order. Collective over comm, under the watchdog."""
    c = watched(comm, timeout, activity)
    return [pickle.loads(b) for b in c.all_gather_bytes(pickle.dumps(obj), activity)]


def clear():
    """Drops the kept communicators (their dups are freed). Call on every rank."""
    _comms.clear()
