// The switch for CUDA kernels that have not yet run on a GPU.
//
// Note [Pending CUDA kernels]. Kernels written on machines without a GPU
// (checked there only by compiling and, where they have one, by a CPU
// emulation) stay off until a GPU run has passed them: GPIPE_CUDA_PENDING=1
// switches them on (tools/gpu_check.sh runs the CUDA tests and the T6
// benchmark with it), 0 or unset leaves the validated kernels; any other
// value is an error at the first kernel that asks. Today: the tensor-core
// flash attention (ops/cuda/attention_mma.cu), the linear epilogue's
// 16-byte pack kernels (ops/cuda/bias_act.cu), and attention dropout in the
// flash kernels (flash_attention_takes in ops/cuda/attention.cu; without
// the switch a dropout takes the composed form); the fused linear's
// cuBLASLt epilogue (linear_bias_act_takes in ops/cuda/linear_lt.cc; without
// the switch CUDA runs the composed GEMM and epilogue kernels). Whoever sees
// them pass on a GPU removes their pending_kernels() checks and this list's
// entries.
#pragma once

namespace gpipe::ops::cuda {

// Whether the pending kernels run: GPIPE_CUDA_PENDING, unless a test chose.
bool pending_kernels();

// For tests that compare a pending kernel with the validated one in one
// process (tests/cuda/fused_test.cc): overrides the environment.
void set_pending_kernels(bool on);

}  // namespace gpipe::ops::cuda
