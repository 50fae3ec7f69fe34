// burst/comm.h — the communication layer over MPI (the only module that touches MPI).
//
// Owns: Communicator, an RAII handle on an MPI_Comm_dup of the caller's communicator, plus
// the point-to-point and collective operations the strategies need, with byte/message
// counters and a progress hook for overlapping transfers with kernel tiles.
// Invariants: never calls MPI_Init/MPI_Finalize; <mpi.h> is included only by src/comm_mpi.cc
// (users holding an MPI_Comm use burst/comm_interop.h or pass MPI_Comm_c2f(comm)).
// Does not: know about attention, masks or layouts.
#pragma once

#include <cstdint>
#include <memory>

namespace burst {

class Communicator {
 public:
  /// Dup of MPI_COMM_WORLD. Collective over MPI_COMM_WORLD. Throws Error(Communication) if MPI
  /// is not initialised.
  static Communicator world();
  /// Dup of the communicator whose Fortran handle is `handle` (MPI_Comm_c2f / mpi4py py2f()).
  /// Collective over that communicator.
  static Communicator from_fortran(std::int64_t handle);

  int rank() const;
  int size() const;

  struct Impl;
  explicit Communicator(std::shared_ptr<Impl> impl);
  Impl& impl() const { return *impl_; }

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace burst
