// Communicator: a group of processes that run one training job together
// (all ranks, one pipeline's ranks, or the replicas of one stage), with the
// collectives the pipeline needs and point-to-point Transports between its
// members. MpiCommunicator (runtime/mpi.h) implements it over MPI; NCCL
// collectives for GPU tensors sit on top of it (runtime/cuda/nccl.h).
//
// Every collective must be called by all members in the same order (as in
// MPI). A member that has not joined after timeout() seconds makes the call
// throw gpipe::Error naming the collective, so a stuck or dead rank ends the
// job instead of hanging it (Invariant 5). Exception: the MPI all-reduce of
// 1 MiB or more blocks (Note [Large all-reduces] in runtime/mpi.cc); the
// pipeline calls it only after a small deadline-bound reduction has brought
// every member there, and its watchdog bounds it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "runtime/transport.h"

namespace gpipe {

enum class ReduceOp { kSum, kMin, kMax };

// The pipeline's channels (StageExecutor::connect): 0 activations, 1
// gradients, 2 predictions, 3 device turns, 4 skips, 5 skip gradients.
inline constexpr int kTransportChannels = 6;

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // This member's rank in the whole job (for messages).
  virtual int world_rank() const = 0;
  // How many members run on this host (to share its cores).
  virtual int local_size() const = 0;

  virtual void allreduce(double* data, int64_t n, ReduceOp op, const char* what) = 0;
  virtual void allreduce(float* data, int64_t n, ReduceOp op, const char* what) = 0;
  // Sums a contiguous float32/float64 tensor across members, in place.
  virtual void allreduce_sum(Tensor& t, const char* what);
  // Root's bytes on every member.
  virtual void broadcast(std::string& bytes, int root, const char* what) = 0;
  // Every member's string, by rank.
  virtual std::vector<std::string> allgather(const std::string& mine, const char* what) = 0;
  virtual void barrier(const char* what) = 0;
  // Members with the same color form a new communicator, ordered by key.
  virtual std::shared_ptr<Communicator> split(int color, int key) = 0;
  // A link between this member and `peer` for `channel` in [0,
  // kTransportChannels) (links on different channels never see each other's
  // messages); tensors arrive on `device`. Both ends create one with the same
  // channel. The pipeline sends one way on each (GPU links queue a channel's
  // sends and receives on one stream).
  virtual std::unique_ptr<Transport> transport(int peer, int channel, Device device,
                                               std::string name) = 0;
  // False when every member is a thread of this process (LocalGroup): its
  // links and sums then stay on the devices (a view or a device-to-device
  // copy) and no device library is wrapped around it (NCCL takes one rank
  // per GPU and one process per rank).
  virtual bool spans_processes() const { return true; }
  // Groups of one process only (!spans_processes()): every member's tensor,
  // by rank: the members' own objects, shared, not copied. A member must not
  // write the tensor it passed afterwards (readers' copies may still be
  // queued on their devices' streams); the default throws gpipe::Error.
  virtual std::vector<Tensor> share_tensors(const Tensor& mine, const char* what);
  // Ends the whole job (every rank) with `code`; does not return.
  [[noreturn]] virtual void abort(int code) = 0;
  // Wakes every member waiting in a collective of this group (and of groups
  // split from it) with Aborted, and makes new collectives throw it, until
  // resume(). Used when all members are threads of one process and one has
  // failed; a no-op where members are processes (they time out or the job
  // ends). resume() is called once no member is inside a collective.
  virtual void cancel() {}
  virtual void resume() {}

  void set_timeout(double seconds) { timeout_ = seconds; }
  double timeout() const { return timeout_; }

 protected:
  double timeout_ = 600;
};

// Device communicators: a GPU backend registers, at load time, how to wrap
// an MPI communicator so that collectives on its tensors and transports
// between its devices use the device's own library (NCCL for kCUDA;
// runtime/cuda/nccl.h). communicator_for() returns `base` itself for CPU
// devices or when nothing is registered (tensors are then staged through
// host memory), and for a group whose members are threads of one process
// (!spans_processes()). Collective over `base`: every member calls it alike.
using DeviceCommunicatorFactory =
    std::shared_ptr<Communicator> (*)(std::shared_ptr<Communicator> base, Device device);
void register_device_communicator(DeviceType type, DeviceCommunicatorFactory factory);
std::shared_ptr<Communicator> communicator_for(std::shared_ptr<Communicator> base, Device device);

// Message <-> bytes, for transports and broadcasts. The header describes
// every tensor (defined, wants-gradient flag, dtype, shape); payloads follow
// in order, each tensor's bytes contiguous.
std::string encode_header(const Message& m);
// Tensors allocated (uninitialised) on `device` with the header's shapes.
Message decode_header(const std::string& header, Device device);
// Header and payloads in one string (CPU copies of the tensors).
std::string serialize_message(const Message& m);
Message deserialize_message(const std::string& bytes, Device device);

}  // namespace gpipe
