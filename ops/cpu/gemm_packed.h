// gpipe's own packed fp32 GEMM (internal to ops/cpu; blas.h is the public
// entry). Same contract as ops::cpu::gemm<float>:
//
//   C[m, n] = alpha * op(A)[m, k] * op(B)[k, n] + beta * C
//
// row-major with row strides lda/ldb/ldc as stored (op(A) = A^T when ta, so A
// is then stored k x m). beta == 0 overwrites C without reading it. The
// micro-kernel is chosen per call from gpipe::cpu_isa() (core/cpu_isa.h).
#pragma once

#include <cstdint>
#include <string>

#include "ops/cpu/gemm_kernels.h"

namespace gpipe::ops::cpu {

using packed::EpilogueFn;
using packed::GemmEpilogue;

// parallel: split the product over the calling thread's intra-op pool
// (core/parallel.h); small products run on the caller either way.
// epilogue: applied to each tile after its last k-slice (Note [GEMM
// epilogue] in gemm_kernels.h); needs beta == 0.
void packed_sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                  int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
                  bool parallel, const GemmEpilogue* epilogue = nullptr);

// The kernel set packed_sgemm uses now (tile sizes for tests, name for logs).
const packed::KernelSet& packed_kernels();

// The same contract for bfloat16 operands (raw bits) into a float32 C, every
// product exact in float32 and accumulated in float32. Three paths:
//   kAmx      AMX-BF16 tiles (tdpbf16ps, ops/cpu/gemm_amx.cc);
//   kDot      AVX512_BF16 dot products (vdpbf16ps): twice the float32 rate;
//   kConvert  operands widened to float32 while packing, then the active
//             level's float32 kernel (every CPU).
// kAuto takes bf16_path(): kAmx where cpu_amx() (core/cpu_isa.h: the CPU
// has AMX-BF16, Linux granted tile data, the level is avx512 and
// GPIPE_CPU_AMX is not off), else kDot when the CPU has AVX512_BF16 and the
// active level is avx512 (GPIPE_CPU_ISA=avx2 or lower converts). Asking for
// kAmx or kDot where it cannot run throws gpipe::Error saying why.
enum class Bf16Path { kAuto, kAmx, kDot, kConvert };
void packed_gemm_bf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                      const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float beta,
                      float* c, int64_t ldc, bool parallel, Bf16Path path = Bf16Path::kAuto);
// The same product written as bfloat16 (Note [bfloat16 results] in
// gemm_kernels.h): epilogue.bf16_out receives round(op(A) op(B)), with the
// epilogue's bias and ReLU as that note says; the same bits as
// packed_gemm_bf16 into a float32 C cast to bfloat16 (then bias_activation).
// alpha 1, no C, no residual.
void packed_gemm_bf16_out(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const uint16_t* a,
                          int64_t lda, const uint16_t* b, int64_t ldb, const GemmEpilogue& epilogue,
                          bool parallel, Bf16Path path = Bf16Path::kAuto);
Bf16Path bf16_path();
// "amx-bf16", "avx512-bf16" or "bf16-convert-<level>", for logs.
std::string bf16_gemm_name();

// Whether float32 products with op(A) = A read A's rows in the micro-kernel
// instead of packing them (Note [Direct A] in gemm_kernels.h; on where the
// level has the kernels, which give the same bits). GPIPE_GEMM_DIRECT_A=0
// turns it off at start-up, set_direct_a(false) at any time (tests, the
// benchmarks' side-by-side runs).
bool direct_a_enabled();
void set_direct_a(bool on);
// Products that have read A directly since the process began.
int64_t direct_a_products();

// Whether the tiles of one group of A panels prefetch the next group's
// source into L2 (Note [Prefetched A sources] in gemm_pack.cc): on by
// default except on Intel CPUs, where it measured slower.
// GPIPE_GEMM_PREFETCH_A=0|1 sets it at start-up, set_prefetch_a at any time.
// It moves no bits.
bool prefetch_a_enabled();
void set_prefetch_a(bool on);

// Products run as two k-slices side by side on two threads since the
// process began (Note [Two k-slices on two threads] in gemm_split.cc).
int64_t split_k_products();

// Tests: the kernel set the kAmx path runs (ops/cpu/gemm_amx_emulated.h's
// emulation), which then runs on a CPU without AMX; nullptr returns to the
// hardware's. as_auto: kAuto takes it too, as it takes the hardware's where
// cpu_amx() (at the avx512 level, GPIPE_CPU_AMX not off), so every bfloat16
// product of a model runs on it.
void set_amx_kernels_for_testing(const packed::Bf16DotKernelSet* kernels, bool as_auto = false);

}  // namespace gpipe::ops::cpu
