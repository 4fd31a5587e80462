// The fused linear's cuBLASLt epilogue (Note [cuBLASLt epilogue] in
// ops/cuda/linear_lt.cc).
#pragma once

#include <cstdint>

namespace gpipe::ops::cuda {

// How many linear_bias_act calls cuBLASLt has computed in this process, on
// any device; a call it declined (the composed kernels ran) does not count.
// Tests read it to tell the two paths apart.
int64_t cublaslt_linear_calls();

// For tests of the fallback: off, cuda:device's linear_bias_act runs the composed kernels
// (the GEMM, bias_act_forward, the add) as it does where cuBLASLt has no algorithm. On by
// default.
void set_cublaslt_linear(int device, bool on);

}  // namespace gpipe::ops::cuda
