// Internal to core's autograd (autograd.cc builds the graph,
// autograd_engine.cc runs it): what both halves share.
#pragma once

#include "core/autograd.h"
#include "core/tensor.h"

namespace gpipe {

// The edge a gradient for `t` flows along: its grad_fn's output, or (for a
// leaf that requires grad) its gradient accumulator, made on first use;
// invalid when `t` needs no gradient.
Edge gradient_edge(const Tensor& t);

// Note [Gradients in place]. A gradient that no one else can see (the only
// handle on its TensorImpl and on its storage, dense, without autograd
// history) is taken over instead of copied: the first gradient of a leaf
// becomes its grad() (recharged to MemoryCategory::kGradient), and a sum of
// two gradients for one tensor (a residual stream used twice) is added into
// such a buffer on the CPU instead of into a fresh copy. The additions are the
// same, so the bits are too; what goes is a copy of every weight's gradient
// per step and of every accumulated activation gradient.
bool sole_handle(const Tensor& t);

// slot + g, into slot's own buffer when sole_handle(slot) on the CPU, else
// into a new tensor (accumulate).
void accumulate_into_slot(Tensor& slot, const Tensor& g);

}  // namespace gpipe
