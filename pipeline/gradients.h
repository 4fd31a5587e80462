// Gradient reductions of the synchronous update: the sums that make every
// copy of a weight hold the gradient of the whole mini-batch.
//  - over replicas (data parallelism): each stage's gradients and BatchNorm
//    statistics summed over the R copies of that stage;
//  - over cells (tied weights): a weight used by several cells has one copy
//    per cell (Note [Tied copies]); their gradients are summed over all ranks.
#pragma once

#include <vector>

#include "runtime/communicator.h"

namespace gpipe {

// One gradient slot of a summed buffer: the tensor whose gradient it is
// (null where this rank holds no copy: it adds zeros), its size and dtype,
// and whether any rank has a gradient for it (slots nobody has are skipped).
struct GradSlot {
  Tensor* tensor;
  int64_t numel;
  DType dtype;
  bool present;
};

// Sums the slots' gradients over `comm`: one flat tensor per dtype on
// `device` (so a device communicator such as NCCL reduces it in place; the
// ranks of one process add each other's on their devices, Note [In-process
// sums] in pipeline/gradients.cc), then
// each held tensor's gradient becomes its slice of the sum (a view: no
// second copy of every gradient). Collective: every member passes the same
// slot list (sizes, dtypes, presence).
void allreduce_gradients(Communicator& comm, const std::vector<GradSlot>& slots, Device device,
                         const char* what);

}  // namespace gpipe
