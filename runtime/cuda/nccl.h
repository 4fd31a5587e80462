// NCCL for a multi-process job whose stages live on GPUs (one process per
// stage and replica, as with MPI; Note [Processes] in docs/ARCHITECTURE.md).
//
// NcclCommunicator wraps an MPI communicator: it bootstraps its NCCL
// communicators by broadcasting an ncclUniqueId over MPI, sums CUDA tensors
// with ncclAllReduce, and makes NcclTransports for links between CUDA
// devices: each message's header (shapes, dtypes) goes over MPI, its
// payloads with ncclSend/ncclRecv on a stream of the link's own (one NCCL
// communicator per channel, so activations and gradients never queue behind
// each other). Everything else (host collectives, CPU links) is the MPI
// communicator's. Every wait polls against the communicator's timeout and
// aborts the NCCL communicator when it passes, so a dead peer ends the job
// instead of hanging it.
//
// Loading this library registers it for kCUDA (register_device_communicator),
// so Pipeline uses it whenever a multi-process job's stages are on cuda:i,
// one process per GPU: when two ranks of the job share a GPU (NCCL takes one
// rank per GPU) the registered factory returns the MPI communicator itself
// (host-staged links and sums) and says so on stderr. Groups of threads in
// one process (LocalGroup) are never wrapped (communicator_for).
//
// Status: compiled in the CUDA configuration; it has not run on a GPU (the
// first GPU check had one GPU and no OpenMPI).
#pragma once

#include <memory>

#include "runtime/communicator.h"

namespace gpipe::cuda {

// Collective over `base`. Throws gpipe::Error if there is no CUDA device.
std::shared_ptr<Communicator> nccl_communicator(std::shared_ptr<Communicator> base, Device device);

}  // namespace gpipe::cuda
