// Same-device kernels behind the CUDA copy, fill and gradient-accumulation
// hooks (runtime/cuda/copy.cc). All run on the device's compute stream.
#pragma once

#include "core/tensor.h"

namespace gpipe::cuda {

// dst = src, converting the dtype (float32/float64/int32/int64) and honouring
// both views' strides. src and dst are on the same CUDA device, same shape.
void copy_on_device(const Tensor& src, Tensor& dst);

// Every element of the view dst set to value (converted to its dtype).
void fill_on_device(Tensor& dst, double value);

// A new contiguous tensor a + b (same shape, dtype and CUDA device; any strides).
Tensor add_on_device(const Tensor& a, const Tensor& b);

}  // namespace gpipe::cuda
