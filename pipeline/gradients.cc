#include "pipeline/gradients.h"

#include "core/autograd.h"
#include "ops/ops.h"

namespace gpipe {
namespace {

// Note [In-process sums]: the ranks of one process (cells sharing a GPU,
// GPUs of one process, CPU cells) sum on their devices: each takes every
// member's buffer and adds them in rank order into a new tensor of its own
// (a peer copy where the buffer is on another device). Every member adds
// the same values in the same order, so all end with the same bits, as
// with a host all-reduce; nobody writes a shared buffer, so no reader waits.
Tensor sum_in_process(Communicator& comm, const Tensor& mine, const char* what) {
  const std::vector<Tensor> all = comm.share_tensors(mine, what);
  Tensor acc = all[0].to(mine.device());
  for (size_t r = 1; r < all.size(); ++r) acc = ops::add(acc, all[r].to(mine.device()));
  return acc;
}

}  // namespace

void allreduce_gradients(Communicator& comm, const std::vector<GradSlot>& slots, Device device,
                         const char* what) {
  NoGradGuard no_grad;
  MemoryCategoryGuard cat(MemoryCategory::kGradient);
  for (DType dt : {DType::kFloat32, DType::kFloat64}) {
    int64_t n = 0;
    for (const GradSlot& s : slots)
      if (s.present && s.dtype == dt) n += s.numel;
    if (n == 0) continue;
    Tensor flat = Tensor::zeros(Shape{n}, dt, device);
    int64_t at = 0;
    for (const GradSlot& s : slots) {
      if (!s.present || s.dtype != dt) continue;
      if (s.tensor && s.tensor->grad().defined())
        ops::narrow(flat, 0, at, s.numel)
            .copy_from(ops::reshape(s.tensor->grad().to(device), {s.numel}));
      at += s.numel;
    }
    if (comm.spans_processes())
      comm.allreduce_sum(flat, what);
    else
      flat = sum_in_process(comm, flat, what);
    at = 0;
    for (const GradSlot& s : slots) {
      if (!s.present || s.dtype != dt) continue;
      if (s.tensor)
        s.tensor->set_grad(
            ops::reshape(ops::narrow(flat, 0, at, s.numel), s.tensor->shape().dims()));
      at += s.numel;
    }
  }
}

}  // namespace gpipe
