// Transport: one direction of one pipeline boundary (activations from stage
// s to s+1, or gradients from s+1 back to s). The sending stage calls send(),
// the receiving stage receive(); messages are keyed by micro-batch, so
// arrival order never matters, and a receive never waits forever (timeout,
// or abort() when another stage failed).
//
// Implementations: the LocalGroup's (runtime/local_group.h: ranks that are
// threads of one process; a Mailbox and a copy to the destination device),
// MpiTransport (runtime/mpi.h: one
// process per stage, non-blocking MPI point-to-point of CPU tensors) and
// NcclTransport (runtime/cuda/nccl.h: GPU tensors, header over MPI).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "runtime/mailbox.h"

namespace gpipe {

class Transport {
 public:
  virtual ~Transport() = default;
  // Hands micro-batch `m`'s message to the other side and returns without
  // waiting for it to arrive (the transport keeps the tensors alive until
  // they have left). Autograd history is not sent.
  virtual void send(int m, Message msg) = 0;
  // Micro-batch `m`'s message, on the receiving stage's device. Throws
  // Aborted after abort(), gpipe::Error naming this link after `timeout`.
  virtual Message receive(int m, std::chrono::duration<double> timeout) = 0;
  // Wakes a blocked receive with Aborted (another stage failed).
  virtual void abort() {}
  // Start of a step: clear the abort flag. In-process links also forget
  // undelivered messages; links between processes keep them (a neighbour a
  // step ahead may already have sent the next step's).
  virtual void reset() {}
  // Forgets undelivered messages: after a failed step, when both ends are
  // known to have stopped (in-process links; a no-op between processes).
  virtual void drop_pending() {}
  // Waits until every send so far has left this process (end of a step).
  virtual void flush(std::chrono::duration<double> /*timeout*/) {}
  // "activations of stage 0 (rank 0) to stage 1 (rank 1)": for errors and the watchdog.
  virtual const std::string& name() const = 0;
  virtual const char* kind() const = 0;  // "in-process", "mpi", "nccl"
  // Payload bytes that crossed a device or process boundary through this object.
  int64_t bytes_sent() const { return bytes_sent_.load(); }
  int64_t messages_sent() const { return messages_sent_.load(); }

 protected:
  std::atomic<int64_t> bytes_sent_{0}, messages_sent_{0};
};

}  // namespace gpipe
