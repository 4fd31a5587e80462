// Batched GEMM on the CPU: one product goes to parallel_gemm (panels over the
// intra-op pool); many small products are spread over the pool one whole
// product per task, since a single small GEMM cannot use several threads well.
#include <chrono>

#include "core/rng.h"
#include "ops/cpu/blas.h"
#include "ops/cpu/isa/prelude.h"  // this file is built per ISA level: Note [CPU ISA kernels]
#include "ops/dispatch.h"
#include "ops/linalg_kernels.h"

namespace gpipe::ops::cpu::GPIPE_ISA_NS {
namespace {

// bfloat16 operands, float32 result (Note [Mixed precision] in core/precision.h).
void batched_gemm_bf16(const GemmShape& s, const Tensor& a, const Tensor& b, Tensor& c) {
  const auto* pa = reinterpret_cast<const uint16_t*>(a.data<bfloat16>());
  const auto* pb = reinterpret_cast<const uint16_t*>(b.data<bfloat16>());
  float* pc = c.data<float>();
  const int64_t lda = s.ta ? s.m : s.k, ldb = s.tb ? s.k : s.n;
  const int64_t sa = s.m * s.k, sb = s.b_shared ? 0 : s.k * s.n, sc = s.m * s.n;
  if (s.batch == 1) {
    cpu::gemm_bf16(s.ta, s.tb, s.m, s.n, s.k, 1.0f, pa, lda, pb, ldb, 0.0f, pc, s.n, true);
    return;
  }
  parallel_for(0, s.batch, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i)
      cpu::gemm_bf16(s.ta, s.tb, s.m, s.n, s.k, 1.0f, pa + i * sa, lda, pb + i * sb, ldb, 0.0f,
                     pc + i * sc, s.n, false);
  });
}

// bfloat16 operands and result (Note [bfloat16 results] in gemm_kernels.h):
// each float32 sum rounded once, in the GEMM's epilogue.
void batched_gemm_bf16_out_cpu(const GemmShape& s, const Tensor& a, const Tensor& b, Tensor& c) {
  const auto* pa = reinterpret_cast<const uint16_t*>(a.data<bfloat16>());
  const auto* pb = reinterpret_cast<const uint16_t*>(b.data<bfloat16>());
  auto* pc = reinterpret_cast<uint16_t*>(c.data<bfloat16>());
  const int64_t lda = s.ta ? s.m : s.k, ldb = s.tb ? s.k : s.n;
  const int64_t sa = s.m * s.k, sb = s.b_shared ? 0 : s.k * s.n, sc = s.m * s.n;
  const auto product = [&](int64_t i, bool parallel) {
    GemmEpilogue ep;
    ep.bf16_out = pc + i * sc;
    ep.ld_bf16_out = s.n;
    cpu::gemm_bf16_out(s.ta, s.tb, s.m, s.n, s.k, pa + i * sa, lda, pb + i * sb, ldb, ep, parallel);
  };
  if (s.batch == 1) return product(0, true);
  parallel_for(0, s.batch, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) product(i, false);
  });
}

void batched_gemm_cpu(const GemmShape& s, const Tensor& a, const Tensor& b, Tensor& c) {
  if (a.dtype() == DType::kBFloat16) return batched_gemm_bf16(s, a, b, c);
  dispatch_floating(a.dtype(), "matmul", [&](auto z) {
    using T = decltype(z);
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* pc = c.data<T>();
    const int64_t lda = s.ta ? s.m : s.k, ldb = s.tb ? s.k : s.n;
    const int64_t sa = s.m * s.k, sb = s.b_shared ? 0 : s.k * s.n, sc = s.m * s.n;
    if (s.batch == 1) {
      cpu::parallel_gemm<T>(s.ta, s.tb, s.m, s.n, s.k, T(1), pa, lda, pb, ldb, T(0), pc, s.n);
      return;
    }
    parallel_for(0, s.batch, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i)
        cpu::gemm<T>(s.ta, s.tb, s.m, s.n, s.k, T(1), pa + i * sa, lda, pb + i * sb, ldb, T(0),
                     pc + i * sc, s.n);
    });
  });
}

void linear_bias_act_cpu(const Tensor& x, const Tensor& w, const Tensor& bias, bool relu,
                         double dropout, uint64_t dropout_key, const Tensor& residual, Tensor& y) {
  const int64_t rows = x.size(0), in = x.size(1), out = w.size(0);
  GemmEpilogue ep;
  ep.bias = bias.defined() ? bias.data<float>() : nullptr;
  ep.relu = relu;
  ep.ld_residual = out;
  if (dropout > 0) {  // dropout_apply's test and scale (ops/cpu/dropout.cc)
    ep.dropout = true;
    ep.dropout_key = dropout_key;
    ep.dropout_threshold = dropout_keep_threshold(dropout);
    ep.dropout_scale = static_cast<float>(1.0 / (1.0 - dropout));
    ep.ld_dropout = out;
  }
  if (x.dtype() == DType::kBFloat16) {  // Note [bfloat16 results]: rounded, biased, rounded again
    if (residual.defined())
      ep.residual_bf16 = reinterpret_cast<const uint16_t*>(residual.data<bfloat16>());
    ep.bf16_out = reinterpret_cast<uint16_t*>(y.data<bfloat16>());
    ep.ld_bf16_out = out;
    cpu::gemm_bf16_out(false, true, rows, out, in,
                       reinterpret_cast<const uint16_t*>(x.data<bfloat16>()), in,
                       reinterpret_cast<const uint16_t*>(w.data<bfloat16>()), in, ep, true);
    return;
  }
  if (residual.defined()) ep.residual = residual.data<float>();
  parallel_gemm_epilogue(false, true, rows, out, in, x.data<float>(), in, w.data<float>(), in,
                         y.data<float>(), out, ep);
}

}  // namespace

GPIPE_ISA_KERNEL(batched_gemm, batched_gemm_cpu);
GPIPE_ISA_KERNEL(batched_gemm_bf16_out, batched_gemm_bf16_out_cpu);
GPIPE_ISA_KERNEL(linear_bias_act, linear_bias_act_cpu);

}  // namespace gpipe::ops::cpu::GPIPE_ISA_NS
