// CUDA copies, fills and gradient accumulation, plugged into core.
//
// Linking //runtime/cuda registers, for DeviceType::kCUDA:
//  - register_copy: Tensor::copy_from / to(Device) / to(DType) / contiguous /
//    clone between any of cpu:i and cuda:j, with dtype conversion and strides
//    on both sides;
//  - register_fill: Tensor::fill (and so zeros / full) on CUDA tensors;
//  - register_accumulate: gradient accumulation of CUDA gradients.
//
// Ordering: host-to-device copies are queued on the destination's compute
// stream (the host buffer may be reused when the call returns);
// device-to-host copies wait for the source's compute stream and return with
// the data in place. Either way a copy of 1 MiB or more is staged through
// two halves of a pinned host buffer, DMA and host memcpy overlapped (Note
// [Pinned staging] in copy.cc): checkpoints of device tensors are saved and
// loaded that way. Between two GPUs the copy runs on the destination's
// copy stream, fenced with events against both compute streams, directly
// (peer access) when the hardware allows it and otherwise staged through
// pinned host memory (synchronously).
#pragma once

#include "core/tensor.h"

namespace gpipe::cuda {

// The registered copy hook: src and dst of one shape, at least one on CUDA.
void copy_tensor(const Tensor& src, Tensor& dst);

}  // namespace gpipe::cuda
