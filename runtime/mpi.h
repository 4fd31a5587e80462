// MPI: the job's processes as Communicators, and MpiTransport for pipeline
// boundaries between processes (one process per stage).
//
//   mpirun -np 4 gpipe_train --model=transformer --K=2 --replicas=2 ...
//
// mpi::world() initialises MPI on first use (MPI_THREAD_SERIALIZED or
// better; every MPI call in gpipe goes through one process-wide mutex, so
// the pipeline's worker thread and the caller may both use it) and
// finalises it at exit. Sends, receives and collectives are non-blocking
// requests polled against a deadline, so a stuck peer makes the waiting rank
// throw instead of hang; the one exception is an all-reduce of 1 MiB or more
// (gradients), which uses the faster blocking MPI_Allreduce (Note [Large
// all-reduces]) and is bounded by the pipeline's watchdog instead.
#pragma once

#include <memory>

#include "runtime/communicator.h"

namespace gpipe::mpi {

// True when this process was started by mpirun/mpiexec (OpenMPI, PMI or PMIx
// environment), i.e. when the job may have more than one process.
bool launched_by_mpirun();

// MPI_COMM_WORLD. Throws gpipe::Error if MPI cannot be initialised.
std::shared_ptr<Communicator> world();

// True once world() has initialised MPI in this process.
bool initialized();

// MPI_Abort(MPI_COMM_WORLD, code): ends every rank of the job.
[[noreturn]] void abort_job(int code);

}  // namespace gpipe::mpi
