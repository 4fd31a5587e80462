// Kernel slots of the optimizers' element loops (optim/ calls them). Each
// updates elements [lo, hi) of one parameter and its state tensors, all
// contiguous with the parameter's shape, dtype and device. The scalars come
// in double and are rounded to the dtype once, as the loops need them, so
// every device and ISA level runs the same per-element arithmetic (PyTorch's
// single-tensor order).
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "ops/dispatch.h"

namespace gpipe::ops {

// Adam/AdamW: d = g (+ wd * p for Adam with decay; p *= shrink first for AdamW);
// m = lerp(m, d, one_minus_beta1); v = beta2 * v + one_minus_beta2 * d^2;
// p -= step_size * m / (sqrt(v) / bc2_sqrt + eps).
struct AdamStepArgs {
  double beta2 = 0, one_minus_beta1 = 0, one_minus_beta2 = 0, eps = 0;
  double weight_decay = 0, shrink = 1, step_size = 0, bc2_sqrt = 1;
  bool decay = false, decoupled = false;
};
GPIPE_DECLARE_KERNEL(adam_update,
                     void(const AdamStepArgs&, Tensor& param, const Tensor& grad, Tensor& exp_avg,
                          Tensor& exp_avg_sq, int64_t lo, int64_t hi));

// Adam over a list of whole tensors in a few launches (Note [Multi-tensor
// updates] in optim/optimizer.h): params[i], grads[i], exp_avgs[i] and
// exp_avg_sqs[i] contiguous, of one float dtype, on the device, updated
// with args[i] exactly as adam_update updates them. Devices that launch
// kernels register it (CUDA); elsewhere optim/ cuts the tensors into pieces.
GPIPE_DECLARE_KERNEL(adam_update_many,
                     void(const std::vector<AdamStepArgs>& args, std::vector<Tensor>& params,
                          const std::vector<Tensor>& grads, std::vector<Tensor>& exp_avgs,
                          std::vector<Tensor>& exp_avg_sqs));

// SGD: d = g + wd * p; with a momentum buffer b (defined): b = first ? d :
// momentum * b + keep * d, d = nesterov ? d + momentum * b : b; p -= lr * d.
struct SgdStepArgs {
  double lr = 0, weight_decay = 0, momentum = 0, keep = 1;
  bool first = false, nesterov = false;
};
GPIPE_DECLARE_KERNEL(sgd_update, void(const SgdStepArgs&, Tensor& param, const Tensor& grad,
                                      Tensor& momentum_buffer, int64_t lo, int64_t hi));

// RMSProp: d = g + wd * p; s = alpha * s + (1 - alpha) * d^2; with grad_avg a
// (defined, centred): a = lerp(a, d, 1 - alpha), avg = sqrt(s - a^2) + eps,
// else avg = sqrt(s) + eps; with a momentum buffer b: b = momentum * b + d / avg,
// p -= lr * b; else p -= lr * d / avg.
struct RmsPropStepArgs {
  double lr = 0, weight_decay = 0, alpha = 0, eps = 0, momentum = 0;
};
GPIPE_DECLARE_KERNEL(rmsprop_update, void(const RmsPropStepArgs&, Tensor& param, const Tensor& grad,
                                          Tensor& square_avg, Tensor& momentum_buffer,
                                          Tensor& grad_avg, int64_t lo, int64_t hi));

}  // namespace gpipe::ops
