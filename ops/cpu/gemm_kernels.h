// The interface between the packed fp32 GEMM driver (gemm_packed.cc) and its
// per-ISA micro-kernels (gemm_avx512.cc, gemm_avx2.cc, gemm_baseline.cc).
//
// Each ISA file is compiled with its own target flags. Note [GEMM ISA files]:
// an inline or template function from a shared header instantiated in such a
// file becomes a weak symbol the linker may also pick for ordinary code,
// which then executes AVX-512 on a CPU without it (SIGILL). So this header
// holds only plain declarations, and the ISA files use nothing but
// intrinsics and loops over raw pointers in their own namespaces.
#pragma once

#include <cstdint>

namespace gpipe::ops::cpu::packed {

// C[i, j] (row stride ldc) = alpha * sum_p a[p * mr + i] * b[p * nr + j]
//                            + beta * C[i, j]     for i < mr, j < nr,
// where a is one packed mr-row panel of op(A) and b one packed nr-column panel
// of op(B), both kc long. beta == 0 does not read C (it may hold NaN). Panels
// are 64-byte aligned; C need not be.
using MicroKernel = void (*)(int64_t kc, const float* a, const float* b, float* c, int64_t ldc,
                             float alpha, float beta);

// Panel packing. pack_transposed: dst[p * stride + r] = src[r * ld + p] for
// r < lanes, p < kc (op(A) = A and op(B) = B^T); lanes..stride are left for
// the caller to zero. pack_copy: dst[p * stride + r] = src[p * ld + r] for
// r < lanes, and zero for lanes <= r < stride.
using PackFn = void (*)(const float* src, int64_t ld, int64_t lanes, int64_t kc, float* dst,
                        int64_t stride);

// One ISA's micro-kernel, its packing, its register tile (mr x nr) and the cache blocking
// the driver uses with it: kc (depth of a packed panel; an mr x kc A panel
// stays in L1), nc (columns of the packed B block, kc x nc stays in L2) and
// mc (rows of the packed A block, which lives in L3).
struct KernelSet {
  const char* name;  // "avx512", "avx2", "baseline"
  int mr, nr;
  int kc, nc, mc;
  MicroKernel kernel;
  PackFn pack_transposed, pack_copy;
};

extern const KernelSet kAvx512Kernels;
extern const KernelSet kAvx2Kernels;
extern const KernelSet kBaselineKernels;

}  // namespace gpipe::ops::cpu::packed
