#include "pipeline/gradients.h"

#include "core/autograd.h"
#include "ops/ops.h"

namespace gpipe {

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
    comm.allreduce_sum(flat, what);
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
