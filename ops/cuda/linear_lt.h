// The fused linear's cuBLASLt epilogue (Note [cuBLASLt epilogue] in
// ops/cuda/linear_lt.cc).
#pragma once

#include <cstddef>
#include <cstdint>

namespace gpipe::ops::cuda {

// How many linear_bias_act calls cuBLASLt has computed in this process, on
// any device; a call it declined (the composed kernels ran) does not count.
// Tests read it to tell the two paths apart.
int64_t cublaslt_linear_calls();

// The plans (descriptors and algorithm per case) a device keeps before it drops them all.
inline constexpr size_t kCublasLtMaxPlans = 512;

// For tests of the fallback: off, cuda:device's linear_bias_act runs the composed kernels
// (the GEMM, bias_act_forward, the add) as it does where cuBLASLt has no algorithm. On by
// default.
void set_cublaslt_linear(int device, bool on);

}  // namespace gpipe::ops::cuda
