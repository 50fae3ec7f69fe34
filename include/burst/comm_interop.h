// burst/comm_interop.h — header-only bridge for callers that hold an MPI_Comm.
//
// Owns: from_mpi(MPI_Comm). Include it only from code that already includes <mpi.h>; the
// library itself stays free of <mpi.h> in its public headers (burst/comm.h).
#pragma once

#include <mpi.h>

#include "burst/comm.h"

namespace burst {

/// A Communicator on an MPI_Comm_dup of `comm` (the caller keeps ownership of `comm`).
/// Collective over `comm`. Throws Error(Communication) if MPI is not initialised or comm is
/// MPI_COMM_NULL.
inline Communicator from_mpi(MPI_Comm comm) {
  return Communicator::from_fortran(static_cast<std::int64_t>(MPI_Comm_c2f(comm)));
}

}  // namespace burst
