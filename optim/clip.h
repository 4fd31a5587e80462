// Gradient clipping by global norm and finiteness checks, for the training
// loop between backward and Optimizer::step.
//
// All functions read each parameter's grad() (undefined gradients count as
// absent), visit a tensor shared by several entries (tied weights) once, and
// accept parameters spread over several devices: each gradient is reduced
// and scaled on its own device (ops::sum_of_squares, ops::mul_scalar), one
// copy of the per-tensor sums comes back per device. float32 and float64
// gradients; anything else throws gpipe::Error naming the parameter.
#pragma once

#include <vector>

#include "core/bundle.h"
#include "core/tensor.h"

namespace gpipe::optim {

// sqrt(sum of g^2 over every element of every unique gradient), accumulated
// in float64 in a fixed order (the result does not depend on the thread count).
double grad_norm(const std::vector<NamedTensor>& params);

// Returns grad_norm(params), the norm before clipping. If it is finite and
// exceeds max_norm, multiplies every gradient in place by
// max_norm / (norm + 1e-6) (PyTorch's clip_grad_norm_ coefficient). A NaN or
// infinite norm is returned as is and nothing is scaled: the caller should
// skip the step. Throws gpipe::Error unless max_norm > 0 and finite.
double clip_grad_norm(const std::vector<NamedTensor>& params, double max_norm);

// True if no element of `t` (float32/float64) is NaN or infinite. Off the
// CPU through the device's reduction of t * 0 (one copy back per device).
bool all_finite(const Tensor& t);
// True if every defined gradient of `params` is finite.
bool all_finite(const std::vector<NamedTensor>& params);

}  // namespace gpipe::optim
