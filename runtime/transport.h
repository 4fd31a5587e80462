// Transport: moves a boundary bundle (activations forward, gradients
// backward) from one stage's device to the next one's. The in-process
// transport copies tensors between devices of this process; CUDA peer copy,
// MPI and NCCL transports implement the same interface.
#pragma once

#include <cstdint>
#include <memory>

#include "layers/layer.h"

namespace gpipe {

class Transport {
 public:
  virtual ~Transport() = default;
  // A copy of `bundle` on `dst`, without autograd history. Undefined tensors stay undefined.
  virtual Bundle send(const Bundle& bundle, Device dst) = 0;
  virtual const char* name() const = 0;
  int64_t bytes_sent() const { return bytes_sent_; }

 protected:
  int64_t bytes_sent_ = 0;
};

// Copies through the destination device's allocator (a no-op view on the same device).
class InProcessTransport final : public Transport {
 public:
  Bundle send(const Bundle& bundle, Device dst) override;
  const char* name() const override { return "in-process"; }
};

}  // namespace gpipe
