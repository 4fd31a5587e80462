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

}  // namespace gpipe
