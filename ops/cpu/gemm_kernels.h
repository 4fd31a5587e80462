// The interface between the packed fp32 GEMM driver (gemm_packed.cc) and its
// per-ISA micro-kernels (gemm_avx512.cc, gemm_avx2.cc, gemm_baseline.cc).
//
// Each ISA file is compiled with its own target flags.
// Note [GEMM ISA files]: an inline or template function from a shared header
// instantiated in such a file becomes a weak symbol the linker may also pick for ordinary code,
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

// Note [Short panels]. The last A panel of a product whose m is not a
// multiple of mr holds `rows` < mr real rows (m = 1024 with mr = 14: 2 of
// 14), and the full kernel would spend mr rows of FMAs on it. A level may
// give a kernel for the first `rows` rows of a panel (same layout, same
// FMA per element in the same order, so the same bits as the full kernel's
// rows): it writes rows x nr of C and nothing else.
using MicroRowsKernel = void (*)(int rows, int64_t kc, const float* a, const float* b, float* c,
                                 int64_t ldc, float alpha, float beta);

// Panel packing. pack_transposed: dst[p * stride + r] = src[r * ld + p] for
// r < lanes, p < kc (op(A) = A and op(B) = B^T); lanes..stride are left for
// the caller to zero. pack_copy: dst[p * stride + r] = src[p * ld + r] for
// r < lanes, and zero for lanes <= r < stride.
using PackFn = void (*)(const float* src, int64_t ld, int64_t lanes, int64_t kc, float* dst,
                        int64_t stride);
// The same two packings reading bfloat16 (raw bits) and writing float32:
// how a level without bfloat16 dot products multiplies bfloat16 operands
// (exactly: every bfloat16 is a float32).
using PackBf16Fn = void (*)(const uint16_t* src, int64_t ld, int64_t lanes, int64_t kc, float* dst,
                            int64_t stride);

// Note [GEMM epilogue]. What a product does to its C tile after the last
// slice of k, while the tile is still in the L1 cache (the packed GEMM with
// beta = 0): C = act(C + bias) + residual, with bias a float per column of C
// (or none), act ReLU or none, and residual an m x n matrix of row stride
// ld_residual (or none), and dropout between the activation and the
// residual. The same float operations in the same order as the separate
// passes (bias_activation, dropout, then add), so the fused product has the
// same bits as the composed one.
//
// Note [bfloat16 results]. With bf16_out the result goes to a bfloat16
// matrix (row stride ld_bf16_out) instead of C, each element rounded once
// (to nearest even; NaN stays a quiet NaN): what the float32 product cast to
// bfloat16 holds. C is then scratch, and under a bias or ReLU the product is
// rounded to bfloat16 and widened before them, then rounded again: the
// composed 16-bit linear's order (a bfloat16 product, then bias_activation
// on it). A float32 residual needs a float32 C (no bf16_out).
struct GemmEpilogue {
  const float* bias = nullptr;
  bool relu = false;
  const float* residual = nullptr;
  const uint16_t* residual_bf16 = nullptr;  // with bf16_out only
  int64_t ld_residual = 0;
  uint16_t* bf16_out = nullptr;
  int64_t ld_bf16_out = 0;
  // Note [Fused dropout] in ops/linalg.cc: element (i, j) of the product is
  // kept, times dropout_scale, when uniform (i * ld_dropout + j) of the
  // Philox stream dropout_key is at least dropout_threshold, else zeroed;
  // after the activation, before the residual (dropout_apply's arithmetic).
  bool dropout = false;
  uint64_t dropout_key = 0;
  float dropout_threshold = 0.0f, dropout_scale = 1.0f;
  int64_t ld_dropout = 0;
  bool active() const {
    return bias != nullptr || relu || residual != nullptr || residual_bf16 != nullptr ||
           bf16_out != nullptr || dropout;
  }
};
// The epilogue on rows x cols of C at c (row stride ldc), the product's
// elements (i0, j0) onwards (the coordinates of the bias, residual and
// bf16_out; c itself may be a scratch copy of that part of C).
using EpilogueFn = void (*)(const GemmEpilogue& ep, float* c, int64_t ldc, int64_t i0, int64_t j0,
                            int64_t rows, int64_t cols);

// Note [Epilogue in registers]. The epilogue as a pass over the stored tile
// reloads and stores every element again: in W2's step that pass cost the
// forward products with a bias or ReLU 3 to 5 points of the FMA peak (a
// 6 x 16 tile of a k = 256 product is some 1500 cycles of FMAs). Where the
// level has one, a full tile of the last k-slice whose epilogue is a bias,
// ReLU and float32 residual (no dropout, no bf16_out) runs this kernel
// instead: the same FMAs, then C = alpha * acc + beta * C, + bias, ReLU,
// + residual on the accumulators before the one store. The same float
// operations in the same order as the pass (the ISA files are built without
// contraction, -ffp-contract=off; max(x, 0) gives +0 for -0 and NaN as x > 0 ?
// x : 0 does), so the same bits. (i0, j0) are the tile's product coordinates.
using MicroEpilogueKernel = void (*)(int64_t kc, const float* a, const float* b, float* c,
                                     int64_t ldc, float alpha, float beta, const GemmEpilogue& ep,
                                     int64_t i0, int64_t j0);
// Whether kernel_ep takes this epilogue (Note [Epilogue in registers]).
inline bool in_registers(const GemmEpilogue& ep) {
  return !ep.dropout && ep.bf16_out == nullptr && ep.residual_bf16 == nullptr;
}

// Note [Direct A]. Packing op(A) = A (a forward product's activations, a
// backward product's output gradient) transposes it: an A panel holds mr
// rows' values of each depth side by side, and the transposing packer cost
// 8% of a warm 1024 x 256 x 256 product on the Intel Xeon, more with A out
// of the caches. The kernel only broadcasts those values, one at a time, so
// it can as well read them from A's own rows, each row one stream in order.
// Where a level has these kernels (avx512, avx2), a float32 product with
// op(A) = A packs no A panels: each tile gets a pointer to its first row of
// A at the slice's first depth, and A's row stride. The same FMAs in the
// same order, so the same bits as the packed panel's (a short last panel at
// a level without kernel_rows goes through the tile as the packed one does,
// so even an inexact alpha rounds the same); only the tile's first `rows`
// rows and the slice's depths of A are read. On the Intel Xeon
// (`gpipe_bench gemm --cold`, W2's shapes, two alternating runs each way) the
// forward and input-gradient products ran 11-20% faster with their
// operands in the caches and 13-30% faster out of them; forced AVX2 8-9%.
// Not measured on AMD: with A's stride a multiple of 4 KB the tile's rows
// share an L1 set, and Zen's L1d has 8 ways to the Xeon's 12 (where those
// strides were unchanged or faster); GPIPE_GEMM_DIRECT_A=0 compares.
using DirectKernel = void (*)(int rows, int64_t kc, const float* a, int64_t lda, const float* b,
                              float* c, int64_t ldc, float alpha, float beta);
using DirectEpilogueKernel = void (*)(int64_t kc, const float* a, int64_t lda, const float* b,
                                      float* c, int64_t ldc, float alpha, float beta,
                                      const GemmEpilogue& ep, int64_t i0, int64_t j0);

// One ISA's micro-kernel, its packing, its register tile (mr x nr) and the
// deepest panel it was tuned for (kc_cap); the cache blocking itself comes
// from the CPU's caches (gemm_blocking.h).
struct KernelSet {
  const char* name;  // "avx512", "avx2", "baseline"
  int mr, nr;
  int kc_cap;
  MicroKernel kernel;
  PackFn pack_transposed, pack_copy;
  PackBf16Fn pack_transposed_bf16, pack_copy_bf16;
  EpilogueFn epilogue;                      // Note [GEMM epilogue], compiled for this level
  MicroRowsKernel kernel_rows = nullptr;    // Note [Short panels]; none: the full kernel
  MicroEpilogueKernel kernel_ep = nullptr;  // Note [Epilogue in registers]; none: the pass
  DirectKernel kernel_direct = nullptr;     // Note [Direct A] (rows in [1, mr]); none: packed A
  DirectEpilogueKernel kernel_direct_ep = nullptr;  // with kernel_direct, full tiles
};

extern const KernelSet kAvx512Kernels;
extern const KernelSet kAvx2Kernels;
extern const KernelSet kBaselineKernels;

// bfloat16 dot products (AVX512_BF16's vdpbf16ps, AMX-BF16's tdpbf16ps),
// which consume k in pairs. B panels hold bfloat16 bits pair-interleaved:
// element (lane r, depth p) of a panel of `stride` lanes sits at
// dst[(p / 2) * 2 * stride + 2 * r + p % 2]. A panels do too for
// AVX512_BF16; for AMX they are row-major, element (r, p) at
// dst[r * depth + p] (Note [AMX panels] in gemm_amx.cc). The packed depth
// is kc rounded up to a multiple of k_align (2, or 32 for AMX: one tile's
// depth), padded with zeros.
//
// C[i, j] = alpha * sum_p a(i, p) b(p, j) + beta * C[i, j] over the packed
// depth, products and sums in float32 (the instructions treat subnormal
// inputs as zero and round each pair's sum; see docs/ARCHITECTURE.md).
using Bf16MicroKernel = void (*)(int64_t kc, const uint16_t* a, const uint16_t* b, float* c,
                                 int64_t ldc, float alpha, float beta);
// *_rows: element (r, p) at src[r * ld + p]; *_cols: at src[p * ld + r].
// Each zeroes lanes..stride and the depth from kc to the packed depth.
using PackPairsFn = void (*)(const uint16_t* src, int64_t ld, int64_t lanes, int64_t kc,
                             uint16_t* dst, int64_t stride);
struct Bf16DotKernelSet {
  const char* name;  // "avx512-bf16", "amx-bf16"
  int mr, nr;
  int kc_cap;
  Bf16MicroKernel kernel;
  PackPairsFn pack_rows, pack_cols;      // B panels
  PackPairsFn pack_a_rows, pack_a_cols;  // A panels
  int k_align;
  // Called on each thread before and after its part of a block (nullptr:
  // nothing): AMX loads its tile configuration, then releases the tiles, so
  // whatever else runs on the thread between products (another library's
  // tiles) neither sees gpipe's configuration nor leaves gpipe its own.
  void (*begin)();
  void (*end)();
  // The B panel stays in L1 beside the A panel rather than streaming from L2
  // (Note [Tile kernels' blocking] in gemm_blocking.cc): AMX's.
  bool b_panel_in_l1 = false;
};

extern const Bf16DotKernelSet kAvx512Bf16Kernels;
extern const Bf16DotKernelSet kAmxBf16Kernels;  // gemm_amx.cc: only where cpu_amx()

}  // namespace gpipe::ops::cpu::packed
